"""The authors' SCAPE reducer on gloo (marker `dist`): 2 and 3 ranks against a plain
single-process reference of the same equations (profiles/external/scape-sc26.reducer.md
sections 1 and 1b), and every collective's bytes against scape/plan/scape_authors.py."""

from __future__ import annotations

import math

import pytest
import torch

from scape.adams import Hyper
from scape.plan.scape_authors import greedy_owners, k_of, shard_pieces
from tests.dist_util import run_ranks

pytestmark = pytest.mark.dist
# weight matrices and one-dimensional (norm/bias-like, always sent whole) tensors
SHAPES = [(40, 12), (16,), (30, 17), (9,), (64, 9), (25, 25)]
STEPS = 5
LR = 1e-2
H = Hyper()


def _grad(t: int, rank: int, i: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(10_000 * t + 100 * rank + i)
    return torch.randn(SHAPES[i], generator=gen)


def _params() -> list[torch.nn.Parameter]:
    gen = torch.Generator().manual_seed(7)
    return [torch.nn.Parameter(torch.randn(s, generator=gen) * 0.1) for s in SHAPES]


def _run(opts: dict, steps: int) -> dict:
    from scape.comm import Comm
    from scape.plan import make_config
    from scape.schemes import make_scheme
    from scape.train.loop import init_distributed

    init_distributed(30)
    comm = Comm()
    params = _params()
    scheme = make_scheme(make_config("scape", **opts), params, comm, H)
    n = scheme.flat.numel
    out = {"master": [], "records": [], "masks": [], "plan": scheme.plan(), "n": n}
    for t in range(1, steps + 1):
        for i, p in enumerate(params):
            p.grad = _grad(t, comm.rank, i)
        scheme.step(LR)
        out["master"].append(scheme.flat.master[:n].clone())
        out["records"].append([(r.name, r.collective, r.size_bytes) for r in comm.take()])
        out["masks"].append(scheme.history[-1].clone())
    out["history_maxlen"] = scheme.history.maxlen
    return out


def reference(opts: dict, world: int, steps: int) -> dict:
    """The equations, all ranks at once in one process: no packing, no collectives."""
    sizes = [math.prod(s) for s in SHAPES]
    extra = opts.get("extra", {})
    # 1-D tensors stay whole unless the run sparsifies them too
    dense = [len(s) == 1 and extra.get("exclude_from_topk", True) for s in SHAPES]
    distopt = extra.get("distributed_optimizer", False)
    clip = opts.get("clip_grad")
    density = 1 - opts["sparsity"]
    warm = opts.get("density_warmup_steps", 0)
    if distopt:
        owned = shard_pieces(sizes, dense, world)
    else:
        owned, start = [], 0
        counts = greedy_owners(sizes, world).tensors
        i = 0
        for c in counts:
            owned.append([])
            for n, d in zip(sizes[i : i + c], dense[i : i + c], strict=True):
                owned[-1].append((start, start + n, d))
                start += n
            i += c
    n = sum(sizes)
    b1, b2, wd = H.beta1, H.beta2, H.weight_decay
    theta = torch.cat([p.detach().reshape(-1) for p in _params()])
    m, r = torch.zeros(n), torch.zeros(world, n)
    mask, out = None, {"master": [], "masks": []}

    dense_steps = opts.get("density_dense_steps", 0)
    linear = opts.get("density_shape") == "linear"

    def d_at(t):  # the schedule, written out again: D steps at 1, then the warm-up
        if t <= dense_steps:
            return 1.0
        if warm <= 0:
            return density
        u = min(1.0, (t - dense_steps) / warm)
        return 1 - (1 - density) * u if linear else density**u

    def pick(c, d):
        bits = torch.zeros(n, dtype=torch.bool)
        for rank in range(world):
            for a, b, dn in owned[rank]:
                k = k_of(d, b - a)
                if dn or k >= b - a:
                    bits[a:b] = True
                else:
                    bits[a + torch.topk(c[rank, a:b].abs(), k).indices] = True
        return bits

    for t in range(1, steps + 1):
        g = torch.stack([torch.cat([_grad(t, rank, i).reshape(-1) for i in range(len(SHAPES))])
                         for rank in range(world)])  # [P, N]
        c = b1 * m + (1 - b1) * g + r  # [P, N]
        if mask is None:
            mask = pick(c, d_at(t))
        nxt = pick(c, d_at(t + 1))
        m_sync = torch.zeros(n)
        m_sync[mask] = c[:, mask].sum(0) / world
        r = c * ~mask
        gs = (m_sync - b1 * m) / (1 - b1)
        if not distopt:
            gs = gs * mask
        if clip is not None:
            coef = clip / (gs.double().norm().item() + 1e-6)
            gs = gs * min(1.0, coef)
        v = b2 * m**2 + (1 - b2) * gs**2
        m_new = b1 * m + (1 - b1) * gs
        if not distopt:
            m_new = m_new * mask
        step = m_new / (1 - b1**t) / (v.sqrt() / math.sqrt(1 - b2**t) + H.eps)
        new = theta * (1 - LR * wd) - LR * step
        if distopt:  # the sparse sync: off the mask, every replica only decays
            new = torch.where(mask, new, theta * (1 - LR * wd))
        theta, m = new, m_new
        out["master"].append(theta.clone())
        out["masks"].append(mask.clone())
        mask = nxt
    return out


CASES = [
    {"sparsity": 0.9},
    {"sparsity": 0.99, "clip_grad": 0.5},
    {"sparsity": 0.9, "density_warmup_steps": 3},
    # the Llama-500M runs' schedule: dense steps, then a linear warm-up
    {"sparsity": 0.9, "density_dense_steps": 2, "density_warmup_steps": 2,
     "density_shape": "linear", "clip_grad": 0.5},
    {"sparsity": 0.9, "extra": {"distributed_optimizer": True}},
    {"sparsity": 0.9, "clip_grad": 0.5, "extra": {"distributed_optimizer": True,
                                                  "residual_offload": True}},
    {"sparsity": 0.9, "extra": {"exclude_from_topk": False}},
]


def _run_cases(cases):
    import torch.distributed as dist

    out = [_run(opts, STEPS) for opts in cases]
    dist.barrier()
    return out


@pytest.fixture(scope="module", params=[2, 3])
def ranks(request, tmp_path_factory):
    world = request.param
    results = run_ranks(_run_cases, world, (CASES,), tmp_path_factory.mktemp(f"w{world}"))
    for r in results:
        assert "error" not in r, r.get("trace")
    return world, results


@pytest.mark.parametrize("case", range(len(CASES)))
def test_matches_the_single_process_reference(ranks, case):
    world, results = ranks
    ref = reference(CASES[case], world, STEPS)
    for rank_out in results:
        got = rank_out[case]
        for t in range(STEPS):
            assert torch.equal(got["masks"][t], ref["masks"][t]), (case, t)
            assert torch.allclose(got["master"][t], ref["master"][t], atol=1e-6, rtol=1e-5), (
                case, t, (got["master"][t] - ref["master"][t]).abs().max())
    # the ranks hold the same parameters, bit for bit
    for other in results[1:]:
        assert all(torch.equal(a, b) for a, b in zip(results[0][case]["master"],
                                                      other[case]["master"], strict=True))


@pytest.mark.parametrize("case", [0, 1, 4, 5, 6])  # constant density: the plan's steady state
def test_bytes_follow_the_plan(ranks, case):
    got = ranks[1][0][case]
    ops = {(op.name, op.collective): op.size_bytes for op in got["plan"].steps[0][1].ops}
    for t, records in enumerate(got["records"], start=1):
        sent = {(name, coll): size for name, coll, size in records}
        assert len(sent) == len(records)  # one call per collective
        if t == 1:  # the bootstrap: one byte per element, MAX
            assert sent.pop(("bootstrap mask all-reduce (max)", "all_reduce")) == got["n"]
        assert sent == ops, t


def test_the_mask_log_is_bounded(ranks):
    """A long run keeps the last MASK_LOG masks, not one [N] bool per step (9,000 steps of a
    2.3M-parameter model filled 20 GB before)."""
    from scape.schemes.base import MASK_LOG, mask_log

    assert all(case["history_maxlen"] == MASK_LOG for case in ranks[1][0])
    log = mask_log()
    for t in range(MASK_LOG + 5):
        log.append(torch.tensor([t]))
    assert len(log) == MASK_LOG and int(log[0]) == 5 and int(log[-1]) == MASK_LOG + 4


def test_a_sparse_mask_and_a_dense_norm():
    """Selection as the reducer makes it: floor(d*n), at least 1, norms whole."""
    assert k_of(0.01, 99) == 1 and k_of(0.01, 250) == 2 and k_of(1.0, 7) == 7
