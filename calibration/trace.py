"""Read a PyTorch profiler (Kineto) Chrome trace of training steps (issue 41, part 2).

The format is Kineto's JSON (torch.profiler.profile(...).export_chrome_trace, or
tensorboard_trace_handler): {"traceEvents": [...], "distributedInfo": {...}, ...}, each event
{"ph": "X", "cat": ..., "name": ..., "ts": us, "dur": us, "pid", "tid", "args"}. What is read:
- the steps: "user_annotation" events named ProfilerStep#N (the profiler's schedule marks
  each step so); without them, each step ends where an "Optimizer.step" annotation ends; a
  trace with neither is one step spanning its events;
- whether it trains: a backward pass (autograd's nodes, backward kernels) or an optimizer step
  in it (`BACKWARD`); a forward-only trace (inference) is read, and refused by the fit;
- the GPU's kernels ("cat": "kernel"), each classed by its name (`KERNEL_CLASSES`): GEMM,
  attention, optimizer, communication or memory-bound (everything else: elementwise, norms,
  softmax, copies), their busy time summed per class within each step;
- on a trace without GPU kernels (the CPU runtime), the host's operators ("cpu_op") by their
  self time (an operator's time less its children's on the same thread), classed by name
  (`CPU_CLASSES`), the optimizer as what runs inside "Optimizer.step" annotations.
A trace of several ranks (kernels on more than one device, or several processes' operators)
is refused: one rank's file per call. A file that is not JSON says where it stops.
"""

from __future__ import annotations

import gzip
import json
import re
from bisect import bisect_right
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from profiles import UserError

CLASSES = ("gemm", "attention", "memory", "optimizer", "communication")
# GPU kernel names: cuBLAS/CUTLASS GEMMs (sm80_xmma_gemm..., sm90_xmma..., ampere_*gemm,
# cutlass_*, nvjet_* on Hopper), fused attention (FlashAttention, cuDNN's fmha/sdpa),
# optimizer kernels (fused Adam, the foreach multi-tensor kernels), NCCL; first match wins
KERNEL_CLASSES = (
    ("communication", re.compile(r"nccl", re.I)),
    ("attention", re.compile(r"flash|fmha|attention|sdpa|fused_attn", re.I)),
    ("optimizer", re.compile(r"adam|multi_tensor_apply|optimizer", re.I)),
    ("gemm", re.compile(r"gemm|xmma|cutlass|cublas|nvjet|wgmma|hmma", re.I)),
)
# host operators of the CPU runtime (aten names)
CPU_CLASSES = (
    ("communication", re.compile(r"c10d|gloo|nccl|record_param_comms|all_reduce|allreduce")),
    ("attention", re.compile(r"scaled_dot_product|flash_attention|efficient_attention")),
    ("optimizer", re.compile(r"adam|_foreach_")),
    ("gemm", re.compile(r"^aten::(mm|addmm|bmm|baddbmm|matmul)$")),
)
STEP = re.compile(r"^ProfilerStep#(\d+)$")
# what only a training step runs: autograd's backward nodes and engine (cpu_op names such as
# "AddmmBackward0", "autograd::engine::evaluate_function: ..."), backward kernels (FlashAttention's
# flash_bwd, cuDNN's dgrad/wgrad), an optimizer's step annotation
BACKWARD = re.compile(r"Backward\d*\b|autograd::engine|backward|bwd|dgrad|wgrad|"
                      r"^Optimizer\.step", re.I)


@dataclass
class TracedStep:
    """One step of a trace: its wall time and the busy seconds of each class."""

    number: int
    wall_s: float
    busy_s: dict[str, float] = field(default_factory=lambda: dict.fromkeys(CLASSES, 0.0))
    events: int = 0

    @property
    def compute_s(self) -> float:
        """Forward, backward and optimizer: every class but communication."""
        return sum(v for k, v in self.busy_s.items() if k != "communication")


@dataclass(frozen=True)
class Trace:
    path: Path
    source: str  # "gpu kernels" or "host operators"
    steps: tuple[TracedStep, ...]
    device: str  # the device name the trace carries, or ""
    # a backward pass or an optimizer step is in it (BACKWARD, or optimizer kernels): False
    # for a forward-only (inference) trace
    trains: bool = True


def load(path: str | Path) -> dict:
    """The trace's JSON (plain or gzipped), refused with the file and what was expected."""
    p = Path(path)
    try:
        raw = p.read_bytes()
    except OSError as exc:
        raise UserError(f"{p}: {exc.strerror}") from None
    try:
        text = (gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw).decode()
        doc = json.loads(text)
    except (OSError, EOFError) as exc:  # gzip: cut short or damaged
        raise UserError(f"{p}: not a readable gzip file ({exc})") from None
    except UnicodeDecodeError:
        raise UserError(f"{p}: not a text file (a Kineto trace is JSON)") from None
    except json.JSONDecodeError as exc:
        raise UserError(f"{p}:{exc.lineno}: not JSON from column {exc.colno} ({exc.msg}); "
                        "a Kineto trace cut short? expected the profiler's whole file") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
        raise UserError(f"{p}: no traceEvents list: expected a PyTorch profiler (Kineto) "
                        "Chrome trace (export_chrome_trace)")
    return doc


def _complete(events: list) -> list[dict]:
    """The trace's complete events ("ph": "X") with a start and a duration."""
    out = []
    for e in events:
        if (isinstance(e, dict) and e.get("ph") == "X" and isinstance(e.get("ts"), int | float)
                and isinstance(e.get("dur"), int | float) and e["dur"] >= 0):
            out.append(e)
    return out


