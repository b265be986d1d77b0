"""How much of AdamS's first moment a mask of density d can carry (issue 3's convergence gap).

A SCAPE step moves only the mask's coordinates, each by about lr (AdamS normalizes), so the
first-order loss decrease it gets is about the mask's share of sum |g_i| (L1), while an SGD-like
step would get its share of sum g_i^2 (L2). This reads the first moment m from the checkpoint of
a run (`scape train --out DIR`, or a bench/convergence.py run directory) and prints, for each
density, the share of |m|'s L1 and L2 mass held by its largest coordinates.
Usage: python bench/moment_concentration.py RUN_DIR [RUN_DIR ...] [--density 0.01,0.1]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch

from scape.train.loop import checkpoint_step, checkpoints


def first_moment(run: Path) -> torch.Tensor:
    """|m| over the whole model ([n] fp32): the ranks' shards in rank order."""
    found = checkpoints(run)
    if not found:
        raise SystemExit(f"moment_concentration: no checkpoint/rank*-step*.pt under {run}")
    step = checkpoint_step(run, len(found))  # the newest step every rank holds
    return torch.cat([torch.load(found[r][step], weights_only=False)["m"].abs()
                      for r in sorted(found)])


def shares(m: torch.Tensor, density: float) -> tuple[float, float]:
    """(L1 share, L2 share) of the ceil(density * n) largest |m| (m: [n] fp32, nonnegative)."""
    k = max(1, int(density * m.numel() + 0.999999))
    top = torch.topk(m, k).values  # [k]; a bench, not the runtime: a sort-free path is not needed
    return (top.sum() / m.sum()).item(), (top.square().sum() / m.square().sum()).item()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", type=Path)
    parser.add_argument("--density", default="0.01,0.1")
    args = parser.parse_args()
    densities = [float(d) for d in args.density.split(",")]
    print(f"{'run':<50} {'density':>8} {'L1 share':>9} {'L2 share':>9}")
    for run in args.runs:
        m = first_moment(run)
        for d in densities:
            l1, l2 = shares(m, d)
            print(f"{run.name:<50} {d:>8.3f} {l1:>9.3f} {l2:>9.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
