"""One timed call of each memory-bound kernel kind the runtime schemes run, on this device:
the builders `scape calibrate compute` times (calibration/compute.py) to price the simulator's
kernel kinds (vocabulary/names.py KERNEL_BYTES, plus "flat_copy" and "authors_step")."""

from __future__ import annotations

from collections.abc import Callable

import torch

from calibration.timing import Bench, default_device
from scape.adams import Hyper, adams_update_
from scape.adamw import adamw_update_
from scape.schemes.quantized import dequantize, quantize
from scape.schemes.scalecom import DEFAULT_BETA
from scape.select import top_k_indices
from scape.sharding import FlatParams

Builder = Callable[[int, torch.device], Bench]


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
# own count (simulator/step/compute.py kernel_time)
PER_TENSOR_KINDS = ("flat_copy", "authors_step")


PER_TENSOR_FACTOR = 4


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


def grad_norm_bench(n: int, device: torch.device) -> Bench:
    """The global L2 norm of n fp32 gradients, as clipping computes it before the update
    (simulator/step/per_step.py): one pass reading each value."""
    g = _randn(n, device)  # [n] fp32 gradient

    def run() -> None:
        torch.linalg.vector_norm(g)  # [] fp32

    return run


def clip_scale_bench(n: int, device: torch.device) -> Bench:
    """n fp32 gradients multiplied in place by the clip coefficient (PyTorch's
    clip_grads_with_norm_, every step on the torchtitan stack)."""
    g = _randn(n, device)  # [n] fp32 gradient
    coef = torch.tensor(1.0, device=device)  # [] fp32, clamped to 1 as PyTorch does

    def run() -> None:
        g.mul_(coef)

    return run


def memset_bench(n: int, device: torch.device) -> Bench:
    """Zero n bytes (kind `memset`, whose elements are bytes): Megatron-Core's gradient buffer
    reset, one zero_() over a flat buffer (n/4 fp32 values)."""
    buf = torch.empty(max(1, n // 4), device=device)  # [n / 4] fp32

    def run() -> None:
        buf.zero_()

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
    with default_device(device):  # FlatParams allocates on the default device
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
    with default_device(device):
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
    "grad_norm": grad_norm_bench,
    "clip_scale": clip_scale_bench,
    "memset": memset_bench,
    "flat_copy": flat_copy_bench,
    "authors_step": authors_step_bench,
}
