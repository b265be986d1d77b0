"""Pipeline-parallel schedules as exact timelines: 1F1B (PipeDream-Flush, Narayanan et al. 2021
section 2.2.1) and Megatron's interleaved 1F1B (section 2.2.2; the op order of Megatron-Core's
`forward_backward_pipelining_with_interleaving`, megatron/core/pipeline_parallel/schedules.py).

Every stage runs its ops in the schedule's fixed order; an op starts when its stage is free and
its input has arrived: a forward needs the previous stage's forward of the same micro-batch and
model chunk plus one stage-to-stage send, a backward the next stage's backward plus one send.
With equal stages, no send time and m micro-batches the step takes (m + p - 1)(f + b) for 1F1B,
a bubble of (p - 1)/m, and m(f + b) + (p - 1)(f + b)/v interleaved over v chunks per stage, a
bubble of (p - 1)/(v m) (the paper's equations; tests/test_pipeline.py checks both).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np

from profiles import UserError


@dataclass(frozen=True)
class Op:
    """One forward or backward of one micro-batch through one model chunk on one stage."""

    stage: int
    kind: str  # "F" | "B"
    micro_batch: int
    chunk: int  # model chunk on this stage (0 unless interleaved)
    start: float
    end: float


# chunks that may hold no layer: the first (the embedding's) and the last (the loss's)
EDGE_CHUNKS = 2


def fills(n_layers: int, stages: int, chunks: int = 1) -> bool:
    """Whether `n_layers` fill `stages` x `chunks` model chunks: a layer each at least, or
    the first and last model chunks holding only the embedding and the loss (Megatron-Core's
    --account-for-embedding-in-pipeline-split and --account-for-loss-in-pipeline-split, which
    count each as a layer of the split: Llama 3's 126 layers on 16 stages x 8 chunks, Llama 3
    paper section 3.3.2, 'the first model chunk on the first stage has only the embedding')."""
    return n_layers >= stages * chunks - EDGE_CHUNKS


@functools.lru_cache(maxsize=4096)
def _stage_layers(n_layers: int, stages: int, chunks: int) -> tuple[tuple[int, ...], ...]:
    total = stages * chunks
    if n_layers >= total:
        base, extra = divmod(n_layers, total)
        per = [base + (1 if 1 <= j <= extra else 0) for j in range(total)]
    else:  # one layer a chunk; the embedding's first chunk, then the loss's last, hold none
        per = [0 if j == 0 or (j == total - 1 and n_layers == total - 2) else 1
               for j in range(total)]
    return tuple(tuple(per[c * stages + s] for c in range(chunks)) for s in range(stages))


def stage_layers(n_layers: int, stages: int, chunks: int = 1) -> list[list[int]]:
    """Layers of each model chunk, [stage][chunk]. Model chunk j = chunk * stages + stage
    (Megatron's interleaved assignment); an even split, the remainder one layer each to model
    chunks 1, 2, ... (chunk 0 also holds the embedding), as Megatron-Core's uneven split lets
    the first stage hold fewer layers (Llama 3 405B: 126 layers on 16 stages). With fewer
    layers than chunks (`fills`), the first model chunk and then the last hold none: the
    split that counts the embedding and the loss as a layer each."""
    if not fills(n_layers, stages, chunks):
        raise UserError(f"{n_layers} layers cannot fill {stages} stages x {chunks} chunks "
                        f"(a layer a chunk, or none in the first and last, which hold the "
                        f"embedding and the loss)")
    return [list(chunk) for chunk in _stage_layers(n_layers, stages, chunks)]


def warmup_forwards(stage: int, stages: int, micro_batches: int, chunks: int = 1) -> int:
    """Forwards `stage` runs before its first steady-state one: Megatron-Core's 1F1B warm-up
    (p - s - 1), or its interleaved one (2 (p - s - 1) + (v - 1) p; everything when the
    micro-batches equal the stages), at most every forward of the step."""
    p, m, v = stages, micro_batches, chunks
    if v == 1:
        return min(p - stage - 1, m)
    return m * v if m == p else min((p - stage - 1) * 2 + (v - 1) * p, m * v)


def _order(stage: int, stages: int, micro_batches: int, chunks: int
           ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(forward?, micro-batch, chunk) of each op `stage` runs, in order (arrays of 2 m v):
    its warm-up forwards, then one forward and one backward at a time, then the rest of the
    backwards. Virtual micro-batch k (each micro-batch through each chunk) is micro-batch
    (k // (p v)) p + k % p through chunk (k // p) % v going forward, and chunk v - 1 - that
    coming back: groups of p micro-batches go chunk by chunk (with one chunk, k itself)."""
    p, m, v = stages, micro_batches, chunks
    warmup = warmup_forwards(stage, p, m, v)
    total, k = m * v, np.arange(m * v)
    mb = (k // (p * v)) * p + k % p
    f_chunk = (k // p) % v
    b_chunk = v - 1 - f_chunk
    steady = total - warmup

    def weave(first: np.ndarray, second: np.ndarray) -> np.ndarray:
        out = np.empty(2 * steady, dtype=first.dtype)
        out[0::2], out[1::2] = first, second
        return out

    fwd = np.concatenate([np.ones(warmup, bool), weave(np.ones(steady, bool),
                                                       np.zeros(steady, bool)),
                          np.zeros(warmup, bool)])
    micro = np.concatenate([mb[:warmup], weave(mb[warmup:], mb[:steady]), mb[steady:]])
    chunk = np.concatenate([f_chunk[:warmup], weave(f_chunk[warmup:], b_chunk[:steady]),
                            b_chunk[steady:]])
    return fwd, micro, chunk


def stage_order(stage: int, stages: int, micro_batches: int, chunks: int = 1
                ) -> list[tuple[str, int, int]]:
    """(kind, micro-batch, chunk) in the order `stage` runs them (Megatron-Core's 1F1B, or its
    interleaved schedule over `chunks` model chunks)."""
    fwd, micro, chunk = _order(stage, stages, micro_batches, chunks)
    kinds = np.where(fwd, "F", "B").tolist()
    return list(zip(kinds, micro.tolist(), chunk.tolist(), strict=True))


def order_chunks(stage: int, stages: int, micro_batches: int, chunks: int = 1
                 ) -> tuple[np.ndarray, np.ndarray]:
    """`stage_order` as arrays, without the micro-batch: (forward?, chunk) of each op, what
    the memory model walks for every candidate layout."""
    fwd, _, chunk = _order(stage, stages, micro_batches, chunks)
    return fwd, chunk


def timeline(stages: int, micro_batches: int, fwd_s, bwd_s, send_s: float = 0.0,
             chunks: int = 1) -> list[Op]:
    """Every op of one step with its start and end (seconds). `fwd_s(stage, chunk)` and
    `bwd_s(stage, chunk)` give one micro-batch's time through that chunk (the last stage's
    last chunk includes the output layer); `send_s` is one activation or gradient send."""
    p, v = stages, chunks
    validate(p, micro_batches, v)
    fwd = tuple(tuple(fwd_s(s, c) for c in range(v)) for s in range(p))
    bwd = tuple(tuple(bwd_s(s, c) for c in range(v)) for s in range(p))
    per_stage, _ = _schedule(p, micro_batches, v, fwd, bwd, send_s)
    return [Op(s, *op) for s in range(p) for op in per_stage[s]]


@dataclass(frozen=True)
class FirstStage:
    """What a step needs of the first stage's timeline: its first op, when its second starts,
    its last op (which releases the data-parallel gradients) and its op count; the makespan."""

    first: tuple  # (kind, micro-batch, chunk, start)
    second_start: float
    last: tuple  # (kind, micro-batch, chunk, start)
    count: int
    makespan: float


STEADY_AFTER = 4  # micro-batches per stage from which the step looks for a steady state


@functools.lru_cache(maxsize=4096)
def first_stage(stages: int, micro_batches: int, chunks: int, fwd: tuple, bwd: tuple,
                send_s: float) -> FirstStage:
    """The first stage's summary for a step of `micro_batches` (fwd[stage][chunk], bwd as
    `timeline`). Remembered: a planner's schemes share their pipeline, and only the
    data-parallel communication after it differs.

    Long steps are not scheduled op by op: once each further group of `stages` micro-batches
    adds the same time to the makespan and to the first stage's last op twice running, and
    that time is at least the busiest stage's work for a group (the periodic regime a
    max-plus system like this one enters runs at least at the pace of its slowest stage), the
    step is extended linearly from there; until then the group count doubles, up to the whole
    step, and where the three short schedules would cost more than the whole one, the whole
    one is scheduled. Without the pace check the extension ran at a lighter first stage's pace
    while the slowest stage's warm-up slack lasted: DeepSeek-V3 interleaved on 4 stages of
    7-8 layers, 1,920 micro-batches, came out 3.9% short (tests/test_pipeline.py). Exact for
    stages of equal time; on 300 random pipelines with uneven layer splits, output layers and
    sends up to twice a layer's time, the makespan was within 1.1% of the full timeline
    (tests/test_pipeline.py bounds it)."""
    p, m, v = stages, micro_batches, chunks
    validate(p, m, v)
    pace = p * max(sum(f) + sum(b) for f, b in zip(fwd, bwd, strict=True))  # s per group
    k = STEADY_AFTER
    while p > 1 and (3 * k - 3) * p < m:  # the three short schedules cost less than one long
        a, b, c = (_summary(_schedule(p, n * p, v, fwd, bwd, send_s, True), n * p)
                   for n in (k, k - 1, k - 2))
        steady = all(math.isclose(x - y, y - z, rel_tol=1e-12, abs_tol=1e-12 * abs(x))
                     and x - y >= pace * (1 - 1e-9)
                     for x, y, z in ((a.makespan, b.makespan, c.makespan),
                                     (a.last[3], b.last[3], c.last[3])))
        if steady:
            groups = (m - k * p) / p  # whole groups when interleaved (m a multiple of p)
            kind, mb, chunk, start = a.last
            return FirstStage(a.first, a.second_start,
                              (kind, m - (k * p - mb), chunk,
                               start + groups * (start - b.last[3])),
                              2 * m * v, a.makespan + groups * (a.makespan - b.makespan))
        k *= 2
    return _summary(_schedule(p, m, v, fwd, bwd, send_s, True), m)


def forwards_after_first_backward(p: int, m: int, v: int) -> list[int]:
    """Per model chunk, the forwards the first stage's order (stage_order(0, ...)) runs after
    its first backward, counted without walking it: its k-th forward is of chunk
    (k // p) % v, and warm-up + 1 forwards come before the first backward."""
    total = m * v
    before = min(warmup_forwards(0, p, m, v) + 1, total)

    def upto(n: int, c: int) -> int:  # forwards k < n of chunk c
        whole, part = divmod(n, p * v)
        return whole * p + min(max(part - c * p, 0), p)

    return [upto(total, c) - upto(before, c) for c in range(v)]


@functools.lru_cache(maxsize=4096)
def pipeline_bound(stages: int, micro_batches: int, chunks: int, fwd: tuple, bwd: tuple,
                   send_s: float) -> float:
    """A time the first stage's last op cannot end before, without scheduling (`timeline`'s
    arguments): the first stage starts its first backward (micro-batch 0 through the last model
    chunk) only once that micro-batch has gone forward through every chunk of every stage and
    back through the later stages, a send per boundary; after it, it still runs every
    backward and every forward its order puts after that one (stage_order). Also at least
    one micro-batch's whole path, and for every stage s its own work between micro-batch 0's
    first forward reaching it and the last micro-batch's backward through model chunk 0
    leaving it (every stage runs F(0, chunk 0) first and B(m - 1, chunk 0) last, `_order`),
    that forward and backward through the stages before it, a send per boundary each way:
    with uneven stages the slowest one sets the pace (DeepSeek-V3's 61 layers on 16 stages:
    four layers where the first has three), which stage 0's own work alone misses."""
    p, m, v = stages, micro_batches, chunks
    hops = send_s if p > 1 else 0.0
    down = sum(sum(f) for f in fwd) + (p * v - 1) * hops  # micro-batch 0, every model chunk
    back = sum(bwd[s][v - 1] for s in range(1, p)) + (p - 1) * hops
    rest_f = sum(n * fwd[0][c] for c, n in enumerate(forwards_after_first_backward(p, m, v)))
    path = sum(sum(f) + sum(b) for f, b in zip(fwd, bwd, strict=True)) + 2 * (p * v - 1) * hops
    busiest, before = 0.0, 0.0  # before: stages < s, chunk 0 forward and back, with sends
    for s in range(p):
        busiest = max(busiest, before + m * (sum(fwd[s]) + sum(bwd[s])))
        before += fwd[s][0] + bwd[s][0] + 2 * hops
    return max(down + back + m * sum(bwd[0]) + rest_f, busiest, path)


def _summary(scheduled: tuple[list[list], list[float]], m: int) -> FirstStage:
    """The first stage's summary of a `_schedule(..., first_only=True)`."""
    per_stage, last_ends = scheduled
    ops = per_stage[0]
    second = ops[1][3] if len(ops) > 1 else ops[0][4]
    return FirstStage(ops[0][:4], second, ops[-1][:4], len(ops), max(last_ends))


@functools.lru_cache(maxsize=256)
def _dependencies(p: int, m: int, v: int) -> tuple[tuple, ...]:
    """Per stage, its ops in `stage_order` as flat lists: the op as `_schedule` reports it
    (kind, micro-batch, chunk), where its end is kept in `_schedule`'s ends (forwards at
    (s v + c) m + mb, backwards p v m further), the end it waits for (-1: none), whether a
    send lies between them (0 or 1), and its duration's index in `_schedule`'s table (forward
    of chunk c at s 2v + c, backward at s 2v + v + c). Shared by every call of one shape:
    only the times differ between the layouts a planner tries. Built with array arithmetic
    over `_order`'s arrays (a loop per op was the frontier search's third cost)."""
    n = p * v * m
    stages = []
    for s in range(p):
        fwd, mb, c = _order(s, p, m, v)
        f_here = (s * v + c) * m + mb
        if s > 0:  # a forward waits for the previous stage's
            f_wait, f_hop = ((s - 1) * v + c) * m + mb, np.ones_like(c)
        else:  # for the last stage's previous chunk, sent around; chunk 0 for nothing
            f_wait = np.where(c > 0, ((p - 1) * v + c - 1) * m + mb, -1)
            f_hop = (c > 0).astype(c.dtype)
        if s < p - 1:  # a backward waits for the next stage's
            b_wait, b_hop = n + ((s + 1) * v + c) * m + mb, np.ones_like(c)
        else:  # for stage 0's next chunk, sent around; the last chunk for its own forward
            b_wait = np.where(c < v - 1, n + (c + 1) * m + mb, f_here)
            b_hop = (c < v - 1).astype(c.dtype)
        ops = tuple(zip(np.where(fwd, "F", "B").tolist(), mb.tolist(), c.tolist(),
                        strict=True))
        stages.append((ops, tuple(np.where(fwd, f_here, n + f_here).tolist()),
                       tuple(np.where(fwd, f_wait, b_wait).tolist()),
                       tuple(np.where(fwd, f_hop, b_hop).tolist()),
                       tuple(np.where(fwd, s * 2 * v + c, s * 2 * v + v + c).tolist())))
    return tuple(stages)


def _schedule(p: int, m: int, v: int, fwd: tuple, bwd: tuple, send: float,
              first_only: bool = False) -> tuple[list[list], list[float]]:
    """List scheduling of every stage's fixed order: an op starts when its stage is free and
    its input is there. The order and what each op waits for come from `_dependencies`, flat
    and remembered, so the inner loop only reads ends and adds times (the planner runs this
    for every layout it tries). Returns each stage's ops as (kind, micro-batch, chunk, start,
    end), and each stage's last end; `first_only` keeps the first stage's ops alone (what
    the planner's summary reads: a p-th of the tuples to build)."""
    plan = _dependencies(p, m, v)
    ends = [-1.0] * (2 * p * v * m)
    hop = send if p > 1 else 0.0
    # durations indexed as _dependencies says: per stage, its forwards then its backwards
    table = [t for s in range(p) for t in (*fwd[s], *bwd[s])]
    nxt = [0] * p
    free = [0.0] * p
    out: list[list] = [[] for _ in range(p)]
    remaining = sum(len(stage[0]) for stage in plan)
    while remaining:
        progressed = False
        for s in range(p):
            ops, own, dep, sent, dur = plan[s]
            i, t_free = nxt[s], free[s]
            done = out[s] if s == 0 or not first_only else None
            while i < len(ops):
                wait = dep[i]
                if wait >= 0:
                    ready = ends[wait]
                    if ready < 0:
                        break
                    if sent[i]:
                        ready += hop
                else:
                    ready = 0.0
                start = t_free if t_free > ready else ready
                t_free = start + table[dur[i]]
                ends[own[i]] = t_free
                if done is not None:
                    done.append((*ops[i], start, t_free))
                i += 1
            if i != nxt[s]:
                remaining -= i - nxt[s]
                progressed = True
            nxt[s], free[s] = i, t_free
        if not progressed:  # a wrong order would wait forever; say so rather than spin
            raise RuntimeError(f"pipeline schedule deadlocked (p={p}, m={m}, v={v})")
    return out, free


def validate(stages: int, micro_batches: int, chunks: int) -> None:
    if stages < 1 or micro_batches < 1 or chunks < 1:
        raise UserError(f"pipeline stages, micro-batches and chunks must be at least 1, got "
                        f"{stages}, {micro_batches}, {chunks}")
    if chunks > 1 and micro_batches % stages:
        # Megatron-Core's interleaved schedule asserts this (schedules.py)
        raise UserError(f"the interleaved schedule needs the micro-batches per step "
                        f"({micro_batches}) to be a multiple of the pipeline stages ({stages})")


def bubble_fraction(ops: list[Op], stage: int = 0) -> float:
    """Idle share of one stage's time between the step's start and end."""
    end = max(o.end for o in ops)
    busy = sum(o.end - o.start for o in ops if o.stage == stage)
    return 1.0 - busy / end
