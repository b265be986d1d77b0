"""Dense baselines (DESIGN section 4): DDP (gradient all-reduce in buckets, every rank
updates all N) and ZeRO-1 / Megatron distributed optimizer (gradient reduce-scatter, shard
update, parameter all-gather), each with AdamW or AdamS."""

from __future__ import annotations

import torch

from scape.schemes.base import Scheme, Updater


class DenseDDP(Scheme):
    def __init__(self, *args):
        super().__init__(*args)
        self.opt = Updater(self.cfg.optimizer, self.n)
        (op,) = self.plan().steps[0][1].ops or (None,)
        self.buckets = op.buckets if op else 1

    def _step(self, lr: float) -> None:
        g = self.pull_grads()  # [n] fp32
        for bucket in torch.tensor_split(g, self.buckets):
            self.comm.all_reduce("grad all-reduce", bucket)
        g.div_(self.world)
        with self.timed("update"):
            self.clip_(g, sharded=False)
            self.opt.update(self.flat.master, g, self.t, self.hyper, lr)

    def _state(self) -> dict:
        return self.opt.state()

    def _load(self, state: dict) -> None:
        self.opt.load(state)


def zero1_step(scheme: Scheme, opt: Updater, lr: float,
               residual: torch.Tensor | None = None) -> None:
    """Reduce-scatter the gradient (plus a residual not yet sent, if given), update this
    rank's shard, all-gather the parameters."""
    flat, rank = scheme.flat, scheme.rank
    g = scheme.pull_grads()
    if residual is not None:
        g.add_(residual)
    g_shard = torch.empty(flat.shard_size)  # [n / P] fp32
    scheme.comm.reduce_scatter("grad reduce-scatter", g_shard, g)
    g_shard.div_(scheme.world)
    scheme.clip_(g_shard, sharded=True)
    with scheme.timed("update"):
        opt.update(flat.shard(flat.master, rank), g_shard, scheme.t, scheme.hyper, lr)
    scheme.comm.all_gather("param all-gather", flat.master, flat.shard(flat.master, rank).clone())


class DenseZeRO1(Scheme):
    def __init__(self, *args):
        super().__init__(*args)
        self.opt = Updater(self.cfg.optimizer, self.flat.shard_size)

    def _step(self, lr: float) -> None:
        zero1_step(self, self.opt, lr)

    def _state(self) -> dict:
        return self.opt.state()

    def _load(self, state: dict) -> None:
        self.opt.load(state)
