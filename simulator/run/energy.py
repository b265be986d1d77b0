"""A run's energy and carbon (issue 60 item 2): what the GPUs, the rest of their nodes and the
building draw over the run's wall time, and the emissions of that energy on a grid.

A GPU draws its waiting power plus a share of the rest up to its board limit in proportion to
the share of the step it computes:

    P_gpu = wait + (max - wait) x busy

(busy: the compute stream at work, simulator/step/power.py mean_busy: GEMMs, attention and the
collectives it runs inline run near the board limit; while it waits on the data-parallel
network or on other pipeline stages the GPU waits). Each node adds what is not a GPU (CPUs,
memory, NICs, fans, its share of the switches) at a constant draw, and the building multiplies
the IT load by its PUE. Over a run with failures (simulator/run/goodput.py), the time lost to
restarts and redone work draws the waiting power. Energy is facility energy (IT x PUE);
emissions are that energy times the grid's carbon intensity (location-based: the grid's
average, not a purchase of renewable energy).

What is not modelled: power capping and clock throttling below the board limit, the draw of
storage and of spare nodes, the embodied carbon of the hardware.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from vocabulary.errors import UserError


@dataclass(frozen=True)
class Site:
    """Where a run draws its power: the building's PUE (facility power over IT power, 1 or
    more) and the grid's carbon intensity (kg CO2e per kWh, location-based); `source` says
    where each came from."""

    pue: float
    grid_kg_per_kWh: float
    source: str = ""

    def __post_init__(self) -> None:
        if not (math.isfinite(self.pue) and 1.0 <= self.pue <= 5.0):
            raise UserError(f"--pue must be between 1 (no overhead) and 5, got {self.pue:g}: a "
                            "building cannot use less than its IT load")
        if not (math.isfinite(self.grid_kg_per_kWh) and 0.0 <= self.grid_kg_per_kWh <= 2.0):
            raise UserError(f"--grid must be a carbon intensity of 0 to 2 kg CO2e per kWh (or "
                            f"a named grid), got {self.grid_kg_per_kWh:g}")


@dataclass(frozen=True)
class RunEnergy:
    gpu_W: float  # one GPU's mean draw while training
    it_MW: float  # the job's IT power while training: GPUs and the rest of their nodes
    facility_MW: float  # it_MW x PUE
    energy_MWh: float  # facility energy over the wall time (restarts at the waiting draw)
    tco2e: float  # energy_MWh x grid intensity
    wh_per_token: float


def idle_power_W(power, gpus: int, gpus_per_node: int) -> float:
    """The job's IT draw with every GPU waiting: its floor while training (W)."""
    return gpus * power.gpu_wait_W + math.ceil(gpus / gpus_per_node) * power.node_other_W


def run_energy(power, site: Site, gpus: int, gpus_per_node: int, busy: float, train_s: float,
               wall_s: float, tokens: float) -> RunEnergy:
    """The run's power, energy and emissions. `power`: the hardware profile's [power] table
    (gpu_max_W, gpu_wait_W, node_other_W); `train_s`: the work's seconds, `wall_s` with
    failures (the difference draws the waiting power)."""
    gpu = power.gpu_wait_W + (power.gpu_max_W - power.gpu_wait_W) * busy  # W
    it_idle = idle_power_W(power, gpus, gpus_per_node)  # W: restarts and redone work
    it_train = it_idle + gpus * (gpu - power.gpu_wait_W)  # W
    lost_s = max(0.0, wall_s - train_s)
    joules = site.pue * (it_train * train_s + it_idle * lost_s)
    mwh = joules / 3.6e9
    return RunEnergy(gpu, it_train / 1e6, site.pue * it_train / 1e6, mwh,
                     mwh * site.grid_kg_per_kWh,  # MWh x kg/kWh = t
                     joules / 3600 / tokens if tokens > 0 else math.nan)
