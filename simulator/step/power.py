"""What a simulated step draws (issue 60 item 2): the share of it the mean GPU computes, which
the energy model of simulator/run/energy.py prices, and the step's power and energy at the
default site. Here, in the step's part, because the share reads the step's pipeline stages;
the run's costs below it take numbers only."""

from __future__ import annotations

import math

from profiles import UserError
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
    if rel.async_save and cfg.hardware.gpu.host_bw_GBps is None:
        raise UserError(f"an asynchronous save stages each GPU's share of the checkpoint in "
                        f"host memory: profile {cfg.hardware.name} gives no [gpu] host_bw_GBps "
                        f"(its GPU's host link, GB/s per direction)")
    run = run_with_failures(work_s, cfg.gpus,
                            checkpoint_bytes(cfg.model.n_params, state_bytes=state), rel,
                            host_GBps=cfg.hardware.gpu.host_bw_GBps)
    power = cfg.hardware.power
    energy = (None if power is None else
              run_energy(power, site, cfg.gpus, cfg.hardware.node.gpus_per_node,
                         mean_busy(cfg, r), work_s, run.wall_s, tokens))
    return run, energy


def run_columns(cfg, r, step_s: float, tokens: float, rel, site) -> dict:
    """`simulate --tokens`: the run of `tokens` at this step (`step_s`: the steady step, or
    the run's mean over a density schedule) as `plan` prices each plan: its steps and hours,
    with failures and checkpoints (`rel`) the interruptions, the interval, what a save stops
    training for, goodput and wall hours, and at `site` its energy and emissions."""
    steps = math.ceil(tokens / (cfg.sequences * cfg.seq))
    work_s = steps * step_s
    run, energy = run_and_energy(cfg, r, work_s, rel, site, tokens)
    return {"tokens": tokens, "steps": steps, "hours": work_s / 3600,
            "gpu_hours": work_s / 3600 * cfg.gpus, "interruptions": run.interruptions,
            "checkpoint_every_min": run.interval_s / 60,
            "checkpoint_write_s": run.checkpoint_write_s,
            "checkpoint_stall_s": run.save_stall_s, "goodput": run.goodput,
            "wall_hours": run.wall_s / 3600,
            **({} if energy is None else {"facility_MW": energy.facility_MW,
                                          "energy_MWh": energy.energy_MWh,
                                          "tco2e": energy.tco2e})}
