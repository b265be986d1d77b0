"""Fit an all-to-all's latency across nodes, a2a_call_us + a2a_peer_us x (peers off a rank's
node) (simulator/network/collectives/alltoall.py), on public alltoall_perf logs of 10-80 H100
ranks (profiles/external/alltoall-latency.csv), and print every row priced before (P - 1
network steps in turn) and after.

The fit: each row's time less what the profile's own network model gives its bytes (the
phases' bandwidth time, latency left out), least squares over the rows up to --max-mib (the
latency is a small part of larger calls, whose residual is the bandwidth's error, not the
latency's). The two constants go into a profile's [nccl] by hand, with this command in their
source. Every row is in-sample: these logs judge the fit only as far as its two constants can
follow four rank counts; the MoE steps of bench/moe_steps.py are what it predicts.

    SCAPE_PROFILE_DIR=profiles python bench/alltoall_latency_fit.py [--hardware dgx-h100]
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
from pathlib import Path

import numpy as np
import pandas as pd

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from profiles import load_hardware  # noqa: E402
from simulator.network.collectives.alltoall import all_to_all  # noqa: E402
from simulator.network.engine import time_alone  # noqa: E402
from simulator.network.topology import build_topology  # noqa: E402

DATA = REPO / "profiles" / "external" / "alltoall-latency.csv"


def _group(nodes: int, per_node: int, node_size: int) -> np.ndarray:
    """The first `per_node` GPUs of each of `nodes` nodes (one process a GPU, as the logs)."""
    return np.array([n * node_size + i for n in range(nodes) for i in range(per_node)])


def priced_us(topo, size: float, group: np.ndarray) -> tuple[float, float]:
    """(whole call, its bandwidth part) in microseconds on `topo`."""
    phases = all_to_all(topo, size, group)
    whole = time_alone(topo, phases)
    bytes_only = time_alone(topo, [dataclasses.replace(p, fixed_latency_s=0.0) for p in phases])
    return whole * 1e6, bytes_only * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--hardware", default="dgx-h100")
    ap.add_argument("--max-mib", type=float, default=64.0,
                    help="fit on the rows up to this size (MiB)")
    args = ap.parse_args()
    hw = load_hardware(args.hardware)
    rows = pd.read_csv(DATA, comment="#")
    node = hw.node.gpus_per_node
    # the profile as it is, and without the pair (the old P - 1 steps)
    old_hw = dataclasses.replace(hw, nccl=dataclasses.replace(hw.nccl, a2a_call_us=None,
                                                              a2a_peer_us=None))
    out = []
    for r in rows.itertuples():
        group = _group(r.nodes, r.gpus_per_node, node)
        topo = build_topology(hw, r.nodes * node)
        now, bw = priced_us(topo, float(r.size_bytes), group)
        before, _ = priced_us(build_topology(old_hw, r.nodes * node), float(r.size_bytes), group)
        off = r.ranks - r.gpus_per_node
        out.append({"case": r.case, "ranks": r.ranks, "off_node": off,
                    "MiB": r.size_bytes / 2**20, "measured_us": r.time_us,
                    "bytes_us": bw, "residual_us": r.time_us - bw,
                    "before_err_pct": 100 * (before / r.time_us - 1),
                    "profile_err_pct": 100 * (now / r.time_us - 1)})
    df = pd.DataFrame(out)
    fit = df[df["MiB"] <= args.max_mib]
    a = np.column_stack([np.ones(len(fit)), fit["off_node"]])
    (call, peer), *_ = np.linalg.lstsq(a, fit["residual_us"].to_numpy(), rcond=None)
    df["fit_err_pct"] = 100 * ((df["bytes_us"] + call + peer * df["off_node"])
                               / df["measured_us"] - 1)
    pd.set_option("display.width", 160)
    print(f"# {len(df)} rows of {DATA.relative_to(REPO)} on {hw.name}; fitted on the "
          f"{len(fit)} rows up to {args.max_mib:g} MiB (in-sample)")
    print(f"fit: a2a_call_us = {call:.1f}, a2a_peer_us = {peer:.2f}  (the profile has "
          f"{hw.nccl.a2a_call_us}, {hw.nccl.a2a_peer_us})\n")
    print(df.to_string(index=False, float_format=lambda v: f"{v:,.1f}"))
    for label, band in (("32-64 MiB", df["MiB"] <= 64), ("128 MiB-1 GiB",
                                                         (df["MiB"] > 64) & (df["MiB"] <= 1024)),
                        ("above 1 GiB", df["MiB"] > 1024)):
        part = df[band]
        cells = ", ".join(
            f"{col.removesuffix('_err_pct')} {statistics.median(part[col].abs()):.1f} / "
            f"{part[col].abs().max():.1f}%"
            for col in ("before_err_pct", "profile_err_pct", "fit_err_pct"))
        print(f"{label} ({len(part)} rows), median / max |error|: {cells}")


if __name__ == "__main__":
    main()
