"""Patterns in the published A100 and H100 nccl-tests tables at 1 MiB-1 GiB that the collective
model does not reproduce (issue 18's remaining misses), printed from
profiles/external/public-collectives.csv so each figure in the notes can be recomputed:

1. the same machine launched two ways (C4: one process driving 8 A100s, nccl-tests -g 8; C3:
   one process per GPU): the time ratio per size;
2. in C2 (-g 8, 8x A100) an all-gather of S bytes against an all-reduce of S/2 (each rank
   sends the same bytes, (P-1)/P S, over half the ring steps);
3. bus bandwidth as a share of its largest-size value, A100 one process per GPU (C3) against
   8x H100 (A2, NCCL_ALGO=Ring), at equal bytes sent per rank.
Beside each measured pattern, the same quantity from `scape collective`'s model (the
simulator's sweep, as bench/fidelity_public.py runs it). Fits nothing.
Usage: python bench/midsize_patterns.py
"""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from profiles import load_hardware  # noqa: E402
from simulator.collective import sweep  # noqa: E402

DATA = REPO / "profiles" / "external" / "public-collectives.csv"
MIB = 2**20


def times(rows: pd.DataFrame, case: str) -> pd.Series:
    part = rows[rows["case"] == case]
    return part.set_index("size_bytes")["time_us"]


def model(rows: pd.DataFrame, case: str) -> pd.Series:
    """The model's time (us) of every size of `case`, launched as the case was."""
    part = rows[rows["case"] == case]
    first = part.iloc[0]
    sizes = [int(s) for s in part["size_bytes"]]
    got = sweep(load_hardware(first["hardware"]), int(first["gpus"]), first["op"],
                first["nccl_algo"], sizes, gpus_per_process=int(first["gpus_per_process"]))
    return pd.Series([r.time_s * 1e6 for r in got], index=sizes)


def main() -> int:
    rows = pd.read_csv(DATA)
    sizes = [2**i for i in range(20, 31)]  # 1 MiB .. 1 GiB
    c3, c4 = times(rows, "C3-a100-mpirun-allreduce"), times(rows, "C4-a100-g8-allreduce")
    print("1. 8x A100, all_reduce, -g 8 (C4) over one process per GPU (C3), same machine")
    for s in sizes:
        if s in c3 and s in c4:
            print(f"   {s // MIB:>5} MiB  {c3[s]:8.1f} us  {c4[s]:8.1f} us  "
                  f"ratio {c4[s] / c3[s]:.2f}")
    ar, ag = times(rows, "C2-a100-allreduce"), times(rows, "C2-a100-allgather")
    mar, mag = model(rows, "C2-a100-allreduce"), model(rows, "C2-a100-allgather")
    print("2. C2 (-g 8, 8x A100): all_gather(S) over all_reduce(S/2), equal bytes sent per rank")
    for s in sizes:
        if s in ag and s // 2 in ar:
            print(f"   S {s // MIB:>5} MiB  all_gather {ag[s]:8.1f} us  all_reduce(S/2) "
                  f"{ar[s // 2]:8.1f} us  ratio {ag[s] / ar[s // 2]:.2f}  model's ratio "
                  f"{mag[s] / mar[s // 2]:.2f}")
    print("3. all_reduce bus bandwidth / its value at the largest size, at equal bytes sent "
          "per rank 2 (P-1)/P S")
    share, modelled = {}, {}
    for case in ("C3-a100-mpirun-allreduce", "A2-allreduce-ring"):
        part = rows[rows["case"] == case].set_index("size_bytes")
        share[case] = part["busbw_GBps"] / part["busbw_GBps"].iloc[-1]
        t = model(rows, case)  # busbw is proportional to S / t: the share needs no bus factor
        bus = pd.Series(t.index, index=t.index) / t
        modelled[case] = bus / bus.iloc[-1]
    a, h = share["C3-a100-mpirun-allreduce"], share["A2-allreduce-ring"]
    ma, mh = modelled["C3-a100-mpirun-allreduce"], modelled["A2-allreduce-ring"]
    print(f"   {'S':>9} {'A100 (C3)':>10} {'H100 (A2)':>10} {'model A100':>11} "
          f"{'model H100':>11}")
    for s in sizes:
        if s in a and s in h:
            print(f"   {s // MIB:>5} MiB {a[s]:10.2f} {h[s]:10.2f} {ma[s]:11.2f} {mh[s]:11.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
