"""The SCAPE authors' reducer as a communication plan (DESIGN sections 4-5; torch-free).

Follows mz687/SCAPE_SC26 @ ebb256c, megatron/core/distributed/fp8_topk_adams_reducer.py, class
TopKPerLayerSyncMomentumAdamSReducerV2 (the non-FP8 subclass every scaling script runs: none
sets --use-fp8-topk-quant), read, not copied. Line numbers below are that file's.

Per step, without the distributed optimizer (`reduce`, R:3571-5667):
- the owner of each whole tensor (contiguous greedy runs by cumulative size, target N/P, a
  tensor never split: R:390-459) picks the next mask by per-tensor top-k of its local
  error-corrected momentum |b1*m + (1-b1)*g + r|, k = max(1, floor(d*n)) (R:1379-1549,
  R:2460-2467); norm and bias tensors are always sent dense (R:2470-2481);
- the mask goes out as a bitmap all-gather, one bit per element, each rank's slot padded to the
  largest owner's bytes (R:2556-2645), launched async on the same communicator before the
  payload (so it precedes the payload on the wire) and waited for before the next forward;
- the payload: one synchronous fp32 all-reduce (AVG) of the K compact momentum values
  (R:5153-5180);
- three Python loops over every tensor (pass 1, pass 2, the pending AdamS update; about 60
  launches and 4 host syncs per tensor) compute it; the optimizer proper is SGD.
With --use-distributed-optimizer (R:3602-4598): selection per (tensor x shard) piece on the
shard owner, so the bitmap slot is about N/(8P); the loops run over the local pieces, plus one
unpack + nonzero over the whole mask; AdamS runs on the shards; parameters return by the
reducer's sparse sync (`sync_sparse_params_from_local_shards`, R:1630-2245: an fp32 all-reduce
of the K updated values, a decay of the other coordinates and a cast copy of the replica).
Residual CPU offload moves the residual over the host link (H2D 4N + 4N_owned, D2H 4N per step
without the distributed optimizer, 4N/P each way with it); full-parameter offload moves the
fp32 replica (4N each way) inside the sparse sync.

With the distributed optimizer the reducer clips the synced gradient itself
(--move-clip-grad-to-reducer, which every SCAPE script sets): its fp64 norm is one all-reduce of
one element over every rank (R:4531-4549, then `.item()`). Megatron's optimizer then skips its
clip but still calls get_grad_norm for the log: another one-element all-reduce, fp32, over the
same group (ChainedOptimizer.step; profiles/external/scape-sc26.reducer.md section 3). The plan
carries both where clipping is on (`clip_grad`; the authors' scripts pass --clip-grad 1.0), and
our runtime sends both. They were left out from bd3757b to 2026-11-29: a choice made after the
first held-out errors, when rings would have charged them about 0.07 s each at 64 GPUs; under
NCCL's choice they are trees of a few milliseconds (profiles/external/late-constants.md
section 5). Without the distributed optimizer the norms' group is the model-parallel group of
one rank: no collective. The norm's L2 pass over the shard is in the optimizer step's fitted
cost per element (Megatron's dense step computes the same).

Kernel byte counts per element come from counting each loop's torch ops (fp32 reads + writes)
in the functions cited; launches per tensor likewise. Neither is fitted to any measurement.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from scape.plan.types import NORM_BYTES, CommOp, Kernel, Plan, SchemeConfig, StepPlan

# Bytes moved per element by each loop of the reducer (fp32 unless said), counted from its ops.
# Pass 1 over every tensor (R:4933-5151): clone m (8), unpack + bool (3), sum (1), c = b1*m +
# (1-b1)*g + r as copy/mul/add/add (8+8+12+12), nonzero (1), residual copy + masked_fill (8+9).
PASS1_BYTES = 70.0
# Pass 2 (R:5235-5443): clone (8), unpack + bool (3), sum (1), zeros_like (4), g_sync
# mul/sub/div/mask-to-fp32/mul (8+12+8+5+12), fp64 norm to/pow/sum (12+16+8), copy back (8).
PASS2_BYTES = 105.0
# ... and without residual offload its second residual rebuild: mul/add/add/masked_fill/copy.
PASS2_RESIDUAL_BYTES = 49.0
# Pending AdamS update (R:5552-5626): clone (8), unpack (5), momentum (8+12+12+8), variance
# (8+8+16), sqrt/mul/add (24), update mul/div/add (32), fp64 metric (36), copy (8).
PENDING_BYTES = 185.0
# Next-mask build on owned tensors (R:1379-1549): c as copy/mul/add/add (40), abs (8), top-k
# (radix select: about two fp32 reads, 8 more), pack (1).
MASK_BUILD_BYTES = 57.0
# Launches per tensor: pass 1 (12), pass 2 (25), pending (22); mask build per owned tensor (9).
OPS_PER_TENSOR = 59
OPS_PER_OWNED_TENSOR = 9
# Distributed optimizer: loop 1 (mask build, as above) and loop 2 (R:4045-4505: clone, stage,
# index_fill, zeros_like, index_copy, residual, g_sync, grad copy, norm) per local piece; one
# unpack + nonzero over the whole mask (R:1308-1333); the sparse sync's decay (8) and cast copy
# (6) over the replica.
DISTOPT_LOOP_BYTES = 57.0 + 110.0
DISTOPT_GLOBAL_BYTES = 3.0 + 14.0
OPS_PER_PIECE = 9 + 18
OPS_PER_TENSOR_DISTOPT = 4 + 10  # global index, sparse sync per tensor
HOST_BYTES = 4  # the residual and the replica are fp32
# the distributed optimizer's two norm all-reduces, named as the runtime sends them
CLIP_NORM = "clip-norm all-reduce (fp64, one element)"
LOG_NORM = "optimizer grad-norm all-reduce (fp32, one element)"


@dataclass(frozen=True)
class Ownership:
    """Which rank owns which tensors (no distributed optimizer): per-rank element counts."""

    owned: tuple[int, ...]  # elements each rank owns
    tensors: tuple[int, ...]  # tensors each rank owns


def greedy_owners(tensors: list[int], world: int) -> Ownership:
    """Contiguous runs of whole tensors, greedy by cumulative size (R:390-459): move to the
    next owner once this one holds the target N/P and more tensors than owners remain, or
    when only as many tensors as owners remain."""
    target = sum(tensors) / world
    owned, counts = [0] * world, [0] * world
    r = 0
    for i, n in enumerate(tensors):
        owned[r] += n
        counts[r] += 1
        left = len(tensors) - i - 1
        if r < world - 1 and ((owned[r] >= target and left > world - 1 - r)
                              or left <= world - 1 - r):
            r += 1
    return Ownership(tuple(owned), tuple(counts))


def k_of(density: float, n: int) -> int:
    """Selected elements of a tensor of n: max(1, floor(d*n)) (R:2460-2467)."""
    return n if density >= 1 else max(1, math.floor(density * n))


def selected(density: float, tensors: list[int], dense: list[bool]) -> int:
    """K: every tensor's selection, the dense (norm, bias) ones whole."""
    return sum(n if d else k_of(density, n) for n, d in zip(tensors, dense, strict=True))


