"""Fit [compute] ep_overlap_share: the share of the dispatch and combine this model's
expert-parallel overlap would hide (simulator/step/moe.py ep_layer_s) that Megatron-Core's
--overlap-moe-expert-parallel-comm hides, on published A/B pairs of one shape with the overlap
off and on (profiles/external/moe-overlap-ab.csv).

Each pair's share: the step the overlap saved, as a fraction of the step without it, over the
fraction this model saves with all of its pairing's hiding (the share at 1). A fraction, not
seconds, so that what the model misses in both steps alike (the dispatcher's host work, an
unfused permute) does not count as overlap. The profile's value is the pairs' mean; these pairs
are in-sample, and bench/moe_steps.py's steps with the overlap (Megatron-Core on H100) are what
it predicts.

    SCAPE_PROFILE_DIR=profiles python bench/moe_overlap_fit.py [--hardware dgx-h100]
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
from pathlib import Path

import pandas as pd

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from profiles import load_hardware  # noqa: E402
from simulator.planning.options import Batch, Parallelism, SchemeOptions, StepOptions  # noqa: E402
from simulator.step.simulate import simulate_step  # noqa: E402

DATA = REPO / "profiles" / "external" / "moe-overlap-ab.csv"
# the shape every pair of DATA ran (its header says where it is stated)
SHAPE = {"model": "qwen3-30b-a3b", "gpus": 16, "ep": 16, "micro_batch": 1, "seq": 4096,
         "global_batch": 1024}


def step_s(hw, dispatcher: str, overlap: bool) -> float:
    """The shape's step on `hw` (its ep_overlap_share as given) with the overlap `overlap`."""
    opts = StepOptions(SHAPE["model"], hw.name, SHAPE["gpus"], scheme=SchemeOptions("dense-adams"),
                       batch=Batch(SHAPE["micro_batch"], SHAPE["seq"], None,
                                   SHAPE["global_batch"]),
                       parallelism=Parallelism(tp=1, ep=SHAPE["ep"], recompute="none",
                                               moe_dispatcher=dispatcher, moe_overlap=overlap))
    cfg = dataclasses.replace(opts.config(), hardware=hw)
    return simulate_step(cfg).step_time_s


def fit(hw) -> pd.DataFrame:
    """Each pair's published saving, the model's at a share of 1, and their ratio."""
    whole = dataclasses.replace(hw, compute=dataclasses.replace(hw.compute,
                                                                ep_overlap_share=None))
    out = []
    for r in pd.read_csv(DATA, comment="#").itertuples():
        # a time falls as a throughput rises: the step is the throughput's inverse
        off, on = (r.off, r.on) if r.unit == "s" else (1 / r.off, 1 / r.on)
        published = 1 - on / off
        off_s, on_s = step_s(whole, r.dispatcher, False), step_s(whole, r.dispatcher, True)
        model = 1 - on_s / off_s
        shipped = step_s(hw, r.dispatcher, True)
        out.append({"case": r.case, "published_saving_pct": 100 * published,
                    "model_off_s": off_s, "model_on_s_share_1": on_s,
                    "model_saving_pct": 100 * model, "share": published / model,
                    "shipped_on_s": shipped,
                    "shipped_saving_pct": 100 * (1 - shipped / off_s)})
    return pd.DataFrame(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--hardware", default="dgx-h100")
    args = ap.parse_args()
    hw = load_hardware(args.hardware)
    df = fit(hw)
    pd.set_option("display.width", 160)
    print(df.to_string(index=False, float_format=lambda v: f"{v:,.3f}"))
    mean = statistics.mean(df["share"])
    print(f"\nep_overlap_share: mean of the pairs {mean:.3f} (range {df['share'].min():.3f}-"
          f"{df['share'].max():.3f}); {hw.name} ships {hw.compute.ep_overlap_share}")


if __name__ == "__main__":
    main()
