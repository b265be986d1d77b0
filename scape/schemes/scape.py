"""SCAPE (arXiv 2607.01678, as DESIGN section 5 reads its abstract) on torch.distributed.

Rank r owns shard r of the flat parameters and of AdamS's first moment m. Each step:
1. error feedback (option): acc = grad + residual;
2. wait for the mask all-gather launched at the end of the previous step (so the mask used at
   step t+1 is the one chosen at step t), pack acc at the k global mask positions;
3. reduce-scatter the compact buffer: rank r receives the summed values of its own mask (no
   indices travel; every rank knows the mask). The residual keeps what was not sent;
4. AdamS on the shard, from those values alone: the second-moment term is rebuilt from the same
   synchronized buffer, so no collective carries it. `update_scope` "masked" changes only mask
   coordinates; "all" lets m decay everywhere (and then every coordinate moves);
5. choose the next mask on the shard: the k/P largest scores (|m| or |m|/sqrt(v)), an O(n/P)
   threshold selection, and all-gather it asynchronously (int32 indices or a bitmap, whichever
   is smaller);
6. all-gather parameters: the k compact values (masked scope) or the whole shard (all).
Dense steps (the first, `dense_warmup_steps`, and every `refresh_every`-th) are ZeRO-1 AdamS
steps that update m everywhere; they also choose and gather the next mask.
"""

from __future__ import annotations

import math

import torch

from scape.adams import adams_update_
from scape.comm import Handle
from scape.plan import INDEX_BYTES, kept
from scape.schemes.base import Scheme, Updater
from scape.schemes.dense import zero1_step
from scape.schemes.quantized import _pack_bits, _unpack_bits
from scape.select import top_k_indices


