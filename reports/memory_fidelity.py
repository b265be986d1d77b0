"""How far the memory model is from published peaks like the one asked about (issue 61, "a
model or layout for which no published memory source exists says so beside the figure"):
bench/memory_published.py prices every published run with a reported peak and writes the
errors per (shipped hardware profile, stack, kind of peak) to
profiles/external/memory-fidelity-bands.csv (`--bands`); `memory_how_sure` quotes the band of
a step's profile and stack, or says that no published peak like it was checked."""

from __future__ import annotations

from pathlib import Path

from profiles import shipped
from reports.fidelity import stored

MEMORY_BANDS = (Path(__file__).resolve().parents[1] / "profiles" / "external"
                / "memory-fidelity-bands.csv")
# the deepspeed stack's published peaks (peak kind "nvidia-smi": the allocator's
# reserved bytes and what lives outside it), written by bench/deepspeed_steps.py --bands
DEEPSPEED_BANDS = MEMORY_BANDS.with_name("memory-fidelity-bands-deepspeed.csv")
KEYS = ("hardware", "stack", "peak_kind")
SOURCE = ("profiles/external/memory-fidelity-bands.csv from bench/memory_published.py and "
          "memory-fidelity-bands-deepspeed.csv from bench/deepspeed_steps.py")
# the profiles of the SCAPE authors' GH200 nodes, whose Megatron-LM memory table `scape
# validate --external scape-sc26` checks (reports/external_memory.py)
AUTHORS_GH200 = ("vista-gh200", "vista-gh200-socket")


def reserved_under() -> tuple[int, int]:
    """(reported reserved peaks the model is below, reported reserved peaks), over every band:
    what plan's thin-headroom footnote quotes."""
    bands = [b for k, b in stored(MEMORY_BANDS, KEYS).items() if k[2] == "reserved"]
    return (sum(int(b.get("under") or 0) for b in bands), sum(int(b["rows"]) for b in bands))


def memory_how_sure(hw, stack: str) -> str:
    """One line on the published peaks of this profile and stack the memory model was checked
    against (signed errors: - = the model is below the peak), or why there are none."""
    if not shipped(hw):
        return (f"memory how sure: unvalidated: no published peak ran on {hw.path}; the "
                "checked peaks are of the shipped profiles")
    bands = {**stored(MEMORY_BANDS, KEYS), **stored(DEEPSPEED_BANDS, KEYS)}
    mine = [(k, b) for k, b in sorted(bands.items()) if k[:2] == (hw.name, stack)]
    if not mine:
        others = sorted({f"{k[0]} {k[1]}" for k in bands})
        authors = ("; the SCAPE authors' Megatron-LM memory table on GH200 (a range per row: "
                   "scape validate --external scape-sc26)"
                   if stack == "megatron" and hw.name in AUTHORS_GH200 else "")
        return (f"memory how sure: no published peak of a {stack}-stack run on {hw.name} was "
                "checked (published peaks checked: " + ", ".join(others or ["none"])
                + "); fits or not was checked on every published run that states its layout "
                f"(bench/memory_published.py){authors}")
    return "memory how sure: " + "; ".join(
        f"{b['rows']} published {kind} peak{'s' if b['rows'] != '1' else ''} on {hw.name} with "
        f"the {stack} stack, median |error| {float(b['median_abs_err_pct']):g}%, max "
        f"{float(b['max_abs_err_pct']):g}%, median {float(b['median_err_pct']):+g}%"
        for (_, _, kind), b in mine) + (" (-: the model is below the peak: it counts live "
                                        f"tensors and a fixed allocator slack; {SOURCE})")
