"""How much of issue 59's remaining nccl-tests error is NCCL's protocol choice, and how much is
the rest of the cost model: for each shipped system of bench/nccl_tests_holdout.py, fit on
all_reduce (`scape calibrate nccl-tests`, nccl model, as that bench's `fit on one op` lines)
and predict every other ring collective of the same run three ways, at every size from 64 KiB:

- tuner: what the product predicts (simulator/network/nccl.py `choose`, NCCL's own cost model
  picking LL, LL128 or Simple), the figure the issue's goal is measured on;
- oracle: at each size, whichever of the three protocols, priced with the same fitted profile
  (`scape collective --proto`), lies nearest the measured time. NOT a prediction: it reads the
  measured time to choose. It bounds what any protocol-switch rule could reach with the fitted
  constants: where the oracle meets the goal and the tuner does not, the miss is the switch
  point (which protocol ran), which an nccl-tests log does not print (NCCL_DEBUG=INFO's
  per-call lines, or sweeps pinned with NCCL_PROTO, would say); where the oracle misses too, it
  is the bandwidth or latency of the protocol that ran, or a choice outside the three (channel
  counts, algorithms);
- each protocol pinned (ll, ll128, simple) at every size, for reference.

Lines give median / max |busbw error| (%) per size band (< 1 MiB, 1-64 MiB, >= 64 MiB), then
the sizes where the oracle's protocol is not the tuner's. Nothing is fitted on the held-out op.

Run: SCAPE_PROFILE_DIR=profiles python bench/nccl_protocol_oracle.py [--logs DIR --gpu-from
     PROFILE [--algo ALGO] [--nics-per-node N]] (an unshipped system, as nccl_tests_holdout.py)
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from nccl_tests_holdout import (  # noqa: E402
    MIN_BYTES,
    _band_text,
    one_op_per_file,
    with_logs_option,
)

from calibration.nccl_tests import calibrate_from_logs, parse_log  # noqa: E402
from profiles import measured  # noqa: E402
from simulator.network.collective import AUTO_PROTO, sweep  # noqa: E402
from simulator.network.nccl import PROTOCOLS  # noqa: E402

FIT_OP = "all_reduce"
RING_OPS = ("all_gather", "reduce_scatter", "broadcast", "reduce")  # NCCL rings, three protocols


def priced(hw, rows: list[dict], algo: str, proto: str) -> list:
    """`scape collective`'s result for each row of one op on `hw`, in order: `proto` pinned
    (NCCL_PROTO), or AUTO_PROTO for the protocol the model's copy of NCCL's tuner picks (each
    result names it)."""
    return sweep(hw, int(rows[0]["world"]), rows[0]["op"], algo,
                 [float(r["size_bytes"]) for r in rows], proto=proto,
                 gpus_per_process=int(rows[0]["gpus_per_process"]))


def busbw_errors(rows: list[dict], times: list[float]) -> list[float]:
    """busbw error, % (measured time / predicted - 1), per row."""
    return [100 * (r["seconds"] / t - 1) for r, t in zip(rows, times, strict=True)]


def system_lines(logs: list[Path], gpu: str, algo: str, nics: int | None) -> list[str]:
    """The module docstring's lines for one system's logs."""
    parsed = [parse_log(p) for p in logs]
    by_op = {}
    for path, log in zip(logs, parsed, strict=True):
        by_op.setdefault(log.op, []).append(str(path))
    if FIT_OP not in by_op:
        return [f"  no {FIT_OP} log: nothing to fit on"]
    out = []
    for held in sorted(op for op in by_op if op in RING_OPS):
        _, fit, _, table, _ = calibrate_from_logs(  # the fit on all_reduce, the op's rows
            "oracle", by_op[FIT_OP] + by_op[held], holdout=held, min_bytes=MIN_BYTES,
            gpu_from=gpu, model="nccl", algo=algo, nics=nics, force=True,
            with_intervals=False)
        rows = table.to_dict("records")
        sizes = [r["size_bytes"] for r in rows]
        auto = priced(fit.hardware, rows, fit.algo, AUTO_PROTO)  # what the product predicts
        tuner = busbw_errors(rows, [g.time_s for g in auto])
        chosen = [g.proto for g in auto]
        pinned = {p: busbw_errors(rows, [g.time_s for g in priced(fit.hardware, rows,
                                                                   fit.algo, p)])
                  for p in PROTOCOLS}
        best = [min(PROTOCOLS, key=lambda p, i=i: abs(pinned[p][i])) for i in range(len(rows))]
        oracle = [pinned[p][i] for i, p in enumerate(best)]
        out.append(f"  {FIT_OP} -> {held}:")
        out.append(f"    {'tuner:':<9}" + _band_text(sizes, tuner))
        out.append(f"    {'oracle:':<9}" + _band_text(sizes, oracle))
        for p in PROTOCOLS:
            out.append(f"    {p + ':':<9}" + _band_text(sizes, pinned[p]))
        differ = [f"{s / 2**20:g} MiB {c}->{b}" for s, c, b in zip(sizes, chosen, best,
                                                                    strict=True) if c != b]
        out.append("    oracle differs from the tuner at: " + (", ".join(differ) or "none"))
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    systems = with_logs_option(parser)
    print(__doc__.split("\n\n")[0].replace("\n", " "))
    print("median / max |busbw error| (%) per band; fit on all_reduce, other ring ops held out")
    with tempfile.TemporaryDirectory() as tmp:
        measured.FOLDER = Path(tmp)  # the profiles written go nowhere that lasts
        for system, (logs, gpu, algo, *shape) in systems.items():
            print(system)
            lines = system_lines(one_op_per_file(logs, Path(tmp)), gpu, algo,
                                 shape[0] if shape else None)
            print("\n".join(lines), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
