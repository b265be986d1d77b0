"""What every runtime scheme shares: the flat buffers, the optimizer state, timing, and the
plan it must follow (scape/plan/; on CPU the wire carries fp32 gradients and parameters)."""

from __future__ import annotations

import math
import time
from collections import deque
from contextlib import contextmanager

import torch

from scape.adams import Hyper, adams_update_
from scape.adamw import adamw_update_
from scape.comm import Comm
from scape.plan import Dtypes, Plan, SchemeConfig, plan
from scape.sharding import FlatParams

RUNTIME_DTYPES = Dtypes(grad_bytes=4, param_bytes=4)  # fp32 master buffers on the wire
# Masks a scheme keeps for tests and debugging: the last 64 steps. An unbounded list holds one
# [N] bool per step: 9,000 steps of a 2.3M-parameter model filled 20 GB and stalled a run.
MASK_LOG = 64


def mask_log() -> deque[torch.Tensor]:
    """The last MASK_LOG masks, oldest first (indexable like a list)."""
    return deque(maxlen=MASK_LOG)


class Updater:
    """AdamW or AdamS state over a flat range of `n` fp32 values."""

    def __init__(self, kind: str, n: int):
        self.kind = kind
        self.m = torch.zeros(n)
        self.v = torch.zeros(n) if kind == "adamw" else None

    def update(self, p: torch.Tensor, g: torch.Tensor, step: int, h: Hyper, lr: float) -> None:
        if self.kind == "adamw":
            adamw_update_(p, g, self.m, self.v, step, h, lr)
        else:
            adams_update_(p, g, self.m, step, h, lr)

    def state(self) -> dict:
        return {"m": self.m, "v": self.v}

    def load(self, state: dict) -> None:
        self.m.copy_(state["m"])
        if self.v is not None:
            self.v.copy_(state["v"])


class Scheme:
    """A data-parallel update: reads the model's .grad, communicates, updates the master
    weights and writes them back to the model. `step` returns local kernel timings."""

    multiple = 1  # the flat buffer pads to world * multiple

    def __init__(self, cfg: SchemeConfig, params: list[torch.nn.Parameter], comm: Comm,
                 hyper: Hyper):
        self.cfg, self.comm, self.hyper = cfg, comm, hyper
        self.world, self.rank = comm.world, comm.rank
        self.flat = FlatParams(params, self.world, self.multiple)
        self.t = 0  # steps taken
        self.times: dict[str, float] = {}

    @property
    def n(self) -> int:
        return self.flat.padded

    def plan(self) -> Plan:
        return plan(self.cfg, self.n, self.world, RUNTIME_DTYPES)

    @contextmanager
    def timed(self, key: str):
        t0 = time.perf_counter()
        yield
        if self.flat.master.is_cuda:
            torch.cuda.synchronize()  # asynchronous kernels: time them finished
        self.times[key] = self.times.get(key, 0.0) + time.perf_counter() - t0

    def step(self, lr: float | None = None) -> dict[str, float]:
        self.t += 1
        self.times = {}
        self._step(self.hyper.lr if lr is None else lr)
        with self.timed("copy"):
            self.flat.push_params()
        return self.times

    def clip_(self, g: torch.Tensor, sharded: bool, part: torch.Tensor | None = None,
              name: str = "grad-norm all-reduce") -> None:
        """Clip the synced gradient `g` in place by its global L2 norm (Megatron's
        clip_grad_norm_fp32 with --clip-grad; the SCAPE authors' reducer the same inside the
        reducer, R:5495-5550). `sharded`: this rank counts only its shard of it (`part`, a view
        of `g`, or `g` itself), so the squared norms are summed over ranks by a one-value
        all-reduce called `name`, as Megatron's get_grad_norm_fp32 and the reducer's
        distributed-optimizer path (R:4531-4549) do."""
        clip = self.cfg.clip_grad
        if clip is None:
            return
        # [1] fp64: the squares summed in fp64 inside one reduction (g.double() first made an
        # [N] fp64 copy and its square: 84 against 44 ms at 1e7, one CPU thread)
        counted = g if part is None else part
        sq = torch.linalg.vector_norm(counted, dtype=torch.float64).square().reshape(1)
        if sharded:
            self.comm.all_reduce(name, sq)
        coef = clip / (math.sqrt(sq.item()) + 1e-6)
        if coef < 1.0:
            g.mul_(coef)

    def pull_grads(self) -> torch.Tensor:
        """The model's gradients in the flat buffer, timed as "copy" with push_params."""
        with self.timed("copy"):
            return self.flat.pull_grads()

    def _step(self, lr: float) -> None:
        raise NotImplementedError

    # ---- checkpoint ----
    def state_dict(self) -> dict:
        return {"t": self.t, "master": self.flat.master.clone(), **self._state()}

    def load_state_dict(self, state: dict) -> None:
        self.t = state["t"]
        self.flat.master.copy_(state["master"])
        self.flat.push_params()
        self._load(state)

    def _state(self) -> dict:
        return {}

    def _load(self, state: dict) -> None:
        pass


class ResidualScheme(Scheme):
    """Schemes that end with the same averaged gradient on every rank and update all N
    parameters (DDP-like), keeping an fp32 residual of what they have not sent yet."""

    def __init__(self, *args):
        super().__init__(*args)
        self.opt = Updater(self.cfg.optimizer, self.n)
        self.residual = torch.zeros(self.n)  # [n]

    def apply(self, grad: torch.Tensor, lr: float) -> None:
        with self.timed("update"):
            self.clip_(grad, sharded=False)
            self.opt.update(self.flat.master, grad, self.t, self.hyper, lr)

    def _state(self) -> dict:
        return {**self.opt.state(), "residual": self.residual}

    def _load(self, state: dict) -> None:
        self.opt.load(state)
        self.residual = state["residual"].clone()
