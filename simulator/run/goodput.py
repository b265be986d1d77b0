"""A run's wall time with interruptions, restarts and checkpoints (issue 60 item 1).

A job of n GPUs fails at n times one GPU's rate of unexpected interruptions (a Poisson process:
independent failures, the job's mean time to failure M = 1 / (n lambda)). It writes a
checkpoint of C bytes every tau seconds of work, each write stalling training for
delta = C / B (B: the storage's write bandwidth to this job; a synchronous save), and after an
interruption it relaunches and reloads for R seconds and redoes the work since the last
checkpoint. Daly's model of this (J. T. Daly, "A higher order estimate of the optimum
checkpoint interval for restart dumps", Future Generation Computer Systems 22, 2006) gives the
expected wall time of T_s seconds of work,

    T_w = M e^(R / M) (e^((tau + delta) / M) - 1) T_s / tau,

and the interval that minimises it, to higher order,

    tau = sqrt(2 delta M) [1 + sqrt(delta / (2 M)) / 3 + (delta / (2 M)) / 9] - delta

for delta < 2 M (tau = M beyond; Young's 1974 first-order optimum is sqrt(2 delta M)).
Goodput is T_s / T_w, the expected interruptions T_w / M. The interval is the user's where
given (`Reliability.interval_min`), never longer than the run.

An asynchronous save (Megatron-Core's --async-save, PyTorch DCP's async_save, torchtitan's
async checkpointing) stalls training only while each GPU copies its share of the checkpoint,
C / n, to host memory over its host link (S, the profile's [gpu] host_bw_GBps); the write to
storage, C / B, runs behind the training, and a save that comes before the last write ends
waits for it. So delta = C / (n S) + max(0, C / B - tau) (the best tau: Daly's for C / (n S),
and at least C / B), and a failure redoes the work since the last checkpoint that reached
storage, which lags the last one staged by C / B: to first order, C / B more redone work an
interruption, priced as R + C / B in Daly's formula.
What is not modelled: planned interruptions (maintenance), failures correlated across GPUs,
GPUs that share a host link copying at once, and the slower first steps after a restart.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from vocabulary.errors import UserError

DAY_S = 86_400.0


@dataclass(frozen=True)
class Reliability:
    """What a cluster's runs lose to failures: unexpected interruptions per GPU and day, the
    minutes a restart takes (relaunch, reload), and the checkpoint write bandwidth each GPU
    gets (GB/s, 1e9 bytes), up to the storage's whole (`storage_GBps`, None: no cap);
    `source` says where each came from."""

    failures_per_gpu_day: float
    restart_min: float
    checkpoint_GBps: float  # per GPU
    storage_GBps: float | None = None
    source: str = ""
    interval_min: float | None = None  # minutes of work between checkpoints (None: Daly's)
    async_save: bool = False  # staged to host memory, written to storage behind the training
    # the failure rate is the studies' median, not the user's: a profile's own replaces it
    # (simulator/run/defaults.py on_profile)
    rate_from_profile: bool = False

    def write_GBps(self, gpus: int) -> float:
        """The job's checkpoint write bandwidth: every GPU's, up to the storage's."""
        total = self.checkpoint_GBps * gpus
        return total if self.storage_GBps is None else min(total, self.storage_GBps)

    def __post_init__(self) -> None:
        for name, value, what in (
                ("failures_per_gpu_day", self.failures_per_gpu_day,
                 "unexpected interruptions per GPU and day, above 0 (e.g. 5e-4)"),
                ("restart_min", self.restart_min, "minutes a restart takes, 0 or more"),
                ("checkpoint_GBps", self.checkpoint_GBps,
                 "GB/s each GPU writes its checkpoint at, above 0"),
                ("storage_GBps", 1.0 if self.storage_GBps is None else self.storage_GBps,
                 "GB/s the storage takes from the whole job, above 0")):
            if isinstance(value, bool) or not isinstance(value, int | float) \
                    or not math.isfinite(value):
                raise UserError(f"{name} must be a number ({what}), got {value!r}")
        if self.failures_per_gpu_day <= 0:
            raise UserError(f"failures_per_gpu_day must be above 0 (a run that never fails "
                            f"needs no checkpoint model), got {self.failures_per_gpu_day!r}")
        if self.restart_min < 0:
            raise UserError(f"restart_min must be 0 or more, got {self.restart_min!r}")
        if self.checkpoint_GBps <= 0:
            raise UserError(f"checkpoint_GBps must be above 0, got {self.checkpoint_GBps!r}")
        if self.storage_GBps is not None and self.storage_GBps <= 0:
            raise UserError(f"storage_GBps must be above 0, got {self.storage_GBps!r}")
        if self.interval_min is not None and (
                isinstance(self.interval_min, bool)
                or not isinstance(self.interval_min, int | float)
                or not math.isfinite(self.interval_min) or self.interval_min <= 0):
            raise UserError(f"interval_min must be minutes of work between checkpoints, above "
                            f"0, got {self.interval_min!r}")
        if not isinstance(self.async_save, bool):
            raise UserError(f"async_save must be true or false, got {self.async_save!r}")


