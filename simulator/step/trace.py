"""Chrome trace event JSON (opens in Perfetto and chrome://tracing) from simulated spans."""

from __future__ import annotations

import json
from pathlib import Path

from profiles import UserError
from simulator.network.engine import Span
from vocabulary.atomic import write_text_atomic


def chrome_trace(spans: list[Span], process: str = "scape simulate") -> dict:
    """Complete ('X') events in microseconds, one thread per stream, bytes in args."""
    streams = sorted({s.collective for s in spans})
    tid = {name: i + 1 for i, name in enumerate(streams)}
    events: list[dict] = [
        {"ph": "M", "name": "process_name", "pid": 1, "tid": 0, "args": {"name": process}},
    ]
    events += [
        {"ph": "M", "name": "thread_name", "pid": 1, "tid": tid[s], "args": {"name": s}}
        for s in streams
    ]
    events += [
        {
            "ph": "X", "name": s.phase, "cat": s.collective, "pid": 1, "tid": tid[s.collective],
            "ts": s.start_s * 1e6, "dur": (s.end_s - s.start_s) * 1e6,
            "args": {"bytes": s.bytes},
        }
        for s in spans
    ]
    return {"traceEvents": events, "displayTimeUnit": "ms"}


def write_trace(path: str | Path, spans: list[Span], process: str = "scape simulate",
                options: dict | None = None) -> Path:
    """Write the trace; `options` (the run's options and results) go in its `otherData`, the
    Chrome trace format's metadata, which Perfetto shows under the trace's info."""
    path = Path(path)
    doc = chrome_trace(spans, process)
    if options is not None:
        doc["otherData"] = options
    try:
        if path.parent and not path.parent.exists():
            path.parent.mkdir(parents=True)
        write_text_atomic(path, json.dumps(doc, default=str))
    except OSError as exc:
        raise UserError(f"--trace {path}: cannot write it ({exc.strerror})") from None
    return path