def shard_pieces(tensors: list[int], dense: list[bool], world: int
                 ) -> list[list[tuple[int, int, bool]]]:
    """Per rank, the (start, end, dense) pieces where its shard of ceil(N/P) elements cuts the
    tensors (`_distopt_local_shard_range`, R:3427-3451; one bucket, D:69-73): with the
    distributed optimizer, selection and the bitmap go piece by piece."""
    shard = math.ceil(sum(tensors) / world)
    out: list[list[tuple[int, int, bool]]] = [[] for _ in range(world)]
    start = 0
    for n, d in zip(tensors, dense, strict=True):
        a, end = start, start + n
        while a < end:
            r = a // shard
            b = min(end, (r + 1) * shard)
            out[r].append((a, b, d))
            a = b
        start = end
    return out


def owner_pieces(tensors: list[int], dense: list[bool], world: int, distopt: bool
                 ) -> list[list[tuple[int, int, bool]]]:
    """Per rank, the (start, end, dense) pieces it selects and sends the bitmap of: whole
    tensors in greedy contiguous runs (R:390-459), or with the distributed optimizer the cuts
    of its shard (R:3427-3451)."""
    if distopt:
        return shard_pieces(tensors, dense, world)
    out, i, start = [], 0, 0
    for count in greedy_owners(tensors, world).tensors:
        pieces = []
        for n, d in zip(tensors[i : i + count], dense[i : i + count], strict=True):
            pieces.append((start, start + n, d))
            start += n
        out.append(pieces)
        i += count
    return out


def coalesce(pieces: list[tuple[int, int, bool]]) -> list[tuple[int, int]]:
    """A rank's owned ranges with adjacent ones merged (R:2533-2554): each is packed on its own
    byte boundary in the rank's bitmap slot. (Megatron's distributed-optimizer buffer pads
    parameter starts to 64 elements, which splits a shard into one range per piece: at most a
    byte more per piece, left out here.)"""
    out: list[tuple[int, int]] = []
    for a, b, _ in pieces:
        if out and out[-1][1] == a:
            out[-1] = (out[-1][0], b)
        else:
            out.append((a, b))
    return out