@dataclass(frozen=True)
class Goodput:
    """A run's totals with failures: seconds of work (the steps' own), the job's mean time to
    failure, the checkpoint's size and write time, the interval between checkpoints, the
    expected wall time and interruptions, and goodput (work over wall time)."""

    work_s: float
    gpus: int
    mttf_s: float
    checkpoint_bytes: float
    checkpoint_write_s: float  # C / B: the write to storage
    interval_s: float
    wall_s: float
    interruptions: float
    stall_s: float | None = None  # what a save stops training for (None: the write, sync)

    @property
    def save_stall_s(self) -> float:
        return self.checkpoint_write_s if self.stall_s is None else self.stall_s

    @property
    def goodput(self) -> float:
        return self.work_s / self.wall_s


def daly_interval(write_s: float, mttf_s: float) -> float:
    """Daly's (2006) higher-order optimum of the work between checkpoints (module docstring)."""
    if write_s <= 0:
        raise UserError(f"a checkpoint write takes some time, got {write_s!r} s")
    if write_s >= 2 * mttf_s:
        return mttf_s
    x = write_s / (2 * mttf_s)
    return math.sqrt(2 * write_s * mttf_s) * (1 + math.sqrt(x) / 3 + x / 9) - write_s


def wall_time_s(work_s: float, interval_s: float, write_s: float, restart_s: float,
                mttf_s: float) -> float:
    """Daly's (2006) expected wall time of `work_s` seconds of work (module docstring). A job
    that fails far more often than it can restart and save never ends: refused, not inf."""
    try:
        return (mttf_s * math.exp(restart_s / mttf_s)
                * math.expm1((interval_s + write_s) / mttf_s) * work_s / interval_s)
    except OverflowError:
        raise UserError(f"the job fails every {mttf_s:.3g} s on average, against a restart of "
                        f"{restart_s:g} s and {interval_s + write_s:.3g} s of work and saving "
                        "between checkpoints: it would never finish; give a lower "
                        "--failures-per-gpu-day (published runs: 3e-4 to 2e-3)") from None


def run_with_failures(work_s: float, gpus: int, checkpoint_bytes: float, rel: Reliability,
                      interval_s: float | None = None, host_GBps: float | None = None,
                      whole_run: bool = True) -> Goodput:
    """The run of `work_s` seconds of steps on `gpus` GPUs with `rel`'s failures, saving
    `checkpoint_bytes` every `interval_s` seconds of work (None: `rel.interval_min`, else
    Daly's optimum), synchronously or, with `rel.async_save`, staged over each GPU's host link
    of `host_GBps` (module docstring). An interval longer than the run is refused where
    `work_s` is the `whole_run` (a bound over an hour of any run's work is not)."""
    if work_s <= 0 or gpus < 1:
        raise UserError(f"a run needs work and GPUs, got {work_s!r} s on {gpus!r} GPUs")
    mttf = DAY_S / (rel.failures_per_gpu_day * gpus)
    write = checkpoint_bytes / (rel.write_GBps(gpus) * 1e9)
    if interval_s is None and rel.interval_min is not None:
        interval_s = rel.interval_min * 60
    if interval_s is not None and not 0 < interval_s <= (work_s if whole_run else math.inf):
        raise UserError(f"the checkpoint interval must be above 0 and at most the run's "
                        f"{work_s / 3600:,.1f} hours of work, got {interval_s / 60:g} minutes")
    if not rel.async_save:
        tau = daly_interval(write, mttf) if interval_s is None else interval_s
        wall = wall_time_s(work_s, tau, write, rel.restart_min * 60, mttf)
        return Goodput(work_s, gpus, mttf, checkpoint_bytes, write, tau, wall, wall / mttf)
    if host_GBps is None:
        raise UserError("an asynchronous save stages each GPU's share of the checkpoint in "
                        "host memory: its hardware profile gives no [gpu] host_bw_GBps")
    stage = checkpoint_bytes / gpus / (host_GBps * 1e9)  # s: the copy training waits for
    # below the write's own time a save only waits longer (tau + delta stays write + stage),
    # so the best interval is Daly's for the stall, and at least the write
    tau = max(daly_interval(stage, mttf), write) if interval_s is None else interval_s
    stall = stage + max(0.0, write - tau)  # a save waits for the last write to end
    wall = wall_time_s(work_s, tau, stall, rel.restart_min * 60 + write, mttf)
    return Goodput(work_s, gpus, mttf, checkpoint_bytes, write, tau, wall, wall / mttf, stall)


def checkpoint_bytes(params: float, param_bytes: float = 2, state_bytes: float = 12) -> float:
    """Bytes of a full training checkpoint: the weights (bf16, 2 B) and the optimizer state
    (fp32 master weights and Adam's two moments, 12 B) of every parameter, as Megatron-Core's
    distributed checkpoint and PyTorch DCP save them (gradients are not saved)."""
    return params * (param_bytes + state_bytes)
