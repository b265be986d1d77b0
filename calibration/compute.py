"""Measure this device's compute for `scape calibrate compute --model M`.

Everything here times the runtime's own code on this machine (the CPU, or the CUDA device
torch sees): the memory-bound kernels of the runtime schemes as a fixed cost plus a cost per
element (the simulator's kernel kinds, simulator/compute.py KERNEL_BYTES, plus "flat_copy"),
the forward and backward of the real GPT on real batches, a matmul peak and a copy bandwidth
(to express the forward and backward as an MFU), and how much slower the forward and
backward gets when several ranks of a CPU testbed share this host's cores.
`calibrate_compute` returns all of it as one JSON/TOML-serializable dict whose "gpu" and
"compute" tables have the keys of a hardware profile's (profiles/hardware.py).
"""

from __future__ import annotations

import multiprocessing as mp
import os
import platform
import queue
import statistics
import subprocess
import time
import traceback
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path

import torch

from profiles import load_model
from scape.adams import Hyper, adams_update_
from scape.adamw import adamw_update_
from scape.schemes.quantized import dequantize, quantize
from scape.schemes.scalecom import DEFAULT_BETA
from scape.select import top_k_indices
from scape.sharding import FlatParams
from scape.train.data import batch
from scape.train.devices import gpu_sharing
from scape.train.model import GPT
from simulator.compute import forward_flops_per_token

Bench = Callable[[], None]
Builder = Callable[[int, torch.device], Bench]
Progress = Callable[[str], None]

SIZES = (2**14, 2**16, 2**18, 2**20, 2**22)  # elements per kernel call
# On a GPU every size above is launch-bound (a 4M-element fp32 pass is ~11 us at an H100's
# copy bandwidth, under the ~20-400 us fixed cost measured there on 2026-11-26), so the fit
# found no per-element cost; these reach the bandwidth-bound sizes of a model's tensors
# (pack's buffer is SPREAD x n: 4 GiB at 2^26)
CUDA_SIZES = (2**18, 2**20, 2**22, 2**24, 2**26)
# Selection keeps k = n * DENSITY: 0.01 is the sparsity-0.99 setting of compare's defaults
# (topk:0.99, scalecom:0.99). The cost per element depends on it: at 0.1 the exact pass over
# the candidates is 10x longer (see `select_bench`).
DENSITY = 0.01
# Packed / scattered values lie SPREAD elements apart in the dense buffer: one value per
# 64-byte cache line, as at any density <= 1/16 (the sparse schemes run at 0.01). Packing n
# contiguous values would time a plain copy.
SPREAD = 16
QUANT_BITS, QUANT_BLOCK = 8, 2048  # SchemeConfig defaults for quantized:8
OPT_STEP = 2  # step > 1, as in training: both bias corrections are applied
FLAT_TENSORS = 8  # parameter tensors behind a flat_copy of n elements
# kernels that loop over parameter tensors, one or more launches each (on a GPU ~20 us apiece:
# flat_copy's fixed 310 us on the H100, 2026-11-26, is 16 copies): timed again with
# PER_TENSOR_FACTOR times the tensors, so a model with more (tiny-gpt has 52) is priced by its
# own count (simulator/compute.py kernel_time)
PER_TENSOR_KINDS = ("flat_copy", "authors_step")
PER_TENSOR_FACTOR = 4


# ---- kernels: one builder per kind ----


def _default_device(device: torch.device) -> AbstractContextManager:
    """torch's default device set to `device`, as on an nccl rank (scape.train.loop sets it
    there), for runtime code that allocates without naming one. Nothing on CPU: the device
    context intercepts every torch call, which adds microseconds per op that a CPU rank,
    running without it, does not pay."""
    return nullcontext() if device.type == "cpu" else torch.device(device)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)  # asynchronous kernels: time them finished


def _randn(n: int, device: torch.device) -> torch.Tensor:
    return torch.randn(n, device=device)  # [n] fp32


