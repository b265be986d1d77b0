"""How sure a convergence reading is: final validation losses of the same runs over several
seeds (bench/convergence.py tables), each scheme's gap against dense AdamS of the same seed.

Seed 0 comes from the main study's table, other seeds from tables whose rows carry `seed=S`;
every seed is scored on the same validation sample (TrainConfig.val_seed).
Usage: python bench/seed_spread.py results/convergence/convergence/table.csv
       results/convergence/convergence-seeds/table.csv [--reference "dense-adams lr=0.0005"]
       [--out results/convergence/convergence-seeds/spread.md]
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pandas as pd

from reports.tables import markdown


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("tables", nargs="+")
    parser.add_argument("--reference", default="dense-adams lr=0.0005")
    parser.add_argument("--out")
    args = parser.parse_args()
    rows = pd.concat([pd.read_csv(t) for t in args.tables])[["run", "final_val_loss"]]
    seed = rows["run"].str.extract(r" seed=(\d+)")[0].fillna("0").astype(int)
    rows = rows.assign(seed=seed, config=rows["run"].map(lambda r: re.sub(r" seed=\d+", "", r)))
    ref = rows[rows["config"] == args.reference].set_index("seed")["final_val_loss"]
    seeds = sorted(ref.index)
    rows = rows[rows["seed"].isin(seeds)]
    table = []
    for config, group in rows.groupby("config", sort=False):
        loss = group.set_index("seed")["final_val_loss"]
        if sorted(loss.index) != seeds:
            continue  # only configurations run at every seed of the reference
        gap = (loss / ref[loss.index] - 1) * 100
        table.append({"config": config, **{f"seed {s}": loss[s] for s in seeds},
                      "mean": loss.mean(), "spread_pct": (loss.max() / loss.min() - 1) * 100,
                      **{f"gap seed {s} %": gap[s] for s in seeds},
                      "gap of means %": (loss.mean() / ref.mean() - 1) * 100})
    df = pd.DataFrame(table)
    text = (f"# Seed spread\n\nFinal validation loss per seed; gaps against `{args.reference}` "
            f"of the same seed. Tables: {', '.join(args.tables)}.\n\n"
            + markdown(df, "{:.3f}") + "\n")
    print(text)
    if args.out:
        Path(args.out).write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