def classify(name: str, table) -> str:
    for cls, pattern in table:
        if pattern.search(name):
            return cls
    return "memory"


def _steps(events: list[dict], path: Path) -> list[tuple[int, float, float]]:
    """(number, start us, end us) of each ProfilerStep#N, in order; one step over every event
    where the trace marks none."""
    marks = sorted((int(m[1]), e["ts"], e["ts"] + e["dur"]) for e in events
                   if e.get("cat") == "user_annotation" and (m := STEP.match(str(e["name"]))))
    if marks:
        return marks
    if not events:
        raise UserError(f"{path}: no complete events: nothing was traced")
    first = min(e["ts"] for e in events)
    last = max(e["ts"] + e["dur"] for e in events)
    # no schedule, no ProfilerStep marks: a step ends where its optimizer step ends
    ends = sorted(e["ts"] + e["dur"] for e in events if e.get("cat") == "user_annotation"
                  and str(e["name"]).startswith("Optimizer.step"))
    if len(ends) > 1:
        return [(i, ends[i - 1] if i else first, end) for i, end in enumerate(ends)]
    return [(0, first, last)]


def _union_s(spans: list[tuple[float, float]]) -> float:
    """Seconds covered by the (start, end) spans in microseconds (overlaps counted once)."""
    total, end = 0.0, float("-inf")
    for a, b in sorted(spans):
        if b <= end:
            continue
        total += b - max(a, end)
        end = b
    return total * 1e-6


def _self_times(ops: list[dict]) -> list[tuple[dict, float]]:
    """Each host operator with its self time in microseconds: its duration less its direct
    children's on the same thread (the operators it called)."""
    out = []
    by_thread = defaultdict(list)
    for e in ops:
        by_thread[(e.get("pid"), e.get("tid"))].append(e)
    for thread in by_thread.values():
        thread.sort(key=lambda e: (e["ts"], -e["dur"]))
        stack: list[list] = []  # [event, children's time]
        for e in thread:
            while stack and e["ts"] >= stack[-1][0]["ts"] + stack[-1][0]["dur"]:
                done = stack.pop()
                out.append((done[0], done[0]["dur"] - done[1]))
            if stack:
                stack[-1][1] += e["dur"]
            stack.append([e, 0.0])
        out += [(e, e["dur"] - c) for e, c in stack]
    return out


def read_trace(path: str | Path) -> Trace:
    """The trace's steps, each with its busy time per class (module docstring)."""
    p = Path(path)
    doc = load(p)
    events = _complete(doc["traceEvents"])
    kernels = [e for e in events if e.get("cat") == "kernel"]
    if kernels:
        devices = {(e.get("args") or {}).get("device", e.get("pid")) for e in kernels}
        if len(devices) > 1:
            raise UserError(f"{p}: kernels on {len(devices)} devices ({sorted(map(str, devices))})"
                            ": a trace of several ranks; give one rank's file")
    else:
        pids = {e.get("pid") for e in events if e.get("cat") == "cpu_op"}
        if len(pids) > 1:
            raise UserError(f"{p}: operators of {len(pids)} processes: a trace of several "
                            "ranks; give one rank's file")
    windows = _steps(events, p)
    starts = [w[1] for w in windows]
    steps = [TracedStep(n, (b - a) * 1e-6) for n, a, b in windows]

    def step_of(ts: float) -> TracedStep | None:
        i = bisect_right(starts, ts) - 1
        if i < 0 or ts > windows[i][2]:
            return None
        return steps[i]

    if kernels:
        spans: dict[tuple[int, str], list] = defaultdict(list)
        for e in kernels:
            step = step_of(e["ts"])
            if step is None:  # launched before the first step or after the last: not a step's
                continue
            cls = classify(str(e["name"]), KERNEL_CLASSES)
            spans[(step.number, cls)].append((e["ts"], e["ts"] + e["dur"]))
            step.events += 1
        for step in steps:
            for cls in CLASSES:
                step.busy_s[cls] = _union_s(spans.get((step.number, cls), []))
        source = "gpu kernels"
    else:
        ops = [e for e in events if e.get("cat") == "cpu_op"]
        if not ops:
            raise UserError(f"{p}: neither GPU kernels nor host operators (cat kernel or "
                            "cpu_op): was the profiler's activity list empty?")
        optimizer = [(e["ts"], e["ts"] + e["dur"]) for e in events
                     if e.get("cat") == "user_annotation"
                     and str(e["name"]).startswith("Optimizer.step")]
        for e, self_us in _self_times(ops):
            step = step_of(e["ts"])
            if step is None:
                continue
            inside = any(a <= e["ts"] < b for a, b in optimizer)
            cls = "optimizer" if inside else classify(str(e["name"]), CPU_CLASSES)
            step.busy_s[cls] += max(0.0, self_us) * 1e-6
            step.events += 1
        source = "host operators"
    steps = [s for s in steps if s.events]
    if not steps:
        raise UserError(f"{p}: no kernel or operator inside a ProfilerStep window")
    props = doc.get("deviceProperties") or [{}]
    device = str(props[0].get("name", "")) if isinstance(props[0], dict) else ""
    trains = (any(s.busy_s["optimizer"] > 0 for s in steps)
              or any(BACKWARD.search(str(e.get("name", ""))) for e in events))
    return Trace(p, source, tuple(steps), device, trains)
