"""SCAPE as its authors' reducer runs it, on torch.distributed (DESIGN section 5).

Follows mz687/SCAPE_SC26 @ ebb256c, megatron/core/distributed/fp8_topk_adams_reducer.py,
class TopKPerLayerSyncMomentumAdamSReducerV2 (the non-FP8 class every scaling script runs),
read, not copied; R:NNNN are that file's lines, as in profiles/external/scape-sc26.reducer.md,
which this module implements step by step. Its plan is scape/plan/scape_authors.py: the
runtime sends exactly the collectives that plan lists, plus a bootstrap mask all-reduce at step 1.

Per step t (`reduce`, R:3571), with c = b1*m + (1-b1)*g + r over every coordinate (this rank's
gradient g and residual r, the shared first moment m):
1. step 1 only: each owner picks the current mask at d(1) on its tensors; a synchronous MAX
   all-reduce of one byte per element merges them (R:4788-4853, R:1335-1377);
2. the owners pick the next mask at d(t+1): per-tensor top-k of |c|, k = max(1, floor(d*n)),
   norm and bias tensors whole (R:1379-1549, R:2460-2481), and all-gather it as bitmaps, LSB
   first, each rank's slot padded to the largest (R:2556-2645), asynchronously, before the
   payload (R:4879), waited for before the next forward (`prepare_pre_forward`, R:891-911);
3. pass 1: the K values of c on the current mask go into one fp32 payload; the residual keeps
   the rest, in momentum units (R:4933-5151); the payload is averaged by an all-reduce
   (R:5153-5180; gloo has no AVG: SUM, then / P);
4. pass 2: g_sync = (m_sync - b1*m) / (1 - b1) on the mask (R:5235-5443); its global norm clips
   it when `clip_grad` is set (R:5495-5550);
5. the pending AdamS update (R:5552-5626): m <- (b1*m + (1-b1)*g_sync) on the mask, 0 off it;
   v = b2*m_prev^2 + (1-b2)*g_sync^2; the parameters take lr * (m/bc1 / (sqrt(v)/sqrt(bc2) +
   eps) + wd*p) by Megatron's SGD (so off the mask only weight decay).

With `distributed_optimizer` (R:3602-4598): the owners are the shards' (each tensor cut where
the ceil(N/P) shards cut it, one bitmap piece per cut, R:3427-3451); AdamS steps the shard with
the unmasked g_sync (R:4392-4518); the parameters return by the reducer's sparse sync
(`sync_sparse_params_from_local_shards`, R:1630-2245): an fp32 all-reduce of the K updated
values (owners fill their own), the other coordinates decayed by (1 - lr*wd) on every replica.

Where this runtime departs from the code as written (bytes unchanged; the module docstring of
scape/plan/scape_authors.py and the reducer note say more):
- without residual offload, pass 2 rebuilds the residual from the one pass 1 already updated
  (R:5331-5393), which leaves r = (2c - r_old) off the mask; this runtime keeps r = c off the
  mask, as the single-pass offload path does;
- with the distributed optimizer the reducer fills the payload with the shard owner's c only,
  so the average is c_owner / P (R:4336-4385); here every rank contributes its c, as without
  it, so every rank keeps the whole first moment and residual (4N each, memory the authors'
  shards do not spend);
- with the distributed optimizer the clip norm is this rank's shard's, summed by the reducer's
  one-element fp64 all-reduce (R:4531-4549), though every rank holds the whole g_sync, and the
  norm is all-reduced once more in fp32 as Megatron's optimizer step does for its log;
- residual CPU offload keeps the residual in (pinned) host memory and copies it each step;
  the full-parameter offload is a plan for the simulator only.
"""

from __future__ import annotations

import math

import torch

from profiles import UserError
from scape.comm import Handle
from scape.plan import Plan, plan
from scape.plan.scape_authors import (
    CLIP_NORM,
    LOG_NORM,
    bitmap_bytes,
    coalesce,
    k_of,
    owner_pieces,
)
from scape.schemes.base import RUNTIME_DTYPES, Scheme, mask_log
from scape.select import top_k_indices


