"""Tensor-parallel communication per layer, exposed or overlapped with the GEMMs beside it.

Megatron's tensor parallelism with sequence parallelism (Korthikanti et al. 2022, section 4.2.2)
runs, per layer and pass, an all-gather of b s h activations before each column-parallel GEMM
(QKV, MLP in) and a reduce-scatter after each row-parallel one (attention out, MLP out): four
halves of an all-reduce. Run plainly, the compute stream waits for each. Transformer Engine's
userbuffers overlap (Megatron-Core `--tp-comm-overlap`, NeMo `ub_tp_comm_overlap`, which
NVIDIA's dgxc-benchmarking recipes for GPT-3 175B and Nemotron-4 turn on) splits each such GEMM
into `tp` chunks and moves one chunk's activations over the ring while the GEMM works on
another (the ring exchange of TE's `CommOverlapP2P`): `tp - 1` transfer steps against `tp`
GEMM chunks, the first on the local shard, so a layer waits only where a transfer step is
slower than a GEMM chunk. In the backward the same collectives pair with the data-gradient
GEMMs. What the overlap costs the GEMMs (SMs its copies hold, smaller GEMM tiles) is not
modelled here: a profile's sustained share, fitted on whole steps that ran with it, carries it.
"""

from __future__ import annotations

from simulator.compute import pricing
from simulator.roofline import gemm_s
from simulator.shapes import Gemm, layer_shapes


def _gemm_time(g: Gemm, cfg) -> float:
    """A GEMM's time as the step's compute model prices it: from its shape on a [roofline]
    profile, else its FLOPs at the MFU forward and backward run at."""
    mfu, _ = pricing(cfg.model, cfg.hardware, cfg.mfu)
    if mfu is None:
        return gemm_s(g, cfg.hardware)
    return g.flops / (cfg.hardware.gpu.peak_bf16_tflops * 1e12 * mfu)


def _exposed(comm_s: float, gemm_s_: float, tp: int) -> float:
    """What a collective of `comm_s` overlapped with a GEMM of `gemm_s_` leaves exposed: each
    of the tp - 1 ring steps waits for the slower of its transfer and its GEMM chunk."""
    return (tp - 1) * max(0.0, comm_s / (tp - 1) - gemm_s_ / tp)


def layer_tp_s(cfg, allreduce_s: float) -> tuple[float, float]:
    """Seconds the compute stream spends on one layer's tensor-parallel communication in the
    forward and in the backward (`allreduce_s`: one all-reduce of the layer's b s h
    activations on the tensor-parallel group): two all-reduces each pass, or with
    `cfg.tp_comm_overlap` what the four halves leave exposed beside their GEMMs."""
    if cfg.tp == 1:
        return 0.0, 0.0
    if not cfg.tp_comm_overlap:
        return 2 * allreduce_s, 2 * allreduce_s
    gemms = layer_shapes(cfg.model, cfg.micro_batch, cfg.seq, cfg.tp, True).gemms
    half = allreduce_s / 2  # an all-gather or a reduce-scatter of b s h activations
    fwd = sum(_exposed(half, _gemm_time(g, cfg), cfg.tp) for g in gemms)
    bwd = sum(_exposed(half, _gemm_time(g.backward()[0], cfg), cfg.tp) for g in gemms)
    return fwd, bwd
