"""Expert parallelism: what a mixture-of-experts layer's token dispatch and combine cost the
compute stream, per layer and micro-batch (DESIGN section 10).

Megatron-Core's token dispatchers (megatron/core/transformer/moe/token_dispatcher.py, read, not
copied):
- `alltoall` (MoEAlltoAllTokenDispatcher): each rank permutes its tokens by expert and sends
  every (token, chosen expert) pair to the rank holding that expert, an all-to-all over the
  expert-parallel group; with expert tensor parallelism (ETP > 1) the tokens a rank received
  are then all-gathered over its ETP group (and reduce-scattered back on the way out). The
  combine is the same in reverse. Backward runs both again on the gradients.
- `allgather` (MoEAllGatherTokenDispatcher): every rank gathers the hidden states of the whole
  EP x ETP group (no top-k copies) and keeps the pairs of its own experts; the combine is a
  reduce-scatter of the same size.
- `flex` (MoEFlexTokenDispatcher over DeepEP or HybridEP, deepseek-ai/DeepEP README: "NVLink
  and RDMA forwarding"): a token crosses the network once per remote NVLink domain holding at
  least one of its experts, to the GPU of the same local rank there, then reaches each GPU
  holding one of its experts over NVLink, once a GPU however many of its experts that GPU
  holds (DeepEP's dispatch layout is a token-by-rank mask, `get_dispatch_layout`'s
  is_token_in_rank; HybridEP: "no redundant communication during data distribution",
  Megatron-LM's DeepSeek-V3 GB200 guide, section 2.5); the combine mirrors it. Inside one
  domain it is that deduplicated all-to-all. A model's group-limited routing ([moe] groups,
  group_topk) cuts the domains and GPUs a token reaches (`domain_copies`).
Sizes follow nccl-tests (scape/plan/types.py): the all-to-all's S is one rank's send buffer,
tokens x top-k x h values; its busiest receiver gets `imbalance` times the mean (the max/mean
expert load), and the call ends when it does, so S is scaled by it. The collectives run on the
EP group's own GPUs (ETP fastest, then EP: Megatron-Core's expert rank order), NVLink inside the
NVLink domain and the NICs across it, priced by the same NCCL-faithful machinery as every
other collective (simulator/network/collective.py `calibrated`).

By default the compute stream waits for them (Megatron-Core's default). `moe_overlap`
(Megatron-Core's --overlap-moe-expert-parallel-comm, DeepSeek-V3's DualPipe idea: one
micro-batch's dispatch and combine beside another's compute) hides them behind the layer's own
forward and backward compute, leaving only what outlasts it.
"""

from __future__ import annotations

import math
from dataclasses import replace
from functools import partial

import numpy as np

from simulator.network.collective import calibrated
from simulator.network.engine import PhaseCache, time_alone
from simulator.network.topology import build_topology, distinct
from simulator.step.profile_memo import ProfileMemo
from vocabulary.recompute import recomputes


def routed_tokens(cfg) -> float:
    """Tokens one GPU brings to a MoE layer: its micro-batch's share of the sequence, split
    again over tensor-parallel ranks by sequence parallelism (Megatron-Core runs MoE with
    sequence parallelism wherever TP > 1)."""
    split = cfg.tp if (cfg.sequence_parallel and cfg.tp > 1) else 1
    return cfg.micro_batch * cfg.seq / cfg.cp / split


