"""Context parallelism's ring exchange of keys and values, overlapped with attention.

With `cp` context-parallel ranks (Megatron-Core `--context-parallel-size`, Transformer
Engine's default `cp_comm_type` "p2p": `AttnFuncWithCPAndKVP2P`) each rank holds 2 of the
sequence's 2 x cp chunks (load-balanced for causal attention) and its queries meet every rank's
keys and values in cp steps: at each of the first cp - 1 steps it sends the key/value block it
holds to the next rank of the ring and receives the previous one's, while it computes attention
on the block it already has. A rank's block is K and V of its seq / cp tokens: 2 b (s / cp)
(kv_heads / tp) head_dim activation values. The backward sends K and V again and the gradient
of the block's K and V alongside, twice the bytes (TE spreads them over cp transfers, K and V
alone first and their gradients alone last; here cp - 1 transfers of both, the same bytes).
A recomputed attention core (selective or full recomputation) runs its forward ring again.
A layer waits only where a transfer is slower than one step's attention (the ring-exchange
bound of simulator/step/tp_overlap.py, with attention in place of the GEMM); the attention itself
is priced as one kernel over the rank's tokens, not as cp shorter ones with their output
corrections. Megatron-Core orders ranks tp, cp, dp, pp (tensor-parallel fastest): a ring of cp
ranks strides tp GPUs, so tp x cp above a node's GPUs sends over NICs (timed alone: the data-
parallel traffic on the same NICs is not contended with). Notes and sources:
docs/research/context-parallel.md.
"""

from __future__ import annotations

import numpy as np

from simulator.network.collectives.base import Phase
from simulator.network.engine import time_alone
from simulator.network.topology import Topology
from simulator.step.tp_overlap import _ring
from vocabulary.recompute import recomputes


def kv_block_bytes(cfg) -> float:
    """K and V of one context-parallel rank's tokens on one tensor-parallel rank, at the
    activations' width (StepConfig.validate: tp divides the key/value heads)."""
    a = cfg.model.arch
    return (2 * cfg.micro_batch * (cfg.seq / cfg.cp) * (a.n_kv_heads // cfg.tp) * a.head_dim
            * cfg.dtypes.param_bytes)


def ring_peers(tp: int, cp: int, dp: int) -> tuple[np.ndarray, np.ndarray]:
    """The first pipeline stage's ranks (tp fastest, then cp, then dp) and the next rank of
    each one's context-parallel ring: cp_rank + 1, wrapping, at the same tp and dp ranks."""
    ranks = np.arange(tp * cp * dp)
    cp_rank = (ranks // tp) % cp
    return ranks, ranks + ((cp_rank + 1) % cp - cp_rank) * tp


def ring_step_s(cfg, topo: Topology, size: float) -> float:
    """Seconds for every rank of the first pipeline stage to send `size` bytes to the next
    rank of its context-parallel ring, all at once, on the network model."""
    ranks, peer = ring_peers(cfg.tp, cfg.cp, cfg.dp)
    return time_alone(topo, [Phase("context-parallel ring", 1,
                                   (topo.pairs("context-parallel ring", ranks, peer, size),))])


def layer_cp_s(cfg, topo: Topology, attn_fwd_s: float, attn_bwd_s: float
               ) -> tuple[float, float]:
    """Seconds the compute stream waits for one layer's ring exchanges in the forward and in
    the backward (`attn_*_s`: the layer's attention core on this rank, whose cp steps the
    transfers overlap); a recomputed attention core (selective or full) runs the forward's
    again in the backward."""
    if cfg.cp == 1:
        return 0.0, 0.0
    block = kv_block_bytes(cfg)
    steps = cfg.cp - 1
    fwd = _ring(steps * ring_step_s(cfg, topo, block), attn_fwd_s, cfg.cp)
    bwd = _ring(steps * ring_step_s(cfg, topo, 2 * block), attn_bwd_s, cfg.cp)  # K, V, grads
    return fwd, bwd + (fwd if recomputes(cfg.recompute, "core_attn") else 0.0)


def cp_bytes_per_layer(cfg) -> float:
    """Bytes one GPU sends in one layer's ring exchanges per micro-batch: forward, backward
    (twice the forward's) and the forward again where the attention core is recomputed."""
    passes = 4 if recomputes(cfg.recompute, "core_attn") else 3
    return passes * (cfg.cp - 1) * kv_block_bytes(cfg) if cfg.cp > 1 else 0.0
