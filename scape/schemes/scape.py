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

`sync="momentum"` follows the authors' public Megatron reducer (mz687/SCAPE_SC26,
megatron/core/distributed/fp8_topk_adams_reducer.py, read, not copied): the buffer carries each
rank's error-corrected first moment, the owner chooses the next mask from its local view of
that same quantity (so unsent gradient mass moves the mask), m is zero off the mask, and weight
decay touches every coordinate (`_momentum_step`). `density_warmup_steps` is their geometric
density schedule; `select_per="tensor"` gives each tensor its share of k, as their per-layer
top-k does (our shards still cut across tensors: DESIGN's partitioned selection is kept).
"""

from __future__ import annotations

import math
from dataclasses import replace

import torch

from scape.adams import adams_update_
from scape.comm import Handle
from scape.plan import INDEX_BYTES, kept
from scape.schemes.base import Scheme, Updater, mask_log
from scape.schemes.dense import zero1_step
from scape.schemes.quantized import _pack_bits, _unpack_bits
from scape.select import top_k_indices


class Scape(Scheme):
    multiple = 8  # shards are whole bytes of a bitmap

    def __init__(self, *args):
        super().__init__(*args)
        shard = self.flat.shard_size
        self.opt = Updater("adams", shard)
        momentum = self.cfg.sync == "momentum"
        self.residual = (torch.zeros(self.n) if self.cfg.error_feedback or momentum
                         else None)  # [n] fp32, what this rank has not sent yet
        # momentum sync: first moment carried off the mask on the owner's shard (in gradient
        # units, b1 * m / (1 - b1)), sent when its coordinate is next selected
        self.rho = torch.zeros(shard) if momentum else None  # [n / P] fp32
        self.segments = self._tensor_segments() if self.cfg.select_per == "tensor" else None
        self.mask: torch.Tensor | None = None  # [k] global indices in use at this step
        # next mask in flight: handle, receive buffer, bitmap or not
        self.pending: tuple[Handle, torch.Tensor, bool] | None = None
        self.history = mask_log()  # masks used, the last steps (tests read it)
        self.chosen = mask_log()  # masks chosen, the last steps (tests read it)
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

    def density_at(self, t: int) -> float:
        """Density of the mask used at step t (SchemeConfig.density_at: the authors'
        `_scheduled_density`)."""
        return self.cfg.density_at(t)

    def k_at(self, t: int) -> int:
        """Mask coordinates per shard at step t (the same on every shard)."""
        return kept(self.density_at(t), self.flat.shard_size)

    def _tensor_segments(self) -> list[tuple[int, int]]:
        """This rank's shard cut at parameter-tensor boundaries, as (start, end) offsets in
        the shard; padding is left out."""
        shard, lo = self.flat.shard_size, self.rank * self.flat.shard_size
        segments, offset = [], 0
        for p in self.flat.params:
            a, b = max(offset, lo), min(offset + p.numel(), lo + shard)
            if a < b:
                segments.append((a - lo, b - lo))
            offset += p.numel()
        return segments

    # ---- the step ----
    def _step(self, lr: float) -> None:
        if self.cfg.sparsity == 0 or self.is_dense(self.t):
            self._wait_mask()
            zero1_step(self, self.opt, lr, self.residual)  # sends what was held back, too
            if self.residual is not None:
                self.residual.zero_()
            grads = None
        elif self.cfg.sync == "momentum":
            self._momentum_step(lr)
            return  # it chose and sent the next mask itself
        else:
            grads = self._sparse_step(lr)
        if self.cfg.sparsity > 0:
            self._choose_mask(grads)

    def _wait_mask(self) -> None:
        if self.pending is not None:
            handle, gathered, bitmap = self.pending
            handle.wait()
            self.mask = self._decode(gathered, bitmap)
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
        local = self._owned(mask)
        mine = torch.empty(local.numel())
        self.comm.reduce_scatter("compact grad reduce-scatter", mine, compact)
        mine.div_(self.world)
        self.clip_(mine, sharded=True)  # the synced gradient's nonzeros: its norm
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
            self._gather_masked(mask, local)
        else:
            self.comm.all_gather("param all-gather", flat.master, p_shard.clone())
        g_synced = torch.zeros(shard)
        g_synced[local] = mine
        return g_synced

    def _momentum_step(self, lr: float) -> None:
        """Each rank sends its error-corrected first moment c = b1*m + (1-b1)*(g + residual)
        at the mask; the owner's m becomes the average there and zero elsewhere (what it held
        is carried in `rho` and sent when the coordinate is next selected). The AdamS gradient
        is the one implied by the new moment, g_hat = (m_t - b1*m_{t-1}) / (1 - b1), so v is
        rebuilt from the synchronized buffer alone. Weight decay applies everywhere (alike on
        every rank, nothing sent); only mask coordinates take the AdamS step. Residuals are
        kept in gradient units (c / (1 - b1)), so a full mask is dense AdamS bit for bit."""
        flat, rank, h = self.flat, self.rank, self.hyper
        b1, m, rho, e = h.beta1, self.opt.m, self.rho, self.residual
        g = self.pull_grads()  # [n] fp32, this rank's gradient
        with self.timed("pack"):
            e.add_(g)  # [n] gradients not yet sent
        self._wait_mask()
        mask = self.mask  # [k] global indices, shard by shard
        self.history.append(mask)
        local = self._owned(mask)  # [k / P]
        with self.timed("select"):  # the owner's local view of |c| (up to 1 - b1)
            score = (flat.shard(e, rank) + rho).add_(m, alpha=b1 / (1 - b1)).abs_()  # [n / P]
        self._send_mask(score, self.k_at(self.t + 1))
        with self.timed("pack"):
            compact = e[mask]  # [k] fp32
            e[mask] = 0
        mine = torch.empty(local.numel())  # [k / P] fp32
        self.comm.reduce_scatter("compact grad reduce-scatter", mine, compact)
        mine.div_(self.world)
        with self.timed("update"):
            g_hat = rho[local].add_(mine)  # [k / P] = (m_t - b1 * m_{t-1}) / (1 - b1)
        self.clip_(g_hat, sharded=True)
        with self.timed("update"):
            m_sel = m[local]  # [k / P] m_{t-1} on the mask
            rho.add_(m, alpha=b1 / (1 - b1))  # deselected moments are carried ...
            rho[local] = 0  # ... the mask's go into m_t
            m.zero_()
            flat.master.mul_(1 - lr * h.weight_decay)  # decoupled decay, on every rank alike
            p_shard = flat.shard(flat.master, rank)
            p_sel = p_shard[local]
            adams_update_(p_sel, g_hat, m_sel, self.t, replace(h, weight_decay=0.0), lr)
            p_shard[local], m[local] = p_sel, m_sel
        self._gather_masked(mask, local)

    def _owned(self, mask: torch.Tensor) -> torch.Tensor:
        """This rank's part of a global mask, as offsets in its shard ([k / P], ascending)."""
        k_shard, r = mask.numel() // self.world, self.rank
        return mask[r * k_shard : (r + 1) * k_shard] - r * self.flat.shard_size

    def _gather_masked(self, mask: torch.Tensor, local: torch.Tensor) -> None:
        """All-gather the owners' new parameter values at the mask into every master copy."""
        p_shard = self.flat.shard(self.flat.master, self.rank)
        values = torch.empty(mask.numel())  # [k] fp32
        self.comm.all_gather("param all-gather", values, p_shard[local].clone())
        self.flat.master[mask] = values

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
        self._send_mask(score, self.k_at(self.t + 1))

    def _select(self, score: torch.Tensor, k: int) -> torch.Tensor:
        """The k largest scores of the shard (ascending local indices): over the whole shard,
        or with each tensor's part of the shard keeping its share of k (largest remainder),
        as the authors' per-layer top-k does."""
        if self.segments is None:
            return top_k_indices(score, k)
        lengths = [b - a for a, b in self.segments]
        total = sum(lengths)
        quota = [k * n // total for n in lengths]
        order = sorted(range(len(lengths)), key=lambda i: -(k * lengths[i] % total))
        for i in order[: k - sum(quota)]:
            quota[i] += 1
        return torch.cat([top_k_indices(score[a:b], q) + a
                          for (a, b), q in zip(self.segments, quota, strict=True) if q])

    def _send_mask(self, score: torch.Tensor, k: int) -> None:
        """Choose the next mask on this shard and all-gather it asynchronously."""
        shard = self.flat.shard_size
        with self.timed("select"):
            local = self._select(score, k)  # [k / P] ascending
        self.chosen.append(local + self.rank * shard)
        bitmap = math.ceil(shard / 8) < k * INDEX_BYTES
        with self.timed("pack"):
            if bitmap:
                bits = torch.zeros(shard, dtype=torch.bool)
                bits[local] = True
                send = _pack_bits(bits)  # [shard / 8] uint8
            else:
                send = local.to(torch.int32)  # [k / P]
        gathered = torch.empty(self.world * send.numel(), dtype=send.dtype)
        handle = self.comm.all_gather("mask all-gather", gathered, send, async_op=True)
        self.pending = (handle, gathered, bitmap)
        if self.sync_mask:  # measure what overlapping the mask all-gather is worth
            self._wait_mask()

    def _decode(self, gathered: torch.Tensor, bitmap: bool) -> torch.Tensor:
        """Global mask indices, shard by shard, ascending within each shard."""
        shard = self.flat.shard_size
        offsets = torch.arange(self.world).unsqueeze(1) * shard  # [P, 1]
        if bitmap:
            bits = _unpack_bits(gathered).view(self.world, shard)
            local = torch.stack([torch.nonzero(b).squeeze(1) for b in bits])
        else:
            local = gathered.view(self.world, -1).long()
        return (local + offsets).reshape(-1)

    # ---- checkpoint ----
    def _state(self) -> dict:
        self._wait_mask()  # the next mask is part of the state
        return {**self.opt.state(), "residual": self.residual, "mask": self.mask,
                "rho": self.rho}

    def _load(self, state: dict) -> None:
        self.opt.load(state)
        if self.residual is not None:
            self.residual.copy_(state["residual"])
        self.mask = state["mask"]
        if self.rho is not None:
            self.rho.copy_(state["rho"])