def bitmap_bytes(pieces: list[tuple[int, int, bool]]) -> int:
    """A rank's bitmap: whole bytes per coalesced range (R:2556-2617)."""
    return sum(math.ceil((b - a) / 8) for a, b in coalesce(pieces))


def scape_authors(cfg: SchemeConfig, n: int, world: int, dt, tensors: list[int] | None = None,
                  dense: list[bool] | None = None) -> Plan:
    """The authors' reducer: see the module docstring. `tensors` are the parameter tensors'
    sizes in buffer order (one tensor of n when not given), `dense` flags the ones the reducer
    never sparsifies (norms, biases)."""
    tensors = list(tensors or [n])
    dense = list(dense or [False] * len(tensors))
    if not cfg.extra.get("exclude_from_topk", True):  # --no-topk-adams-use-exclude-from-topk
        dense = [False] * len(tensors)
    distopt = bool(cfg.extra.get("distributed_optimizer", False))
    res_off = bool(cfg.extra.get("residual_offload", False))
    par_off = bool(cfg.extra.get("param_offload", False))
    kernels: list[Kernel] = []
    if distopt:
        shard = math.ceil(n / world)
        by_rank = shard_pieces(tensors, dense, world)
        K = sum(b - a if d else k_of(cfg.density, b - a) for pcs in by_rank for a, b, d in pcs)
        slot = max(bitmap_bytes(pcs) for pcs in by_rank)  # padded to the largest
        pieces = max(len(pcs) for pcs in by_rank)
        ops = (
            CommOp("next-mask bitmap all-gather", "all_gather", world * slot, "after_backward"),
            CommOp("momentum payload all-reduce (fp32)", "all_reduce", 4 * K,
                   "after_backward"),
            CommOp("sparse parameter sync all-reduce (fp32)", "all_reduce", 4 * K,
                   "after_update"),
        )
        if cfg.clip_grad is not None:
            # the reducer's clip norm: one fp64 element over every rank (R:4531-4549), after
            # the payload whose result it reads; then Megatron's optimizer step still computes
            # its own grad norm for the log (one fp32 element, same group)
            ops = (*ops[:2], CommOp(CLIP_NORM, "all_reduce", NORM_BYTES, "after_backward"),
                   CommOp(LOG_NORM, "all_reduce", 4, "after_backward"), *ops[2:])
        kernels += [
            Kernel("reducer loops over local pieces", "reducer_bytes",
                   DISTOPT_LOOP_BYTES * shard, "pre"),
            Kernel("mask indices, replica decay and cast", "reducer_bytes",
                   DISTOPT_GLOBAL_BYTES * n, "post"),
            Kernel("reducer launches", "host_ops",
                   OPS_PER_PIECE * pieces + OPS_PER_TENSOR_DISTOPT * len(tensors), "pre"),
            Kernel("adams update", "optimizer_adams", shard, "update"),
        ]
        if res_off:
            kernels.append(Kernel("residual offload (host link)", "host_copy",
                                  2 * HOST_BYTES * shard, "pre"))
        if par_off:
            kernels.append(Kernel("parameter replica offload (host link)", "host_copy",
                                  2 * HOST_BYTES * n, "post"))
    else:
        K = selected(cfg.density, tensors, dense)
        own = greedy_owners(tensors, world)
        slot = math.ceil(max(own.owned) / 8)  # the largest owner, whole bytes
        ops = (
            CommOp("next-mask bitmap all-gather", "all_gather", world * slot, "after_backward"),
            CommOp("momentum payload all-reduce (fp32)", "all_reduce", 4 * K,
                   "after_backward"),
        )
        per_elem = PASS1_BYTES + PASS2_BYTES + PENDING_BYTES + (
            0.0 if res_off else PASS2_RESIDUAL_BYTES)
        mine = max(own.owned)  # the slowest rank builds the largest owner's masks
        kernels += [
            Kernel("next-mask build (owned tensors)", "reducer_bytes",
                   MASK_BUILD_BYTES * mine, "pre"),
            Kernel("reducer loops over every tensor", "reducer_bytes", per_elem * n, "pre"),
            Kernel("reducer launches", "host_ops",
                   OPS_PER_TENSOR * len(tensors) + OPS_PER_OWNED_TENSOR * max(own.tensors),
                   "pre"),
            # Megatron's optimizer step still runs (SGD applying the reducer's update)
            Kernel("optimizer step (SGD on the update)", "optimizer_adams", n, "update"),
        ]
        if res_off:
            kernels.append(Kernel("residual offload (host link)", "host_copy",
                                  HOST_BYTES * (2 * n + mine), "pre"))
    return Plan(cfg.scheme, ((1.0, StepPlan(ops, tuple(kernels))),))