def adamw_bench(n: int, device: torch.device) -> Bench:
    """AdamW over n fp32 values: scape.adamw.adamw_update_, as Updater.update calls it."""
    h = Hyper()
    p, g = _randn(n, device), _randn(n, device)  # [n] fp32 master weights, gradient
    m, v = torch.zeros(n, device=device), torch.zeros(n, device=device)  # [n] fp32 state

    def run() -> None:
        adamw_update_(p, g, m, v, OPT_STEP, h)

    return run


def adams_bench(n: int, device: torch.device) -> Bench:
    """AdamS over n fp32 values: scape.adams.adams_update_, as Updater.update calls it."""
    h = Hyper()
    p, g = _randn(n, device), _randn(n, device)  # [n] fp32 master weights, gradient
    m = torch.zeros(n, device=device)  # [n] fp32 first moment

    def run() -> None:
        adams_update_(p, g, m, OPT_STEP, h)

    return run


def select_bench(n: int, device: torch.device, density: float = DENSITY) -> Bench:
    """Top-k selection over n scores: scape.select.top_k_indices(x.abs(), k), the part every
    sparse scheme times as "select" (TopK on acc.abs(), ScaleCom's leader on acc.abs(), SCAPE
    on |m|). k = round(density * n), at least 1 (scape.plan.kept). Below 4 * SAMPLE scores
    (2^18) or k < 256 top_k_indices runs its exact path, above it the sampled one: the fit's
    residual shows the difference."""
    x = _randn(n, device)  # [n] fp32 gradient + residual
    k = max(1, round(density * n))

    def run() -> None:
        top_k_indices(x.abs(), k)  # [k] int64 ascending

    return run


def _spread_indices(n: int, device: torch.device) -> torch.Tensor:
    """n ascending int64 indices into a [SPREAD * n] buffer, one per SPREAD-element line at a
    random offset (top_k_indices returns ascending indices)."""
    lines = torch.arange(n, device=device) * SPREAD  # [n] int64
    return lines + torch.randint(0, SPREAD, (n,), device=device)  # [n] int64


def pack_bench(n: int, device: torch.device) -> Bench:
    """Pack n values (per packed element, as the plan counts k): the gather acc[idx] at
    int64 indices that TopK (acc[idx]), ScaleCom (acc[idx]) and SCAPE (acc[mask]) time as
    "pack", from a [SPREAD * n] buffer."""
    acc = torch.ones(SPREAD * n, device=device)  # [SPREAD n] fp32; written: no zero pages
    idx = _spread_indices(n, device)  # [n] int64

    def run() -> None:
        acc[idx]  # [n] fp32 compact values

    return run


def scatter_add_bench(n: int, device: torch.device) -> Bench:
    """Scatter-add n gathered (value, index) pairs into a dense fp32 buffer, exactly TopK's
    `dense.index_add_(0, chunk[k:].long(), chunk[:k].view(torch.float32))` on one rank's
    chunk of the int32 all-gather buffer [values as int32 bits | int32 indices]."""
    dense = torch.zeros(SPREAD * n, device=device)  # [SPREAD n] fp32
    dense.fill_(0.0)  # touch every page, as the runtime's dense buffer is
    values = _randn(n, device).view(torch.int32)  # [n] fp32 bits
    chunk = torch.cat([values, _spread_indices(n, device).to(torch.int32)])  # [2n] int32

    def run() -> None:
        dense.index_add_(0, chunk[n:].long(), chunk[:n].view(torch.float32))

    return run


def _check_blocks(n: int) -> None:
    if n % QUANT_BLOCK:
        raise ValueError(f"quantize/dequantize bench: n={n} is not a multiple of the block "
                         f"({QUANT_BLOCK})")