def _collectives(cfg) -> list[tuple[str, int, int, float]]:
    """(collective, ranks, stride, S bytes) of one MoE layer's dispatch (the combine mirrors
    it), on the EP group (stride ETP) and the ETP group (stride 1)."""
    moe, h = cfg.model.moe, cfg.model.arch.d_model
    value = cfg.dtypes.param_bytes  # bf16 hidden states, as the layer's activations
    tokens = routed_tokens(cfg)
    ep, etp = cfg.ep, cfg.expert_tp
    if cfg.moe_dispatcher == "allgather":
        # the hidden states of the whole EP x ETP group, gathered once (no top-k copies)
        group = ep * etp
        return [("all_gather", group, 1, tokens * h * value * group)] if group > 1 else []
    flex = cfg.moe_dispatcher == "flex"
    # a token's copies: one per GPU holding one of its experts (flex), else one per expert
    copies = domain_copies(moe, ep) if flex and ep > 1 else moe.top_k
    send = tokens * copies * h * value * cfg.moe_imbalance  # S: the busiest rank's
    out = []
    domains = max(1, ep * etp // cfg.domain)  # NVLink domains the EP group spans
    if flex and domains > 1:
        # one copy per remote domain holding one of the token's experts
        across = tokens * h * value * domain_copies(moe, domains) * cfg.moe_imbalance
        out.append(("all_to_all", domains, cfg.domain, across))  # S: a copy per domain
        if ep // domains > 1:  # then NVLink to the experts' GPUs in the domain
            out.append(("all_to_all", ep // domains, etp, send))
    elif ep > 1:
        out.append(("all_to_all", ep, etp, send))
    # what a rank received, gathered over its ETP group; where ETP is the layer's TP, the TP
    # all-gather and reduce-scatter every layer pays (tp_overlap.layer_tp_s) stand for these
    if etp > 1 and etp != cfg.tp:
        out.append(("all_gather", etp, 1, send * etp))
    return out


def _none_of(pool: int, held: int, k: int) -> float:
    """The chance that k experts drawn without replacement from `pool` miss the `held` ones."""
    return math.comb(pool - held, k) / math.comb(pool, k) if pool - held >= k else 0.0


def domain_copies(moe, domains: int) -> float:
    """Expected NVLink domains (or, with `domains` the EP size, GPUs) holding at least one of a
    token's top-k experts, the experts laid out contiguously over the expert-parallel ranks
    (Megatron-Core's expert placement) and the choice spread evenly (balanced or force-balanced
    routing, Megatron-Core's random logits). With group-limited routing (`Moe.groups`:
    DeepSeek-V3 draws its 8 experts from 4 of 8 contiguous groups, report section 3.2.2) the
    experts come from `group_topk` groups drawn evenly: a domain holding whole groups is
    missed when it holds no chosen group or its chosen groups none of the experts; a group
    spanning whole domains, likewise. Layouts where groups and domains do not nest are priced
    without the limit (more copies: slower)."""
    e, k, per = moe.n_experts, moe.top_k, moe.n_experts // domains
    g, tg = moe.groups, moe.group_topk
    if g is None or tg >= g or (g % domains and domains % g):
        return (1 - _none_of(e, per, k)) * domains
    size = e // g  # experts a group
    pool = tg * size  # the chosen groups' experts
    if g % domains == 0:  # a domain holds q whole groups; j of them chosen (hypergeometric)
        q = g // domains
        none = sum(math.comb(q, j) * math.comb(g - q, tg - j) / math.comb(g, tg)
                   * _none_of(pool, j * size, k) for j in range(min(q, tg) + 1))
    else:  # a group spans domains / g domains, each holding `per` of its experts
        none = (1 - tg / g) + tg / g * _none_of(pool, per, k)
    return (1 - none) * domains


def _collective_s(hw, op: str, algo: str, ranks: int, stride: int, size: float,
                  nccl_p2p: bool = True) -> float:
    """One call on `ranks` GPUs `stride` apart in a block of ranks x stride consecutive GPUs,
    alone on their links (no launch floor inside a step, as tp_overlap prices its own).
    `nccl_p2p` false: not NCCL's grouped send/recv (DeepEP and HybridEP move tokens with their
    own kernels over NVSHMEM, the NIC driven from the GPU, deepseek-ai/DeepEP README), so the
    all-to-all latency a profile fitted on NCCL's alltoall_perf (its proxy thread's cost per
    peer) is not theirs: P - 1 steps, as before that fit."""
    span = ranks * stride
    topo = build_topology(hw, span)
    if not nccl_p2p:
        topo = replace(topo, a2a_call_s=None, a2a_peer_s=None)
    group = np.arange(0, span, stride)
    nodes = distinct(topo.node_of(group))
    c = calibrated(hw, op, algo, ranks, size, nodes=nodes)
    phases = c.applied(PhaseCache(topo).phases(op, c.algo, [group], c.moved))
    return max(time_alone(topo, phases), c.min_s) + c.overhead_s


EP_COLLECTIVES = ProfileMemo()  # _collective_s's answers per profile and shape


def moe_layer_s(cfg) -> float:
    """Seconds of one MoE layer's dispatch and combine, one micro-batch, one pass: both
    collectives of the dispatch and their mirror images (a reduce-scatter for an all-gather)."""
    if cfg.model.moe is None:
        return 0.0
    total = 0.0
    for op, ranks, stride, size in _collectives(cfg):
        mirror = "reduce_scatter" if op == "all_gather" else op
        for each in (op, mirror):
            # NCCL_ALGO does not reach point-to-point sends: an all-to-all is NCCL's own
            algo = "auto" if each == "all_to_all" else cfg.algo
            nccl_p2p = cfg.moe_dispatcher != "flex"
            key = (each, algo, ranks, stride, size, nccl_p2p)
            total += EP_COLLECTIVES.get(cfg.hardware, key, partial(
                _collective_s, cfg.hardware, each, algo, ranks, stride, size, nccl_p2p))
    return total


def ep_layer_s(cfg, layer_fwd_s: float, layer_bwd_s: float) -> tuple[float, float]:
    """(forward, backward) seconds a mean layer of the model waits for dispatch and combine,
    per micro-batch: a MoE layer's share of the layers times its calls, forward once and
    backward once (again in the backward where the whole layer is recomputed: full
    recomputation, or Megatron-Core's --recompute-modules moe); with
    `moe_overlap`, what the overlap leaves: the calls run beside the layer's compute, whose
    kernels lose the SMs the communication kernels hold (the profile's [compute]
    interference i, NCCL's CTAs over the other SMs, as on the data-parallel stream: compute
    runs at 1 / (1 + i) while a call is in flight), so a pass of compute C beside calls of M
    seconds takes C + max(M - C, M i / (1 + i)): the calls' excess where they outlast it, else
    the compute they slowed. DeepSeek-V3's own kernels held 20 of 132 SMs (its report,
    section 3.2.2), about the 16 of NCCL's channels on H100. Of what that would hide,
    Megatron-Core's overlap hides the profile's [compute] ep_overlap_share (`overlap_share`)."""
    if cfg.model.moe is None:
        return 0.0, 0.0
    share = cfg.model.moe_share
    one = moe_layer_s(cfg)
    again = recomputes(cfg.recompute, "moe")  # the recomputed forward's calls, in backward
    # every call waited for in full (nothing beside it), what the overlaps start from
    full_f, full_b = one, one * (2 if again else 1)
    fwd, bwd = full_f, full_b
    i = cfg.hardware.compute.interference or 0.0
    slowed = i / (1 + i)  # share of the compute the calls' SMs take while they run
    if cfg.moe_shared_overlap:
        # Megatron-Core's --moe-shared-expert-overlap: beside each call, the shared expert's
        # GEMM the dispatcher launches on its own stream (`shared_beside`)
        f1, f2, b1, b2 = shared_expert_s(cfg)
        fwd = shared_beside(one, (f1, f2), slowed)
        bwd = shared_beside(one, (b2, b1), slowed) + (fwd if again else 0.0)
    if cfg.moe_overlap:
        alone = unpaired_share(cfg)  # passes with no other micro-batch's pass beside them
        h = overlap_share(cfg)

        def left(calls: float, compute: float) -> float:
            """What a paired pass's calls leave: all but the share of the hideable part."""
            return calls - h * (calls - max(calls - compute, calls * slowed))

        # a paired pass hides its calls behind the other micro-batch's compute (from the
        # calls in full); an unpaired one keeps what the shared expert left of them
        fwd = alone * fwd + (1 - alone) * left(full_f, layer_fwd_s)
        bwd = alone * bwd + (1 - alone) * left(full_b, layer_bwd_s)
    return share * fwd, share * bwd


def shared_beside(calls: float, gemms: tuple[float, float], slowed: float) -> float:
    """What a pass's dispatch and combine (`calls` seconds, half each: the combine mirrors
    the dispatch) still wait for where each runs beside one of the shared expert's GEMMs
    (`gemms`, seconds; Megatron-Core's --moe-shared-expert-overlap: token_dispatcher.py
    launches the shared expert's fc1 and activation on SharedExpertMLP.stream after the
    dispatch's all-to-all and its fc2 after the combine's, shared_experts.py; backward mirrors
    it, fc2's gradients beside the combine's backward): each half's excess over its GEMM, or,
    where the GEMM outlasts it, what the calls' SMs take from the GEMM while they run
    (`slowed`: a pass of compute C beside calls M takes C + max(M - C, M i / (1 + i)), as
    ep_layer_s's overlap)."""
    half = calls / 2
    return sum(max(half - g, half * slowed) for g in gemms)


def shared_expert_s(cfg) -> tuple[float, float, float, float]:
    """(fc1 forward, fc2 forward, fc1 backward, fc2 backward) seconds of one MoE layer's shared
    expert, one micro-batch (its "shared in" / "shared out" GEMMs of simulator/layout/shapes.py
    moe_work at simulator/step/roofline.py gemm_s, in FP8 where the run quantizes them; its
    activation, a few percent of the GEMMs, is left out). 0 where the model has none."""
    from simulator.layout.shapes import layer_shapes
    from simulator.step.roofline import gemm_pass_s

    s = layer_shapes(cfg.model, cfg.micro_batch, cfg.seq, cfg.tp,
                     cfg.sequence_parallel and cfg.tp > 1, cfg.cp, True, cfg.routing)

    def module_s(name: str) -> tuple[float, float]:
        """(forward, backward) seconds of the layer's GEMMs named `name` (0 where none)."""
        times = [gemm_pass_s(g, cfg.hardware, cfg.fp8, cfg.quantized_gemms, cfg.cast_recipe)
                 for g in s.gemms if g.name == name]
        return sum(f for f, _ in times), sum(b for _, b in times)

    (f1, b1), (f2, b2) = module_s("shared in"), module_s("shared out")
    return f1, f2, b1, b2


def overlap_share(cfg) -> float:
    """The share of the hideable dispatch and combine Megatron-Core's overlap hides: the
    profile's [compute] ep_overlap_share, fitted on published A/B pairs of the overlap off and
    on (bench/moe_overlap_fit.py: on 16 H100 it saved 0.55-0.65 of what this model's pairing
    would); 1 where the profile gives none, and for a non-interleaved pipeline, which is not
    Megatron-Core's (DeepSeek-V3's DualPipe, `unpaired_share`)."""
    share = cfg.hardware.compute.ep_overlap_share
    if share is None or (cfg.pp > 1 and cfg.pp_schedule != "interleaved"):
        return 1.0
    return share


def unpaired_share(cfg) -> float:
    """The share of a rank's forward (and as many of its backward) passes that Megatron-Core's
    expert-parallel overlap runs alone, their dispatch and combine in full: the overlap pairs
    one micro-batch's forward with another's backward (megatron/core/pipeline_parallel/
    combined_1f1b.py), which the schedule's warm-up forwards and cool-down backwards lack.
    Without pipelining, "the forward step for the first microbatch is executed alone" and the
    last backward too (`combined_1f1b_schedule_for_no_pipelining`): 1 of the step's m
    micro-batches. Interleaved (schedules.py `get_pp_rank_microbatches`), rank r runs
    2 (p - r - 1) + (v - 1) g + 1 warm-up forwards of its m v chunk passes, "one extra
    micro-batch forward step before the 1f1b stages" with the overlap, g the micro-batch group
    per virtual stage (p by default): v p over the ranks' mean, a share of p / m. Megatron-Core
    asserts virtual stages wherever PP > 1 with the overlap (transformer_config.py), so a
    non-interleaved pipeline with it is another stack's schedule (DeepSeek-V3's DualPipe), whose
    warm-up pairing is not published: none priced alone there."""
    if cfg.pp == 1:
        return 1 / cfg.accum
    if cfg.pp_schedule == "interleaved":
        return min(1.0, cfg.pp / cfg.accum)
    return 0.0


def ep_bytes_per_layer(cfg) -> float:
    """Bytes one GPU sends per mean layer and micro-batch for dispatch and combine, forward and
    backward (nccl-tests' wire factors: (P-1)/P of S)."""
    if cfg.model.moe is None:
        return 0.0
    share = cfg.model.moe_share
    # dispatch+combine, forward and backward, and forward again where the layer is recomputed
    passes = 2 * 2 + (2 if recomputes(cfg.recompute, "moe") else 0)
    wire = sum((ranks - 1) / ranks * size for _, ranks, _, size in _collectives(cfg))
    return share * passes * wire
