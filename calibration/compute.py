"""Measure this device's compute for `scape calibrate compute --model M`.

Everything here times the runtime's own code on this machine (the CPU, or the CUDA device
torch sees): the memory-bound kernels of the runtime schemes as a fixed cost plus a cost per
element (calibration/kernel_benches.py: the simulator's kernel kinds, plus "flat_copy"),
the forward and backward of the real GPT on real batches and how much slower they get when
several ranks of a CPU testbed share this host's cores (calibration/fwd_bwd.py), and a matmul
peak and a copy bandwidth (to express the forward and backward as an MFU).
`calibrate_compute` returns all of it as one JSON/TOML-serializable dict whose "gpu" and
"compute" tables have the keys of a hardware profile's (profiles/hardware.py).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence

import torch

from calibration.device_info import device_name, memory_gb, versions
from calibration.fwd_bwd import measure_concurrency, measure_fwd_bwd
from calibration.kernel_benches import (
    CUDA_SIZES,
    DENSITY,
    FLAT_TENSORS,
    KERNEL_BENCH,
    PER_TENSOR_FACTOR,
    PER_TENSOR_KINDS,
    SIZES,
)
from calibration.timing import (
    default_device,
    fit_linear,
    time_call,
)

Progress = Callable[[str], None]


def measure_kernels(sizes: Sequence[int] | None = None, device: torch.device | str = "cpu",
                    repeats: int = 5, progress: Progress | None = None, threads: int = 1,
                    kinds: Sequence[str] | None = None) -> dict[str, dict]:
    """Each KERNEL_BENCH kind at each size (default SIZES on a CPU, CUDA_SIZES on a GPU):
    median of `repeats` calls after one warm-up, fitted as fixed_us + ns_per_element * n; a
    PER_TENSOR_KINDS kind also at its second size over PER_TENSOR_FACTOR times the tensors,
    for per_tensor_us. `threads`: torch CPU threads (per rank)."""
    device = torch.device(device)
    if sizes is None:
        sizes = CUDA_SIZES if device.type == "cuda" else SIZES
    torch.set_num_threads(threads)
    out = {}
    for kind in kinds or KERNEL_BENCH:
        if progress:
            progress(f"kernel {kind}")
        seconds = []
        with default_device(device):
            for n in sizes:
                bench = KERNEL_BENCH[kind](n, device)
                seconds.append(time_call(bench, device, repeats))
                del bench  # free the largest buffers before the next size
        a, b, res = fit_linear(sizes, seconds)
        out[kind] = {"fixed_us": a * 1e6, "ns_per_element": b * 1e9, "residual_pct": res,
                     "sizes": list(sizes), "seconds": seconds}
        if kind == "select":
            out[kind]["density"] = DENSITY
        if kind in PER_TENSOR_KINDS:
            out[kind].update(per_tensor(kind, sizes[min(1, len(sizes) - 1)], device, repeats))
    return out


def per_tensor(kind: str, n: int, device: torch.device, repeats: int) -> dict:
    """{tensors, per_tensor_us}: `kind` over n elements in FLAT_TENSORS and in
    PER_TENSOR_FACTOR times as many tensors, alternated (drift hits both alike); the extra
    time per extra tensor, at least 0."""
    many = FLAT_TENSORS * PER_TENSOR_FACTOR
    times: dict[int, list[float]] = {FLAT_TENSORS: [], many: []}
    with default_device(device):
        benches = {t: KERNEL_BENCH[kind](n, device, tensors=t) for t in times}
        for bench in benches.values():
            bench()  # warm-up, once: first calls allocate
        for _ in range(repeats):
            for t, bench in benches.items():
                times[t].append(time_call(bench, device, 1, warmup=0))
    extra = statistics.median(times[many]) - statistics.median(times[FLAT_TENSORS])
    return {"tensors": FLAT_TENSORS, "per_tensor_us": max(0.0, extra / (many - FLAT_TENSORS))
            * 1e6}


# ---- the device: matmul peak, copy bandwidth, name, memory ----


def measure_matmul_peak(device: torch.device | str = "cpu", threads: int = 1,
                        n: int | None = None, repeats: int = 5) -> float:
    """Achieved FLOP/s of a square matmul large enough to be compute-bound: fp32 n=1024 on
    CPU (the dtype the CPU runtime trains in), bf16 n=8192 on CUDA (the profile's peak is
    BF16). Median of `repeats`, 2 n^3 FLOPs each."""
    device = torch.device(device)
    torch.set_num_threads(threads)
    cuda = device.type == "cuda"
    n = n or (8192 if cuda else 1024)
    dtype = torch.bfloat16 if cuda else torch.float32
    a = torch.randn(n, n, device=device, dtype=dtype)  # [n, n]
    b = torch.randn(n, n, device=device, dtype=dtype)  # [n, n]
    inner = 10 if cuda else 1  # several launches per sample hide the launch latency

    def run() -> None:
        for _ in range(inner):
            torch.mm(a, b)  # [n, n]

    return 2 * n**3 * inner / time_call(run, device, repeats)


def measure_copy_bandwidth(device: torch.device | str = "cpu", elements: int | None = None,
                           repeats: int = 5) -> float:
    """Bytes/s of a large fp32 tensor copy, read + write counted (2 x 4 B per element): 2^25
    elements (128 MiB, far beyond the caches) on CPU, 2^28 (1 GiB) on CUDA."""
    device = torch.device(device)
    elements = elements or (2**28 if device.type == "cuda" else 2**25)
    src = torch.ones(elements, device=device)  # [elements] fp32
    dst = torch.ones(elements, device=device)  # [elements] fp32; written: no zero pages
    return 2 * 4 * elements / time_call(lambda: dst.copy_(src), device, repeats)


# ---- forward and backward of the real model ----


# ---- ranks sharing the host ----


# ---- everything, as profile tables ----


def calibrate_compute(model_name: str, micro_batch: int, max_ranks: int = 1,
                      device: torch.device | str | None = None, threads: int = 1,
                      progress: Progress | None = None, sizes: Sequence[int] | None = None,
                      kernel_repeats: int = 9, fwd_bwd_repeats: int = 30,
                      concurrency_repeats: int = 30, matmul_n: int | None = None,
                      copy_elements: int | None = None) -> dict:
    """Measure this device (CUDA when available, else the CPU with `threads` threads per
    rank) and return its "gpu" and "compute" profile tables, the kernel fits, the forward and
    backward of `model_name` at `micro_batch`, and the slowdown of 1..max_ranks ranks sharing
    the host. `sizes`: kernel sizes (default SIZES on a CPU, CUDA_SIZES on a GPU). The
    remaining parameters shrink the measurement (tests)."""
    if device is None:
        device = "cuda" if torch.cuda.is_available() else "cpu"
    device = torch.device(device)
    say = progress or (lambda _msg: None)
    torch.set_num_threads(threads)
    say("matmul peak")
    peak = measure_matmul_peak(device, threads, n=matmul_n)
    say("copy bandwidth")
    bandwidth = measure_copy_bandwidth(device, elements=copy_elements)
    kernels = measure_kernels(sizes, device, kernel_repeats, progress, threads)
    say(f"forward and backward of {model_name}")
    fb = measure_fwd_bwd(model_name, micro_batch, device=device, threads=threads,
                         repeats=fwd_bwd_repeats)
    if max_ranks > 1:
        say(f"{max_ranks} ranks sharing the host")
        slowdown, alone = measure_concurrency(model_name, micro_batch, max_ranks, threads,
                                              concurrency_repeats, device)
        # the interleaved rounds span the whole measurement: their one-rank median is the
        # better estimate of this machine's speed (it drifts by 10-20% over minutes)
        fb = {**fb, "fwd_s": fb["fwd_s"] * alone / fb["total_s"],
              "bwd_s": fb["bwd_s"] * alone / fb["total_s"], "total_s": alone}
    else:
        slowdown = [1.0]
    mfu = min(1.0, fb["flops"] / fb["total_s"] / peak)
    dtype = "bf16" if device.type == "cuda" else "fp32"
    matmul = matmul_n or (8192 if device.type == "cuda" else 1024)
    when = time.strftime("%Y-%m-%d")
    return {
        "gpu": {
            "model": device_name(device, threads),
            "peak_bf16_tflops": peak / 1e12,
            "memory_GB": memory_gb(device),
            "hbm_bw_GBps": bandwidth / 1e9,
            "source": (f"measured by scape calibrate compute on {when}: peak = median "
                       f"{dtype} {matmul}x{matmul} matmul (fp32 on a CPU: the dtype the CPU "
                       f"runtime trains in), hbm_bw = median large fp32 copy (read + write), "
                       f"torch {torch.__version__}, {threads} thread(s) per rank"),
        },
        "compute": {
            "mfu": mfu,
            "mem_efficiency": 1.0,
            "interference": 0.0,
            "source": (f"measured by scape calibrate compute on {when}: mfu = 3 x forward "
                       f"FLOPs of {model_name} (micro-batch {micro_batch}, seq "
                       f"{fb['seq_len']}, {dtype}) / median forward+backward time / measured "
                       "peak; "
                       "mem_efficiency 1.0 because hbm_bw_GBps is already the achieved copy "
                       "bandwidth; interference not measured (0.0); select kernels at density "
                       f"{DENSITY}"),
        },
        "kernels": {kind: {key: fit[key] for key in ("fixed_us", "ns_per_element",
                                                     "residual_pct", "sizes", "seconds",
                                                     "tensors", "per_tensor_us") if key in fit}
                    for kind, fit in kernels.items()},
        "fwd_bwd": {key: fb[key] for key in ("model", "micro_batch", "seq_len", "fwd_s", "bwd_s",
                                             "total_s", "flops")},
        "concurrency": {"ranks": list(range(1, max_ranks + 1)),
                        "slowdown": [float(s) for s in slowdown]},
        "versions": versions(device),
    }


__all__ = [
    "KERNEL_BENCH",
    "calibrate_compute",
    "fit_linear",
    "measure_concurrency",
    "measure_copy_bandwidth",
    "measure_fwd_bwd",
    "measure_kernels",
    "measure_matmul_peak",
]