def quantize_bench(n: int, device: torch.device) -> Bench:
    """Quantize n values with error feedback, the body of Quantized._step's first "quantize"
    block for one chunk: acc = g + residual, scape.schemes.quantized.quantize(acc, 8, 2048),
    concatenate the payload, residual = acc - dequantized (the requantize of the reduced
    shard is the same code)."""
    _check_blocks(n)
    g = _randn(n, device)  # [n] fp32 gradient
    state = {"residual": torch.zeros(n, device=device)}  # [n] fp32

    def run() -> None:
        acc = g + state["residual"]  # [n] fp32
        parts = [quantize(acc, QUANT_BITS, QUANT_BLOCK)]  # one chunk; the runtime has P
        torch.cat([payload for payload, _ in parts])  # [n + 4 n / block] uint8
        state["residual"] = acc - torch.cat([deq for _, deq in parts])  # [n] fp32

    return run


def dequantize_bench(n: int, device: torch.device) -> Bench:
    """Dequantize n values: Quantized._step's "dequantize gathered", torch.cat of
    scape.schemes.quantized.dequantize over the gathered chunks (one chunk here)."""
    _check_blocks(n)
    payload, _ = quantize(_randn(n, device), QUANT_BITS, QUANT_BLOCK)  # [n + 4n/block] uint8

    def run() -> None:
        torch.cat([dequantize(payload, n, QUANT_BITS, QUANT_BLOCK)])  # [n] fp32

    return run


def error_feedback_bench(n: int, device: torch.device) -> Bench:
    """Error feedback over n values as ScaleCom runs it: acc = g + residual, then the low-pass
    residual update residual <- (1 - beta) residual + beta acc (beta = DEFAULT_BETA). The
    zeroing of the k sent entries is per packed element and left to "pack"."""
    g = _randn(n, device)  # [n] fp32 gradient
    residual = torch.zeros(n, device=device)  # [n] fp32

    def run() -> None:
        acc = g + residual  # [n] fp32
        residual.mul_(1 - DEFAULT_BETA).add_(acc, alpha=DEFAULT_BETA)

    return run


def scale_bench(n: int, device: torch.device) -> Bench:
    """In-place scaling of n fp32 values (SCAPE sync=momentum's weight decay everywhere)."""
    x = _randn(n, device)  # [n] fp32

    def run() -> None:
        x.mul_(0.9999)

    return run