class Scape(Scheme):
    multiple = 8  # shards are whole bytes of a bitmap

    def __init__(self, *args):
        super().__init__(*args)
        shard = self.flat.shard_size
        self.opt = Updater("adams", shard)
        self.k_shard = kept(self.cfg.density, shard)
        self.use_bitmap = math.ceil(shard / 8) < self.k_shard * INDEX_BYTES
        self.residual = torch.zeros(self.n) if self.cfg.error_feedback else None
        self.mask: torch.Tensor | None = None  # [k] global indices in use at this step
        self.pending: tuple[Handle, torch.Tensor] | None = None  # next mask, in flight
        self.history: list[torch.Tensor] = []  # masks used, per step (tests read it)
        self.chosen: list[torch.Tensor] = []  # masks chosen, per step (tests read it)
        self.dense_warmup = int(self.cfg.extra.get("dense_warmup_steps", 0))
        # "local": off the mask, the owner's first moment follows its own (unsynchronized)
        # gradient, so the next selection sees where gradient mass builds up; "frozen"
        # (default): m changes only where the synchronized gradient arrives.
        self.unmasked_moment = self.cfg.extra.get("unmasked_moment", "frozen")
        # True: wait for the mask all-gather at once instead of during the next forward
        self.sync_mask = bool(self.cfg.extra.get("sync_mask", False))

    def is_dense(self, t: int) -> bool:
        r = self.cfg.refresh_every
        return t == 1 or t <= self.dense_warmup or (r > 1 and t % r == 0)

    # ---- the step ----
    def _step(self, lr: float) -> None:
        if self.cfg.sparsity == 0 or self.is_dense(self.t):
            self._wait_mask()
            zero1_step(self, self.opt, lr, self.residual)  # sends what was held back, too
            if self.residual is not None:
                self.residual.zero_()
            grads = None
        else:
            grads = self._sparse_step(lr)
        if self.cfg.sparsity > 0:
            self._choose_mask(grads)

    def _wait_mask(self) -> None:
        if self.pending is not None:
            handle, gathered = self.pending
            handle.wait()
            self.mask = self._decode(gathered)
            self.pending = None

    def _sparse_step(self, lr: float) -> torch.Tensor:
        flat, rank, shard = self.flat, self.rank, self.flat.shard_size
        g = self.pull_grads()
        acc = g if self.residual is None else g.add_(self.residual)
        self._wait_mask()
        mask = self.mask
        self.history.append(mask)
        with self.timed("pack"):
            compact = acc[mask]  # [k] fp32, shard by shard
            if self.residual is not None:
                self.residual.copy_(acc)
                self.residual[mask] = 0  # kept for later
        mine = torch.empty(self.k_shard)
        self.comm.reduce_scatter("compact grad reduce-scatter", mine, compact)
        mine.div_(self.world)
        local = mask[rank * self.k_shard : (rank + 1) * self.k_shard] - rank * shard
        p_shard, m_shard = flat.shard(flat.master, rank), self.opt.m
        if self.unmasked_moment == "local" and self.cfg.update_scope == "masked":
            with self.timed("update"):
                off = torch.ones(shard, dtype=torch.bool)
                off[local] = False
                b1 = self.hyper.beta1
                m_shard[off] = m_shard[off] * b1 + flat.shard(g, rank)[off] * (1 - b1)
        with self.timed("update"):
            if self.cfg.update_scope == "masked":
                p_sel, m_sel = p_shard[local], m_shard[local]
                adams_update_(p_sel, mine, m_sel, self.t, self.hyper, lr)
                p_shard[local], m_shard[local] = p_sel, m_sel
            else:
                g_shard = torch.zeros(shard)
                g_shard[local] = mine
                adams_update_(p_shard, g_shard, m_shard, self.t, self.hyper, lr)
        if self.cfg.update_scope == "masked":
            values = torch.empty(self.world * self.k_shard)
            self.comm.all_gather("param all-gather", values, p_shard[local].clone())
            flat.master[mask] = values
        else:
            self.comm.all_gather("param all-gather", flat.master, p_shard.clone())
        g_synced = torch.zeros(shard)
        g_synced[local] = mine
        return g_synced

    # ---- masks ----
    def _choose_mask(self, g_synced: torch.Tensor | None) -> None:
        shard = self.flat.shard_size
        with self.timed("select"):
            m = self.opt.m
            score = m.abs()
            if self.cfg.score == "m_over_sqrt_v":
                g = torch.zeros(shard) if g_synced is None else g_synced
                b2 = self.hyper.beta2
                score = score / (m.square() * b2 + g.square() * (1 - b2)).sqrt_().add_(
                    self.hyper.eps)
            local = top_k_indices(score, self.k_shard)  # [k / P] ascending
        self.chosen.append(local + self.rank * shard)
        with self.timed("pack"):
            if self.use_bitmap:
                bits = torch.zeros(shard, dtype=torch.bool)
                bits[local] = True
                send = _pack_bits(bits)  # [shard / 8] uint8
            else:
                send = local.to(torch.int32)  # [k / P]
        gathered = torch.empty(self.world * send.numel(), dtype=send.dtype)
        handle = self.comm.all_gather("mask all-gather", gathered, send, async_op=True)
        self.pending = (handle, gathered)
        if self.sync_mask:  # measure what overlapping the mask all-gather is worth
            self._wait_mask()

    def _decode(self, gathered: torch.Tensor) -> torch.Tensor:
        """Global mask indices, shard by shard, ascending within each shard."""
        shard = self.flat.shard_size
        offsets = torch.arange(self.world).unsqueeze(1) * shard  # [P, 1]
        if self.use_bitmap:
            bits = _unpack_bits(gathered).view(self.world, shard)
            local = torch.stack([torch.nonzero(b).squeeze(1) for b in bits])
        else:
            local = gathered.view(self.world, -1).long()
        return (local + offsets).reshape(-1)

    # ---- checkpoint ----
    def _state(self) -> dict:
        self._wait_mask()  # the next mask is part of the state
        return {**self.opt.state(), "residual": self.residual, "mask": self.mask}

    def _load(self, state: dict) -> None:
        self.opt.load(state)
        if self.residual is not None:
            self.residual.copy_(state["residual"])
        self.mask = state["mask"]
