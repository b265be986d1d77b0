"""Patterns in the published A100 and H100 nccl-tests tables at 1 MiB-1 GiB that the collective
model does not reproduce (issue 18's remaining misses), printed from
profiles/external/public-collectives.csv so each figure in the notes can be recomputed:

1. the same machine launched two ways (C4: one process driving 8 A100s, nccl-tests -g 8; C3:
   one process per GPU): the time ratio per size;
2. in C2 (-g 8, 8x A100) an all-gather of S bytes against an all-reduce of S/2 (each rank
   sends the same bytes, (P-1)/P S, over half the ring steps);
3. bus bandwidth as a share of its largest-size value, A100 one process per GPU (C3) against
   8x H100 (A2, NCCL_ALGO=Ring), at equal bytes sent per rank.
Beside each measured pattern, the same quantity from `scape collective`'s model
(bench/fidelity_public.py's predict). Fits nothing.
Usage: python bench/midsize_patterns.py
"""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from fidelity_public import predict  # noqa: E402  (bench/, this script's folder)

DATA = REPO / "profiles" / "external" / "public-collectives.csv"
MIB = 2**20
CASES = ("C2-a100-allreduce", "C2-a100-allgather", "C3-a100-mpirun-allreduce",
         "C4-a100-g8-allreduce", "A2-allreduce-ring")


def main() -> int:
    rows = pd.read_csv(DATA)
    df = predict(rows[rows["case"].isin(CASES)])  # time_us measured, pred_us the model's

    def times(case: str, column: str = "time_us") -> pd.Series:
        return df[df["case"] == case].set_index("size_bytes")[column]

    def share(case: str, column: str) -> pd.Series:
        """Bus bandwidth over its largest-size value: busbw is proportional to S / t, so the
        share needs no bus factor."""
        t = times(case, column)
        bw = pd.Series(t.index, index=t.index) / t
        return bw / bw.iloc[-1]

    sizes = [2**i for i in range(20, 31)]  # 1 MiB .. 1 GiB
    c3, c4 = times("C3-a100-mpirun-allreduce"), times("C4-a100-g8-allreduce")
    print("1. 8x A100, all_reduce, -g 8 (C4) over one process per GPU (C3), same machine")
    for s in sizes:
        if s in c3 and s in c4:
            print(f"   {s // MIB:>5} MiB  {c3[s]:8.1f} us  {c4[s]:8.1f} us  "
                  f"ratio {c4[s] / c3[s]:.2f}")
    ar, ag = times("C2-a100-allreduce"), times("C2-a100-allgather")
    mar, mag = times("C2-a100-allreduce", "pred_us"), times("C2-a100-allgather", "pred_us")
    print("2. C2 (-g 8, 8x A100): all_gather(S) over all_reduce(S/2), equal bytes sent per rank")
    for s in sizes:
        if s in ag and s // 2 in ar:
            print(f"   S {s // MIB:>5} MiB  all_gather {ag[s]:8.1f} us  all_reduce(S/2) "
                  f"{ar[s // 2]:8.1f} us  ratio {ag[s] / ar[s // 2]:.2f}  model's ratio "
                  f"{mag[s] / mar[s // 2]:.2f}")
    print("3. all_reduce bus bandwidth / its value at the largest size, at equal bytes sent "
          "per rank 2 (P-1)/P S")
    a, h = share("C3-a100-mpirun-allreduce", "time_us"), share("A2-allreduce-ring", "time_us")
    ma, mh = share("C3-a100-mpirun-allreduce", "pred_us"), share("A2-allreduce-ring", "pred_us")
    print(f"   {'S':>9} {'A100 (C3)':>10} {'H100 (A2)':>10} {'model A100':>11} "
          f"{'model H100':>11}")
    for s in sizes:
        if s in a and s in h:
            print(f"   {s // MIB:>5} MiB {a[s]:10.2f} {h[s]:10.2f} {ma[s]:11.2f} {mh[s]:11.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