def _top_k(score: torch.Tensor, k: int) -> torch.Tensor:
    """The k largest of one piece's scores (the authors' reducer takes torch.topk of each
    layer's piece, fp8_topk_adams_reducer.py): the same set either way but for ties (this
    one keeps the lowest positions, torch.topk any; the ranks agree either way, as the owners'
    masks are all-gathered). On a CPU scape.select's exact threshold (1.25e6 scores, one
    thread: 5.1 against 10.9 ms at d = 0.01, 10.6 against 12.3 at 0.1); on a GPU torch.topk
    itself, faster there at a piece's size (1e8 scores on the H200: 2.2 against 3.1 ms for
    the sampled band, results/gpu-sessions/session13)."""
    if score.is_cuda:
        return torch.topk(score, k, sorted=False).indices
    return top_k_indices(score, k)


def tensor_layout(params: list[torch.nn.Parameter]) -> tuple[list[int], list[bool]]:
    """Sizes of the trainable tensors in buffer order, and which the reducer never sparsifies:
    it excludes tensors named *norm* or *bias* (R:2470-2481), in these models exactly the
    one-dimensional ones."""
    params = [p for p in params if p.requires_grad]
    return [p.numel() for p in params], [p.dim() <= 1 for p in params]


def pack_lsb(bits: torch.Tensor) -> torch.Tensor:
    """[n] bool -> [ceil(n/8)] uint8, element 8b+j in bit j of byte b (R:30-47)."""
    pad = (-bits.numel()) % 8
    b = torch.cat([bits, bits.new_zeros(pad)]).view(-1, 8).to(torch.uint8)  # [n/8, 8]
    shifts = torch.arange(8, dtype=torch.uint8, device=bits.device)
    return (b << shifts).sum(dim=1, dtype=torch.uint8)


def unpack_lsb(codes: torch.Tensor, n: int) -> torch.Tensor:
    """[ceil(n/8)] uint8 -> [n] bool (R:49-66)."""
    shifts = torch.arange(8, dtype=torch.uint8, device=codes.device)
    return ((codes.unsqueeze(1) >> shifts) & 1).bool().reshape(-1)[:n]


