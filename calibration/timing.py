"""How calibration times code on this device: a cold cache before each timed call, CUDA
synchronised around it, medians over repeats, and a fixed-plus-per-element fit."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext

import torch

Bench = Callable[[], None]


def default_device(device: torch.device) -> AbstractContextManager:
    """torch's default device set to `device`, as on an nccl rank (scape.train.loop sets it
    there), for runtime code that allocates without naming one. Nothing on CPU: the device
    context intercepts every torch call, which adds microseconds per op that a CPU rank,
    running without it, does not pay."""
    return nullcontext() if device.type == "cpu" else torch.device(device)


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)  # asynchronous kernels: time them finished


FLUSH_BYTES = 32 << 20  # more than this CPU's per-core L2 (and any GPU's L2)


_flush_buffer: dict[str, torch.Tensor] = {}


def flush_cache(device: torch.device) -> None:
    """Overwrite a scratch buffer larger than the cache next to the core (untimed), so the
    next timed call starts cold, as in a training step: between two calls of a kernel (or two
    forward passes) the rest of the step passes through the caches."""
    key = str(device)
    if key not in _flush_buffer:
        _flush_buffer[key] = torch.empty(FLUSH_BYTES // 4, device=device)  # [8M] fp32
    _flush_buffer[key].add_(1.0)
    synchronize(device)


def time_call(fn: Bench, device: torch.device, repeats: int, warmup: int = 1) -> float:
    """Median seconds of `repeats` calls of fn after `warmup` untimed ones, each from a cold
    cache (flush_cache)."""
    for _ in range(warmup):
        fn()
    synchronize(device)
    samples = []
    for _ in range(repeats):
        flush_cache(device)
        t0 = time.perf_counter()
        fn()
        synchronize(device)
        samples.append(time.perf_counter() - t0)
    return statistics.median(samples)


def fit_linear(sizes: Sequence[float], seconds: Sequence[float]) -> tuple[float, float, float]:
    """Fit t = a + b * n; returns (a seconds, b seconds per element, max |residual| in % of
    the measured time). Least squares on relative residuals (weights 1 / t^2): sizes span
    orders of magnitude and plain least squares would let the largest size set a, the fixed
    cost that matters only at the smallest. a is clipped at 0 (b refitted through the origin)."""
    if len(sizes) != len(seconds) or not sizes:
        raise ValueError("fit_linear: need as many sizes as times, at least one")
    if any(t <= 0 for t in seconds):
        raise ValueError("fit_linear: times must be positive")
    w = [1.0 / t**2 for t in seconds]
    sw = sum(w)
    sn = sum(wi * n for wi, n in zip(w, sizes, strict=True))
    st = sum(wi * t for wi, t in zip(w, seconds, strict=True))
    snn = sum(wi * n * n for wi, n in zip(w, sizes, strict=True))
    snt = sum(wi * n * t for wi, n, t in zip(w, sizes, seconds, strict=True))
    det = sw * snn - sn * sn  # 0 when all sizes are equal
    a = (snn * st - sn * snt) / det if det > 1e-12 * sw * snn else -1.0
    b = (sw * snt - sn * st) / det if a >= 0 else snt / snn  # through the origin if clipped
    a = max(a, 0.0)
    if b < 0:  # noise on near-equal times: no negative cost per element, a flat fit instead
        a, b = st / sw, 0.0
    residual = max(abs(a + b * n - t) / t for n, t in zip(sizes, seconds, strict=True))
    return a, b, 100.0 * residual
