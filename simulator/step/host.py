"""The host's side of a layer pass that runs eagerly (no CUDA graphs): how many kernels
Megatron-Core's MoE layer launches and what each costs the host, read off a Kineto trace of that
layer on a real GPU rather than off the step times it is checked against.

bench/moe_layer_trace.py built Megatron-Core 0.19.2's own MoELayer (local spec: the router with
DeepSeek-V3's sigmoid scores, the alltoall token dispatcher, SequentialMLP experts; no
Transformer Engine) on one H200 and traced forward and backward passes of 4,096 tokens
(profiles/measured/h200-megatron-moe-layer-2026-12-04.json, its `runs`). From it:

- kernels a MoE layer pass launches = a fixed part (router, permutes, the dispatcher's
  syncs, the shared expert) + a part per local expert (its GEMMs, forward 2 and backward 4,
  and their elementwise kernels): the least-squares line through the DeepSeek-V3-width rows
  of 8, 16 and 32 local experts; the fixed part without a shared expert from the gpt-oss row
  (16 local experts, no shared expert), at the same slope;
- the forward's share of them (the main thread's launches; the backward's run on autograd's
  thread) from the traced pass of 8 local experts;
- the host's time a kernel: the median of enqueue time / kernels over the narrow rows (the
  same counts at widths where the GPU runs each kernel faster than the host launches it),
  on the host of the run whose torch.nn.Linear benchmark was steady (its spread within 10% of
  its median); that benchmark (NVIDIA/TransformerEngine issue #2053: BF16 Linear forward, 8192
  tokens, 2048 -> 2048) is what scales it to another host, whose own figure is the profile's
  [compute] host_linear_us;
- how the host's and the GPU's time of a pass combine: a pass whose host needs H (its kernels
  x the time a kernel) and whose GPU is busy G takes (H^n + G^n)^(1/n), not max(H, G): the
  host cannot stay ahead of the GPU all the pass (the dispatcher's device-to-host syncs drain
  the queue, and a kernel launched late leaves the GPU idle even where the host is faster on
  the whole). n is fitted on the same run's wide rows (the passes whose GPU time is not
  negligible: wall = the traced wall time, H from the line above, G the traced GPU-busy time),
  least squares of the log of wall over the blend; max(H, G) is n = infinity. The DeepSeek-V3
  width pass of 16 local experts took 33.0 ms against H 24.8, G 21.6.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

TRACE_FILE = (Path(__file__).resolve().parents[2] / "profiles" / "measured"
              / "h200-megatron-moe-layer-2026-12-04.json")
# the DeepSeek-V3-width rows (hidden 7168, one shared expert) that give the line's slope
_SLOPE_ROWS = ("dsv3-e8", "dsv3-e16", "dsv3-e32")
_NO_SHARED_ROW = "gptoss-e16"
_NARROW = ("narrow-e8", "narrow-e16", "narrow-e32", "narrow-gptoss-e16", "narrow-e8-layer")
_STEADY = 0.10  # a run's Linear benchmark counts where its spread is within this of the median
_BLEND_RANGE = (1.0, 16.0)  # the exponents searched for the host/GPU blend (`_fit_exponent`)


def _median(xs: list[float]) -> float:
    """The median (statistics.median's, without its import: a few ms of every simulate)."""
    s, n = sorted(xs), len(xs)
    return s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2


@dataclass(frozen=True)
class MoeHostTrace:
    """What the trace says about an eager MoE layer pass (module docstring)."""

    per_expert: float  # kernels a pass per local expert
    fixed_shared: float  # kernels a pass besides the experts, with a shared expert
    fixed_plain: float  # the same without one
    forward_share: float  # of a pass's kernels, the forward's
    us_per_kernel: float  # the traced host's time per kernel (us)
    linear_us: float  # the traced host's torch.nn.Linear benchmark (us)
    run: str  # the run these came from (its date)
    blend: float = float("inf")  # n of a pass's (H^n + G^n)^(1/n) (module docstring)

    def kernels(self, local_experts: int, shared: bool) -> tuple[float, float]:
        """(forward, backward) kernels of one MoE layer pass over `local_experts` experts."""
        total = (self.fixed_shared if shared else self.fixed_plain) + (
            self.per_expert * local_experts)
        return total * self.forward_share, total * (1 - self.forward_share)

    def host_us(self, host_linear_us: float) -> float:
        """The host time a kernel on a host whose Linear benchmark takes `host_linear_us`."""
        return self.us_per_kernel * host_linear_us / self.linear_us

    def pass_s(self, host_s: float, gpu_s: float) -> float:
        """Seconds of a pass whose host needs `host_s` and whose GPU is busy `gpu_s`."""
        return blended(host_s, gpu_s, self.blend)


def blended(host: float, gpu: float, n: float) -> float:
    """(host^n + gpu^n)^(1/n), computed without overflow: max x (1 + (min/max)^n)^(1/n)."""
    hi, lo = max(host, gpu), min(host, gpu)
    if hi <= 0.0:
        return 0.0
    return hi * (1.0 + (lo / hi) ** n) ** (1.0 / n) if n != float("inf") else hi


def _fit_exponent(rows: list[tuple[float, float, float]]) -> float:
    """The n minimising the squared log error of blended(H, G, n) against the wall W over
    `rows` (H, G, W): a golden-section search over _BLEND_RANGE (the error is one smooth dip
    there; scipy's minimize_scalar would cost its import, ~0.5 s, on every run)."""
    def loss(n: float) -> float:
        return sum(math.log(blended(h, g, n) / w) ** 2 for h, g, w in rows)

    lo, hi = _BLEND_RANGE
    ratio = (math.sqrt(5) - 1) / 2
    a, b = hi - ratio * (hi - lo), lo + ratio * (hi - lo)
    for _ in range(60):  # the bracket shrinks by 0.618 each step: far below 1e-6 of it
        if loss(a) < loss(b):
            hi, b = b, a
            a = hi - ratio * (hi - lo)
        else:
            lo, a = a, b
            b = lo + ratio * (hi - lo)
    return (lo + hi) / 2


def per_kernel_us(rows: dict[str, dict]) -> float:
    """A run's host time a kernel (us): the median of enqueue time / kernels over its narrow
    rows (module docstring); `rows` by config."""
    return _median([rows[c]["enqueue_ms_median"] * 1e3 / rows[c]["kernels"] for c in _NARROW])


def wide_passes(rows: dict[str, dict], us: float) -> dict[str, tuple[float, float, float]]:
    """A run's passes other than the narrow ones, by config: (host H = kernels x `us`, GPU
    busy G, traced wall), in ms."""
    return {c: (r["kernels"] * us * 1e-3, r["gpu_busy_ms"], r["wall_ms_median"])
            for c, r in rows.items() if c not in _NARROW}


def _steady(run: dict) -> bool:
    lin = run["linear_2053"]
    lo, hi = lin["cpu_us_grad_spread"]
    mid = lin["cpu_us_grad"]
    return (hi - lo) <= 2 * _STEADY * mid


@lru_cache(maxsize=1)
def moe_host_trace(path: Path = TRACE_FILE) -> MoeHostTrace:
    """The trace's figures (module docstring), computed from the measured file each process."""
    runs = json.loads(path.read_text())["runs"]
    steady = [r for r in runs if _steady(r)]
    if not steady:
        raise ValueError(f"{path}: no run's Linear benchmark is steady enough to scale by")
    run = steady[0]
    rows = {r["config"]: r for r in run["layers"]}
    xs = [rows[c]["local_experts"] for c in _SLOPE_ROWS]
    ys = [rows[c]["kernels"] for c in _SLOPE_ROWS]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    slope = (sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True))
             / sum((x - mx) ** 2 for x in xs))
    plain = rows[_NO_SHARED_ROW]
    fwd, total = run["forward_kernels_dsv3_e8"], rows["dsv3-e8"]["kernels"]
    us = per_kernel_us(rows)
    return MoeHostTrace(
        per_expert=slope, fixed_shared=my - slope * mx,
        fixed_plain=plain["kernels"] - slope * plain["local_experts"],
        forward_share=fwd / total, us_per_kernel=us,
        linear_us=run["linear_2053"]["cpu_us_grad"], run=run["environment"]["date_utc"],
        blend=_fit_exponent(list(wide_passes(rows, us).values())))