class ScapeAuthors(Scheme):
    multiple = 1  # the reducer's buffer has no padding without the distributed optimizer

    def __init__(self, *args):
        super().__init__(*args)
        extra = self.cfg.extra
        self.distopt = bool(extra.get("distributed_optimizer", False))
        self.offload = bool(extra.get("residual_offload", False))
        if extra.get("param_offload"):
            raise UserError("the full-parameter CPU offload is a plan for the simulator only: "
                            "this runtime keeps the parameter replica on the device")
        numel = self.flat.numel
        self.sizes, self.dense = tensor_layout(self.flat.params)
        if not extra.get("exclude_from_topk", True):
            # the authors' Llama-500M runs passed --no-topk-adams-use-exclude-from-topk: norms
            # and biases are sparsified like every other tensor
            self.dense = [False] * len(self.sizes)
        # per rank, the pieces it selects and its bitmap slot carries
        self.layout = owner_pieces(self.sizes, self.dense, self.world, self.distopt)
        self.ranges = [coalesce(pieces) for pieces in self.layout]  # per rank, bitmap ranges
        self.slot = max(bitmap_bytes(pieces) for pieces in self.layout)  # bytes, the largest
        self.m = torch.zeros(numel)  # [N] fp32 first moment, the same on every rank
        host = dict(device="cpu", pin_memory=torch.cuda.is_available()) if self.offload else {}
        self.residual = torch.zeros(numel, **host)  # [N] fp32, momentum units, this rank's
        self.mask: torch.Tensor | None = None  # [N] bool, the mask of this step
        self.pending: tuple[Handle, torch.Tensor] | None = None  # next mask in flight
        self.history = mask_log()  # masks used, the last steps (tests read them)

    def plan(self) -> Plan:
        return plan(self.cfg, self.flat.numel, self.world, RUNTIME_DTYPES,
                    tensors=self.sizes, dense=self.dense)

    def density_at(self, t: int) -> float:
        """Density of the mask used at step t (`_scheduled_density`)."""
        return self.cfg.density_at(t)

    # ---- the step ----
    # Memory and passes (a lent H100, 2026-11-26: Llama-1.8B's step held ~18 fp32 buffers of the
    # model's size and did not fit 80 GB): c is built in one buffer and becomes the residual in
    # place; g_sync is written on the mask's K entries only; without the distributed optimizer
    # the update touches only the K masked entries (off the mask m = 0 and the parameters only
    # decay). Every value is the one the full-size expressions give (tests/test_scape_authors).
    def _step(self, lr: float) -> None:
        numel, b1 = self.flat.numel, self.hyper.beta1
        g = self.pull_grads()[:numel]  # [N] fp32, this rank's gradient
        m_prev = self.m  # [N] fp32
        with self.timed("pack"):
            # [N] fp32 corrected momentum, this rank's view: b1 m + (1-b1) g + r, built in the
            # residual's own buffer (it becomes the residual below): two passes and no [N]
            # temporaries, where m * b1, g * (1-b1) and two adds took four and two (on the
            # CPU 9.7 against 76.2 ms at 3e7, 2 threads: fresh buffers fault their pages in)
            c = self.residual.to(g.device)  # the host's copy with offload, else the buffer
            c.add_(g, alpha=1 - b1).add_(m_prev, alpha=b1)
        if self.mask is None:  # bootstrap (R:4788-4853)
            self.mask = self._bootstrap(c)
        self._launch_next(c)
        mask = self.mask
        self.history.append(mask)
        with self.timed("pack"):
            idx = torch.nonzero(mask).squeeze(1)  # [K] int64, ascending
            payload = c[idx]  # [K] fp32
            c.index_fill_(0, idx, 0.0)  # the unsent part of c (single-pass) ...
            if self.offload:
                self.residual.copy_(c)  # ... back to the host
            else:
                self.residual = c  # ... is the residual: no copy
            del c
        self.comm.all_reduce("momentum payload all-reduce (fp32)", payload)
        with self.timed("update"):
            payload.div_(self.world)  # AVG
            # g_sync = (m_sync - b1 m) / (1 - b1), m_sync = the payload on the mask, 0 off it:
            # dist-opt keeps it off the mask, (0 - b1 m) / (1 - b1), [N] fp32; non-dist-opt
            # masks it (R:5413), so only its [K] entries on the mask are made (the clip's norm
            # is theirs: the rest are 0). Gradient units
            on_mask = (payload - b1 * m_prev[idx]).div_(1 - b1)  # [K] fp32
            del payload
            if self.distopt:
                g_sync = (m_prev * b1).neg_().div_(1 - b1)  # [N] fp32
                g_sync[idx] = on_mask
            else:
                g_sync = on_mask
            if self.distopt:  # the norm of this rank's shard, summed over ranks (R:4531-4549)
                lo = self.rank * self.flat.shard_size
                shard = g_sync[lo:min(self.flat.numel, lo + self.flat.shard_size)]  # [N/P]
                self.clip_(g_sync, sharded=True, name=CLIP_NORM, part=shard)
                if self.cfg.clip_grad is not None:
                    # Megatron's optimizer step computes the norm again for its log (fp32)
                    logged = torch.linalg.vector_norm(shard).square().reshape(1)  # [1] fp32
                    self.comm.all_reduce(LOG_NORM, logged)
            else:  # the norm's group is the model-parallel group: this rank alone
                self.clip_(g_sync, sharded=False)
            self._update(g_sync, mask, idx, lr)
        self._wait_next()  # before the next forward (prepare_pre_forward)

    def _update(self, g: torch.Tensor, mask: torch.Tensor, idx: torch.Tensor,
                lr: float) -> None:
        """AdamS from the reducer's g_sync (R:5552-5626; dist-opt: AdamS on the shard, A:375-457,
        then the sparse parameter sync). `idx`: the mask's positions, ascending; `g`: g_sync,
        [N] with the distributed optimizer, else its [K] entries on the mask (0 off it)."""
        h, t, numel = self.hyper, self.t, self.flat.numel
        b1, b2 = h.beta1, h.beta2
        bc1 = 1 - b1**t if h.bias_correction else 1.0
        bc2 = math.sqrt(1 - b2**t) if h.bias_correction else 1.0
        theta = self.flat.master[:numel]  # [N] fp32

        def denom(m_prev: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
            """sqrt(v) / bc2 + eps, v = b2 m_prev^2 + (1 - b2) g^2 (from m before the step)."""
            d = m_prev.square().mul_(b2)
            return d.add_(g.square().mul_(1 - b2)).sqrt_().div_(bc2).add_(h.eps)

        def update(p: torch.Tensor, m: torch.Tensor, d: torch.Tensor) -> None:
            """p <- p (1 - lr wd) - lr (m / bc1) / d, in place."""
            p.mul_(1 - lr * h.weight_decay).addcdiv_(m, d, value=-lr / bc1)

        if not self.distopt:
            # off the mask g_sync = 0 and m = 0 (R:5587-5589): the parameters only decay
            on, m_prev, g_on = theta[idx], self.m[idx], g  # [K] fp32 each
            d = denom(m_prev, g_on)
            m_on = m_prev * b1
            m_on.add_(g_on * (1 - b1))
            update(on, m_on, d)
            theta.mul_(1 - lr * h.weight_decay)
            theta[idx] = on
            self.m.zero_()
            self.m[idx] = m_on
            return
        lo = self.rank * self.flat.shard_size
        hi = min(numel, lo + self.flat.shard_size)
        mine = theta[lo:hi].clone()  # [N/P] the owner's fp32 shard
        d = denom(self.m[lo:hi], g[lo:hi])  # before m moves on
        # every rank keeps the whole first moment, unmasked with dist-opt
        self.m.mul_(b1).add_(g * (1 - b1))
        update(mine, self.m[lo:hi], d)
        self._sparse_sync(theta, mine, lo, mask, lr)

    def _sparse_sync(self, theta: torch.Tensor, mine: torch.Tensor, lo: int,
                     mask: torch.Tensor, lr: float) -> None:
        """Every replica decays off the mask and takes the owners' K new values (R:1630-2245)."""
        idx = torch.nonzero(mask).squeeze(1)  # [K] global positions, ascending
        values = torch.zeros(idx.numel())  # [K] fp32
        own = (idx >= lo) & (idx < lo + mine.numel())
        values[own] = mine[idx[own] - lo]
        self.comm.all_reduce("sparse parameter sync all-reduce (fp32)", values)
        theta.mul_(torch.where(mask, 1.0, 1 - lr * self.hyper.weight_decay))
        theta[idx] = values

    # ---- masks ----
    def _select(self, c: torch.Tensor, density: float) -> torch.Tensor:
        """[N] bool: this rank's owned pieces' top-k of |c| (the rest False)."""
        bits = torch.zeros(self.flat.numel, dtype=torch.bool)
        with self.timed("select"):
            for a, b, dense in self.layout[self.rank]:
                k = k_of(density, b - a)
                if dense or k >= b - a:
                    bits[a:b] = True
                else:
                    bits[a + _top_k(c[a:b].abs(), k)] = True
        return bits

    def _bootstrap(self, c: torch.Tensor) -> torch.Tensor:
        merged = self._select(c, self.density_at(self.t)).to(torch.uint8)  # [N] one byte each
        self.comm.all_reduce("bootstrap mask all-reduce (max)", merged, op="max")
        return merged.bool()

    def _launch_next(self, c: torch.Tensor) -> None:
        """Pick the next mask and all-gather it, each owned range on its own byte boundary."""
        bits = self._select(c, self.density_at(self.t + 1))
        with self.timed("pack"):
            send = torch.zeros(self.slot, dtype=torch.uint8)  # [S] padded to the largest
            at = 0
            for a, b in self.ranges[self.rank]:
                packed = pack_lsb(bits[a:b])
                send[at : at + packed.numel()] = packed
                at += packed.numel()
        gathered = torch.empty(self.world * self.slot, dtype=torch.uint8)  # [P * S]
        handle = self.comm.all_gather("next-mask bitmap all-gather", gathered, send,
                                      async_op=True)
        self.pending = (handle, gathered)

    def _wait_next(self) -> None:
        """Wait for the next mask and stitch the ranks' slots into it (R:2248-2317)."""
        if self.pending is None:
            return
        handle, gathered = self.pending
        handle.wait()
        self.pending = None
        mask = torch.zeros(self.flat.numel, dtype=torch.bool)
        for r, ranges in enumerate(self.ranges):
            slot, at = gathered[r * self.slot : (r + 1) * self.slot], 0
            for a, b in ranges:
                nbytes = math.ceil((b - a) / 8)
                mask[a:b] = unpack_lsb(slot[at : at + nbytes], b - a)
                at += nbytes
        self.mask = mask

    # ---- checkpoint ----
    def _state(self) -> dict:
        return {"m": self.m, "residual": self.residual, "mask": self.mask}

    def _load(self, state: dict) -> None:
        self.m = state["m"].clone()
        self.residual.copy_(state["residual"])
        self.mask = state["mask"]
