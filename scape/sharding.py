"""A flat fp32 master buffer over a model's parameters, shards per rank, views back.

ZeRO-1 style (Rajbhandari et al. 2020, stage 1): the buffer is padded to a multiple of
`world * multiple` so it splits into `world` equal shards; rank r owns elements
[r * shard, (r + 1) * shard). Padding elements are zero and stay zero.
"""

from __future__ import annotations

import torch


def padded_size(numel: int, world: int, multiple: int = 1) -> int:
    """`numel` rounded up to a multiple of world * multiple: `world` equal shards."""
    unit = world * multiple
    return -(-numel // unit) * unit


class FlatParams:
    def __init__(self, params: list[torch.nn.Parameter], world: int, multiple: int = 1):
        self.params = [p for p in params if p.requires_grad]
        self.numel = sum(p.numel() for p in self.params)  # real parameters
        self.padded = padded_size(self.numel, world, multiple)
        self.world = world
        self.shard_size = self.padded // world
        self.master = torch.zeros(self.padded, dtype=torch.float32)  # [padded] fp32
        self.grad = torch.zeros(self.padded, dtype=torch.float32)  # [padded] fp32
        self.pull_params()

    def shard(self, t: torch.Tensor, rank: int) -> torch.Tensor:
        """Rank `rank`'s slice of a [padded] buffer (a view)."""
        return t[rank * self.shard_size : (rank + 1) * self.shard_size]

    def pull_params(self) -> None:
        """Model parameters -> master buffer."""
        offset = 0
        for p in self.params:
            self.master[offset : offset + p.numel()].copy_(p.detach().reshape(-1))
            offset += p.numel()

    def push_params(self) -> None:
        """Master buffer -> model parameters (cast to their dtype)."""
        offset = 0
        with torch.no_grad():
            for p in self.params:
                p.copy_(self.master[offset : offset + p.numel()].view_as(p))
                offset += p.numel()

    def pull_grads(self) -> torch.Tensor:
        """Model .grad -> flat gradient buffer (zeros for missing grads); returns it."""
        offset = 0
        for p in self.params:
            view = self.grad[offset : offset + p.numel()]
            if p.grad is None:
                view.zero_()
            else:
                view.copy_(p.grad.reshape(-1))
            offset += p.numel()
        return self.grad
