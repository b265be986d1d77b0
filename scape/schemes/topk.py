"""DGC-style top-k (Lin et al. 2018, residual accumulation): each rank sends the k largest
entries of gradient + residual as (value, int32 index) pairs in one all-gather; the rest stays
in its residual. Selection is O(n) (scape/select.py)."""

from __future__ import annotations

import torch

from scape.plan import kept
from scape.schemes.base import ResidualScheme
from scape.select import top_k_indices


class TopK(ResidualScheme):
    def __init__(self, *args):
        super().__init__(*args)
        self.k = kept(self.cfg.density, self.n)

    def _step(self, lr: float) -> None:
        g, k = self.pull_grads(), self.k
        with self.timed("select"):
            acc = g + self.residual
            idx = top_k_indices(acc.abs(), k)
        with self.timed("pack"):
            # values (as their int32 bit pattern) then indices: one int32 buffer of 2k
            send = torch.cat([acc[idx].view(torch.int32), idx.to(torch.int32)])
            acc[idx] = 0
            self.residual = acc
        gathered = torch.empty(self.world * 2 * k, dtype=torch.int32)
        self.comm.all_gather("top-k all-gather", gathered, send)
        with self.timed("pack"):
            dense = torch.zeros(self.n)
            for chunk in gathered.view(self.world, 2 * k):
                dense.index_add_(0, chunk[k:].long(), chunk[:k].view(torch.float32))
            dense.div_(self.world)
        self.apply(dense, lr)