def reducer_bytes_bench(n: int, device: torch.device) -> Bench:
    """n bytes of elementwise fp32 traffic (kind `reducer_bytes`, whose elements are bytes):
    one in-place scaling of n/8 values reads and writes 4 bytes each."""
    x = _randn(max(1, n // 8), device)  # [n / 8] fp32

    def run() -> None:
        x.mul_(0.9999)

    return run


def _split(n: int, tensors: int) -> list[int]:
    """`tensors` sizes (the last takes the remainder) totalling n."""
    sizes = [n // tensors] * (tensors - 1)
    return [*sizes, n - sum(sizes)]


def flat_copy_bench(n: int, device: torch.device, tensors: int = FLAT_TENSORS) -> Bench:
    """Copy between the model and the flat fp32 buffers, per parameter element: every scheme's
    FlatParams.pull_grads (model .grad -> flat gradient) and push_params (master -> model),
    over `tensors` parameters totalling n elements."""
    params = [torch.nn.Parameter(_randn(s, device)) for s in _split(n, tensors)]  # [n/T] fp32
    for p in params:
        p.grad = torch.randn_like(p)  # [n / T] fp32
    with _default_device(device):  # FlatParams allocates on the default device
        flat = FlatParams(params, world=1)

    def run() -> None:
        flat.pull_grads()  # [n] fp32
        flat.push_params()

    return run


def authors_step_bench(n: int, device: torch.device, tensors: int = FLAT_TENSORS) -> Bench:
    """The local work of one step of the authors' reducer as this runtime runs it
    (scape/schemes/scape_authors.py, density 0.01, one rank: it owns and selects every tensor),
    per parameter element, over `tensors` weight matrices totalling n: the corrected
    momentum, top-k, bitmap, payload, residual, g_sync and update passes; the gradient pull is
    in it too (flat_copy counts it again: 1/4 of that kernel's bytes)."""
    from scape.adams import Hyper
    from scape.comm import Comm
    from scape.plan import make_config
    from scape.schemes import make_scheme

    params = [torch.nn.Parameter(_randn(s, device).view(s, 1))  # [s, 1] fp32
              for s in _split(n, tensors)]
    for p in params:
        p.grad = torch.randn_like(p)
    with _default_device(device):
        scheme = make_scheme(make_config("scape", sparsity=1 - DENSITY), params,
                             Comm(alone=True), Hyper())

    def run() -> None:
        scheme.t += 1
        scheme._step(1e-3)

    return run


# Every kind of vocabulary.names.KERNEL_BYTES, plus the runtime's flat buffer copies and the
# authors' reducer's local step (priced only where calibrated: simulator/compute.OTHER_KINDS).
KERNEL_BENCH: dict[str, Builder] = {
    "optimizer_adamw": adamw_bench,
    "optimizer_adams": adams_bench,
    "select": select_bench,
    "pack": pack_bench,
    "scatter_add": scatter_add_bench,
    "quantize": quantize_bench,
    "dequantize": dequantize_bench,
    "error_feedback": error_feedback_bench,
    "scale": scale_bench,
    "reducer_bytes": reducer_bytes_bench,
    "flat_copy": flat_copy_bench,
    "authors_step": authors_step_bench,
}


# ---- timing ----


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
    _sync(device)


def time_call(fn: Bench, device: torch.device, repeats: int, warmup: int = 1) -> float:
    """Median seconds of `repeats` calls of fn after `warmup` untimed ones, each from a cold
    cache (flush_cache)."""
    for _ in range(warmup):
        fn()
    _sync(device)
    samples = []
    for _ in range(repeats):
        flush_cache(device)
        t0 = time.perf_counter()
        fn()
        _sync(device)
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
        with _default_device(device):
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
    with _default_device(device):
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


def cpu_model() -> str:
    """The 'model name' line of /proc/cpuinfo, else what platform says."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "CPU"


def device_name(device: torch.device, threads: int) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return f"{cpu_model()} ({threads} thread(s) per rank)"


# The shipped profile whose GPU a device name is, for its datasheet peak (scape reproduce
# --compute-profile): only names that say the part exactly (an H100 PCIe has another peak)
GPU_PROFILES = {"NVIDIA H100 80GB HBM3": "dgx-h100", "NVIDIA A100-SXM4-80GB": "dgx-a100",
                "NVIDIA A100-SXM4-40GB": "dgx-a100"}


def versions(device: torch.device) -> dict[str, str]:
    """What a measured profile records of the software that measured it: torch, and on a GPU
    CUDA, NCCL, the driver (nvidia-smi, where it answers) and the shipped profile of the GPU."""
    out = {"torch": torch.__version__, "date": time.strftime("%Y-%m-%d %H:%M UTC",
                                                            time.gmtime())}
    if device.type != "cuda":
        return out
    out["cuda"] = str(torch.version.cuda)
    if torch.distributed.is_nccl_available():
        out["nccl"] = ".".join(map(str, torch.cuda.nccl.version()))
    try:
        driver = subprocess.run(["nvidia-smi", "--query-gpu=driver_version",
                                 "--format=csv,noheader"], capture_output=True, text=True,
                                timeout=30).stdout.split()
        if driver:
            out["driver"] = driver[0]
    except (OSError, subprocess.SubprocessError):
        pass  # no nvidia-smi: the driver goes unrecorded
    name = torch.cuda.get_device_name(device)
    if name in GPU_PROFILES:
        out["gpu_profile"] = GPU_PROFILES[name]
    # ranks timed together on one GPU ([concurrency]) run side by side under MPS, in turns
    # without it
    out["gpu_sharing"] = gpu_sharing()
    return out


def memory_gb(device: torch.device) -> float:
    """GPU memory, or the host's RAM (shared by every rank of a CPU testbed), in GB (1e9 B)."""
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).total_memory / 1e9
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 1e9


# ---- forward and backward of the real model ----


def _autocast(device: torch.device) -> AbstractContextManager:
    """bf16 autocast on CUDA, as the SCAPE authors train (Megatron --bf16) and as `scape train
    --autocast bf16` runs; the CPU runtime trains in fp32 (its matmul peak is fp32 too)."""
    return torch.autocast("cuda", dtype=torch.bfloat16) if device.type == "cuda" else nullcontext()


def _fwd_bwd_samples(model: GPT, seq: int, micro_batch: int, device: torch.device,
                     repeats: int, warmup: int, rank: int = 0,
                     barrier=None) -> list[tuple[float, float]]:
    """(forward s, backward s) of `repeats` steps after `warmup`, on the batches step t of
    `rank` trains on (scape.train.loop.train's timed region: model(x, y), loss.backward()),
    in bf16 autocast on CUDA (`_autocast`). With a barrier, every step starts when all ranks
    sharing it reach it."""
    samples = []
    for t in range(1, warmup + repeats + 1):
        x, y = (b.to(device) for b in batch("train", t, rank, micro_batch, seq))
        flush_cache(device)  # the optimizer step ran in between, in training
        if barrier is not None:
            barrier.wait()
        _sync(device)
        t0 = time.perf_counter()
        with _autocast(device):
            loss = model(x, y)  # [] fp32
        _sync(device)
        t1 = time.perf_counter()
        loss.backward()
        _sync(device)
        t2 = time.perf_counter()
        model.zero_grad(set_to_none=True)  # as the training loop does after each step
        if t > warmup:
            samples.append((t1 - t0, t2 - t1))
    return samples


def _build_model(model_name: str, device: torch.device) -> tuple[GPT, int]:
    profile = load_model(model_name)
    torch.manual_seed(0)
    model = GPT(profile).to(device)
    return model, profile.arch.seq_len


def step_flops(profile, micro_batch: int, seq: int) -> float:
    """Forward + backward FLOPs of one micro-batch: 3 x forward (the simulator's formula,
    simulator.compute.forward_flops_per_token)."""
    return float(3 * forward_flops_per_token(profile, seq) * micro_batch * seq)


def measure_fwd_bwd(model_name: str, micro_batch: int, seq_len: int | None = None,
                    device: torch.device | str = "cpu", threads: int = 1,
                    repeats: int = 10) -> dict:
    """Forward and backward of the real GPT (scape.train.model) on real batches
    (scape.train.data.batch), the region scape.train.loop.train times as fwd_bwd_s: medians of
    `repeats` steps after 2 warm-ups, gradients set to None between steps as the loop does;
    bf16 autocast on CUDA, fp32 on CPU.
    total_s is the median of the per-step sums. flops = 3 x forward FLOPs (the simulator's
    formula, simulator.compute.forward_flops_per_token)."""
    device = torch.device(device)
    torch.set_num_threads(threads)
    profile = load_model(model_name)
    seq = profile.arch.seq_len if seq_len is None else seq_len
    with _default_device(device):  # GPT.forward makes its positions on the default device
        model, _ = _build_model(model_name, device)
        samples = _fwd_bwd_samples(model, seq, micro_batch, device, repeats, warmup=2)
    tokens = micro_batch * seq
    return {
        "model": model_name, "micro_batch": micro_batch, "seq_len": seq,
        "fwd_s": statistics.median(f for f, _ in samples),
        "bwd_s": statistics.median(b for _, b in samples),
        "total_s": statistics.median(f + b for f, b in samples),
        "flops": step_flops(profile, micro_batch, seq),
        "tokens": tokens, "device": str(device), "threads": threads, "repeats": repeats,
    }


# ---- ranks sharing the host ----


def _concurrency_worker(index: int, model_name: str, micro_batch: int, device: str,
                        threads: int, repeats: int, everyone, rounds: list, results) -> None:
    """One rank: `repeats` times over, for c = 1..max_ranks, take one step in round c when
    index < c (the c ranks step together behind rounds[c - 1]); everyone meets at `everyone`
    between rounds, so idle workers block without using a core. Interleaving the rounds lets
    drift in the machine's speed hit every c alike."""
    try:
        dev = torch.device(device)
        torch.set_num_threads(threads)
        with _default_device(dev):
            model, seq = _build_model(model_name, dev)
            _fwd_bwd_samples(model, seq, micro_batch, dev, 0, warmup=2, rank=index)
            times: dict[int, list[float]] = {c: [] for c in range(1, len(rounds) + 1)}
            for rep in range(repeats):
                for c, barrier in enumerate(rounds, start=1):
                    everyone.wait()
                    if index < c:
                        (f, b), = _fwd_bwd_samples(model, seq, micro_batch, dev, 1, warmup=0,
                                                   rank=index + 3 * rep, barrier=barrier)
                        times[c].append(f + b)
            for c, values in times.items():
                if index < c:
                    results.put(("ok", c, index, values))
    except Exception:
        results.put(("error", 0, index, traceback.format_exc()))


def measure_concurrency(model_name: str, micro_batch: int, max_ranks: int, threads: int = 1,
                        repeats: int = 10, device: torch.device | str = "cpu",
                        timeout_s: float = 600.0) -> tuple[list[float], float]:
    """Slowdown of the forward and backward when c = 1..max_ranks processes run it at once on
    this host (ranks of a CPU testbed sharing its cores), and the median seconds at c = 1:
    max_ranks "spawn" processes, rounds of c = 1..max_ranks interleaved `repeats` times;
    slowdown[c - 1] = median over steps of the slowest of the c workers' times / the median
    at c = 1 (so slowdown[0] = 1): data-parallel ranks wait for the slowest at every
    collective, so contention and the skew it causes both count. Steps start together behind
    a multiprocessing.Barrier, as ranks that synchronize every step do."""
    if max_ranks < 1:
        raise ValueError("max_ranks must be >= 1")
    ctx = mp.get_context("spawn")
    everyone = ctx.Barrier(max_ranks, timeout=timeout_s)
    rounds = [ctx.Barrier(c, timeout=timeout_s) for c in range(1, max_ranks + 1)]
    results = ctx.Queue()
    procs = [ctx.Process(target=_concurrency_worker, daemon=True,
                         args=(i, model_name, micro_batch, str(torch.device(device)), threads,
                               repeats, everyone, rounds, results))
             for i in range(max_ranks)]
    for p in procs:
        p.start()
    per_step: dict[int, list[list[float]]] = {c: [] for c in range(1, max_ranks + 1)}
    deadline = time.monotonic() + timeout_s
    try:
        for _ in range(max_ranks * (max_ranks + 1) // 2):  # c results for each c
            while True:
                try:
                    status, c, index, value = results.get(timeout=1.0)
                    break
                except queue.Empty:
                    # a worker that died before it could report (e.g. at import) would
                    # leave the others waiting at a barrier: fail now, not at the timeout
                    dead = [p.exitcode for p in procs if p.exitcode not in (None, 0)]
                    if dead or time.monotonic() > deadline:
                        raise RuntimeError(
                            f"measure_concurrency: workers exited with {dead}" if dead else
                            f"measure_concurrency: no result within {timeout_s:g} s") from None
            if status == "error":
                raise RuntimeError(f"measure_concurrency: worker {index} failed:\n{value}")
            per_step[c].append(value)
        for p in procs:
            p.join(timeout=timeout_s)
    finally:
        for p in procs:
            if p.is_alive():
                p.terminate()
                p.join()
    # Ranks in lockstep wait for the slowest: a step's time is the max over the c workers.
    slowest = {c: statistics.median(max(step) for step in zip(*lists, strict=True))
               for c, lists in per_step.items()}
    return [slowest[c] / slowest[1] for c in range(1, max_ranks + 1)], slowest[1]


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
