"""The memory rows of an external data set, predicted (DESIGN section 9; issue 14).

Nothing is fitted: each row with launch settings is priced by the simulator's memory model
(simulator/memory/peak.py: weights, fp32 gradient buffer, optimizer state, the authors' reducer
buffers, activations after Korthikanti et al. 2022) at the run's micro-batch, sequence length
and flags. Two facts the source does not give are stated, not guessed:
- the GPU count: the memory runs have no slurm wrapper and the plot has no GPU axis, so a row
  whose memory depends on it (the distributed optimizer shards the optimizer state over the
  GPUs) is predicted as an interval over the GPU counts of the authors' scaling tables, and its
  error is the distance to the nearer end (0 inside);
- the unit: Megatron's report_memory divides by 1024 * 1024 and prints "memory (MB)", so the
  plotted "MB" are read as MiB;
- the quantity: report_memory prints the peak both as "max allocated" and as "max reserved"
  and the plot does not say which, so the prediction runs from the model's peak (allocated)
  to that peak with the GH200 profile's allocator slack (reserved; profiles/hardware/
  vista-gh200-socket.toml [memory] fragmentation).
"""

from __future__ import annotations

from dataclasses import replace

import pandas as pd

from profiles import load_hardware, load_model
from profiles.external import ExternalData, ExternalRow
from simulator.memory.peak import memory_use, reserve
from simulator.step.external_fit import dense_dtypes, scheme_of

MIB = 2.0**20  # Megatron-LM megatron/training/utils.py report_memory: mega_bytes = 1024*1024
HARDWARE = "vista-gh200-socket"  # the authors' cluster (TACC Vista, GH200 96 GB)
GPU_RANGE = (4, 64)  # the GPU counts of the authors' scaling tables (profiles/external/)
# memory-table series -> the step-table series whose launch flags they share (the offload
# suffix is carried by each memory config's own topk_adams_residual_cpu_offload flag)
SUFFIXES = ("-nores", "-res")
MEMORY_PROTOCOL = (
    "Nothing fitted: peak memory per GPU from the simulator's memory model at each run's "
    "micro-batch, sequence and flags; the source states no GPU count, so rows that depend on "
    f"it (distributed optimizer) are an interval over {GPU_RANGE[0]}-{GPU_RANGE[1]} GPUs, and "
    "every row an interval from max allocated to max reserved (the plot does not say which "
    "it shows); the error is to the nearer end; values read as MiB (Megatron report_memory).")


def _scheme_series(series: str) -> str:
    for suffix in SUFFIXES:
        if series.endswith(suffix):
            return series[: -len(suffix)]
    return series


def predict_memory(ext: ExternalData, row: ExternalRow) -> tuple[float, float]:
    """(lowest, highest) predicted peak MiB of `row` over the GPU counts it may have run on."""

    config = ext.config(row)
    model = load_model(row.model)
    scheme = scheme_of(replace(row, series=_scheme_series(row.series)), config)
    gpus = (row.gpus,) if row.gpus is not None else GPU_RANGE
    totals = [memory_use(model, scheme, p, 1, config["micro_batch_size"], config["seq_length"],
                         dense_dtypes()).total / MIB for p in gpus]
    slack = reserve(load_hardware(HARDWARE))[0].fragmentation  # max reserved over allocated
    return min(totals), max(totals) * (1 + slack)


def memory_table(ext: ExternalData) -> tuple[pd.DataFrame, list[dict]]:
    """Every memory row with launch settings, predicted; the others, with why not."""
    rows, skipped = [], []
    for r in ext.rows:
        if r.quantity != "memory_MB":
            continue
        if ext.config(r) is None:
            skipped.append({"row": r.cite, "why": "memory_MB: no public launch settings "
                            "(model shape or micro-batch) for this table"})
            continue
        lo, hi = predict_memory(ext, r)
        nearest = min(max(r.value, lo), hi)  # the measured value, clipped into the interval
        rows.append({"series": r.series, "model": r.model,
                     "gpus": r.gpus if r.gpus is not None
                     else f"not stated ({GPU_RANGE[0]}-{GPU_RANGE[1]})",
                     "measured_MiB": r.value, "predicted_low_MiB": lo,
                     "predicted_high_MiB": hi,
                     "error_pct": 100 * (nearest / r.value - 1), "fitted": False,
                     "source": r.cite})
    return pd.DataFrame(rows), skipped


def memory_summary(table: pd.DataFrame) -> dict:
    err = table["error_pct"].abs()
    return {"memory_rows": len(table), "median_abs_error_pct": float(err.median()),
            "max_abs_error_pct": float(err.max()), "gpu_range_assumed": list(GPU_RANGE),
            "unit": "MiB (Megatron report_memory), max allocated or max reserved"}
