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

from dataclasses import dataclass

from profiles import UserError

SCHEDULES = ("1f1b", "interleaved")


@dataclass(frozen=True)
class Op:
    """One forward or backward of one micro-batch through one model chunk on one stage."""

    stage: int
    kind: str  # "F" | "B"
    micro_batch: int
    chunk: int  # model chunk on this stage (0 unless interleaved)
    start: float
    end: float


def stage_order(stage: int, stages: int, micro_batches: int, chunks: int = 1
                ) -> list[tuple[str, int, int]]:
    """(kind, micro-batch, chunk) in the order `stage` runs them."""
    p, m, v = stages, micro_batches, chunks
    if v == 1:
        warmup = min(p - stage - 1, m)
        order = [("F", i, 0) for i in range(warmup)]
        for i in range(m - warmup):
            order += [("F", warmup + i, 0), ("B", i, 0)]
        return order + [("B", i, 0) for i in range(m - warmup, m)]
    total = m * v  # virtual micro-batches: each micro-batch through each chunk

    def fwd(k: int) -> tuple[str, int, int]:  # groups of p micro-batches go chunk by chunk
        return ("F", (k // (p * v)) * p + k % p, (k // p) % v)

    def bwd(k: int) -> tuple[str, int, int]:
        return ("B", (k // (p * v)) * p + k % p, v - 1 - (k // p) % v)

    warmup = total if m == p else min((p - stage - 1) * 2 + (v - 1) * p, total)
    order = [fwd(k) for k in range(warmup)]
    for k in range(total - warmup):
        order += [fwd(warmup + k), bwd(k)]
    return order + [bwd(k) for k in range(total - warmup, total)]


def timeline(stages: int, micro_batches: int, fwd_s, bwd_s, send_s: float = 0.0,
             chunks: int = 1) -> list[Op]:
    """Every op of one step with its start and end (seconds). `fwd_s(stage, chunk)` and
    `bwd_s(stage, chunk)` give one micro-batch's time through that chunk (the last stage's
    last chunk includes the output layer); `send_s` is one activation or gradient send."""
    p, m, v = stages, micro_batches, chunks
    validate(p, m, v)
    orders = [stage_order(s, p, m, v) for s in range(p)]
    nxt = [0] * p
    free = [0.0] * p
    done: dict[tuple[str, int, int, int], float] = {}  # (kind, stage, mb, chunk) -> end
    ops: list[Op] = []
    remaining = sum(len(o) for o in orders)
    while remaining:
        progressed = False
        for s in range(p):
            while nxt[s] < len(orders[s]):
                kind, mb, c = orders[s][nxt[s]]
                ready = _input_ready(kind, s, mb, c, p, v, done, send_s)
                if ready is None:
                    break
                start = max(free[s], ready)
                end = start + (fwd_s(s, c) if kind == "F" else bwd_s(s, c))
                done[(kind, s, mb, c)] = free[s] = end
                ops.append(Op(s, kind, mb, c, start, end))
                nxt[s] += 1
                remaining -= 1
                progressed = True
        if not progressed:  # a wrong order would wait forever; say so rather than spin
            raise RuntimeError(f"pipeline schedule deadlocked (p={p}, m={m}, v={v})")
    return ops


def _input_ready(kind, s, mb, c, p, v, done, send_s) -> float | None:
    """When the op's input is on stage s, or None while its producer has not run."""
    if kind == "F":
        if s > 0:
            key, hop = ("F", s - 1, mb, c), send_s
        elif c > 0:
            key, hop = ("F", p - 1, mb, c - 1), send_s  # the last stage's previous chunk
        else:
            return 0.0
    else:
        if s < p - 1:
            key, hop = ("B", s + 1, mb, c), send_s
        elif c < v - 1:
            key, hop = ("B", 0, mb, c + 1), send_s  # stage 0's next chunk, sent around
        else:
            key, hop = ("F", s, mb, c), 0.0  # the loss: its own forward
    end = done.get(key)
    return None if end is None else end + (hop if p > 1 else 0.0)


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
