"""What a simulated step draws (issue 60 item 2): the share of it the mean GPU computes, which
the energy model of simulator/run/energy.py prices, and the step's power and energy at the
default site. Here, in the step's part, because the share reads the step's pipeline stages;
the run's costs below it take numbers only."""

from __future__ import annotations

from simulator.memory.peak import OPTIMIZER_STATE_BYTES
from simulator.run.energy import RunEnergy, run_energy
from simulator.run.goodput import Goodput, checkpoint_bytes, run_with_failures
from simulator.run.sites import site_of
from simulator.step.simulate import stage_work_ratio


def mean_busy(cfg, r) -> float:
    """The share of a step the mean GPU computes: the simulated rank's compute stream at work
    (its layers, compression and optimizer kernels, and the tensor-, context- and
    expert-parallel collectives it runs inline; not the data-parallel communication it waits
    on, nor its pipeline bubble), scaled to the mean stage's compute where the stages differ
    (Megatron's uneven split gives the first fewer layers, the last holds the output layer:
    simulator/step/simulate.py stage_work_ratio)."""
    work = (r.compute_s + r.compression_s + r.tp_comm_s + r.cp_comm_s
            + (r.ep_comm_s or 0.0))  # s a step
    return min(1.0, work * stage_work_ratio(cfg) / r.step_time_s)


def step_energy(cfg, r) -> dict:
    """A simulated step's power and energy at the default site (profiles/external/
    grid-intensity.csv): one GPU's mean draw, the job's facility power and the facility energy
    of the step; nothing for a profile without [power]."""
    power = cfg.hardware.power
    if power is None:
        return {}
    got = run_energy(power, site_of(None, None), cfg.gpus, cfg.hardware.node.gpus_per_node,
                     mean_busy(cfg, r), r.step_time_s, r.step_time_s, 1.0)
    return {"gpu_power_W": got.gpu_W, "facility_kW": got.facility_MW * 1e3,
            "step_energy_kWh": got.energy_MWh * 1e3}


def run_and_energy(cfg, r, work_s: float, rel, site, tokens: float
                   ) -> tuple[Goodput, RunEnergy | None]:
    """`work_s` seconds of these steps as a run: with failures, restarts and checkpoints of
    the weights and optimizer state (simulator/run/goodput.py, `rel`), and what it draws at
    `site` over that wall time (None without a [power] table); what `plan` prices each plan
    by and the scaling report each point by."""
    state = OPTIMIZER_STATE_BYTES[cfg.scheme.optimizer, cfg.optimizer_dtype]
    run = run_with_failures(work_s, cfg.gpus,
                            checkpoint_bytes(cfg.model.n_params, state_bytes=state), rel)
    power = cfg.hardware.power
    energy = (None if power is None else
              run_energy(power, site, cfg.gpus, cfg.hardware.node.gpus_per_node,
                         mean_busy(cfg, r), work_s, run.wall_s, tokens))
    return run, energy
