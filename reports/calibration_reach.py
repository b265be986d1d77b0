"""How far a calibrated profile's measurements reach (issue 61 item 4): a profile written by
`scape calibrate` records the rank counts its network was measured at ([measured]
network_nprocs, by `calibrate collectives`) or the GPU and node counts of the nccl-tests logs it
was fitted on (logs_gpus, logs_nodes, by `calibrate nccl-tests`). A step or plan on more GPUs
or nodes than that is the model extrapolating the fit, and `simulate`, `compare` and `plan` say
so (as `scape collective` does per call, cli/collective.py _beyond_logs)."""

from __future__ import annotations

import math


def _counts(text: str | None) -> list[int]:
    return [int(x) for x in str(text).split(",") if x.strip().isdigit()] if text else []


def measured_reach(hw) -> tuple[int, int | None, str] | None:
    """(most GPUs, most nodes or None, what measured them) of a calibrated profile's network
    measurements; None for a profile no calibration measured (the shipped ones, whose numbers
    are datasheets' and published runs')."""
    m = getattr(hw, "measured", None) or {}
    gpus = _counts(m.get("logs_gpus"))
    if gpus:
        nodes = _counts(m.get("logs_nodes"))
        return (max(gpus), max(nodes) if nodes else None,
                f"the nccl-tests logs it was fitted on ([measured] logs_gpus {m['logs_gpus']}"
                + (f", logs_nodes {m['logs_nodes']}" if nodes else "") + ")")
    ranks = _counts(m.get("network_nprocs"))
    if ranks:  # one rank per GPU; calibrate collectives runs its ranks on one host
        return (max(ranks), None, f"scape calibrate collectives at {m['network_nprocs']} ranks "
                                  "([measured] network_nprocs)")
    return None


def one_tier(hw) -> str | None:
    """A warning for a link fit of logs whose hosts ran several GPUs each (calibrate
    nccl-tests --model link: one tier, a node per rank): every GPU is its own node there, so
    a layout's tensor, expert or pipeline traffic inside a real node runs over the fitted
    link; None otherwise."""
    per_host = (getattr(hw, "measured", None) or {}).get("logs_gpus_per_host")
    if per_host is None or hw.node.gpus_per_node != 1:
        return None
    return (f"{hw.name} is a one-tier link fit of logs whose hosts ran {per_host} GPUs each: "
            "every GPU is its own node here, so traffic inside a node runs over the fitted "
            "link (scape calibrate nccl-tests --model nccl fits the nodes as they are)")


def beyond_measured(hw, gpus: int) -> str | None:
    """A warning where `gpus` GPUs of `hw` go beyond what its calibration measured, or where
    it is a one-tier fit of multi-GPU hosts (`one_tier`); None where neither holds, or where
    the profile was not calibrated."""
    flat = one_tier(hw)
    reach = measured_reach(hw)
    if reach is None:
        return flat
    most, most_nodes, how = reach
    nodes = math.ceil(gpus / hw.node.gpus_per_node)
    past = []
    if gpus > most:
        past.append(f"{gpus:,} GPUs (measured: at most {most:,})")
    if most_nodes is not None and nodes > most_nodes:
        past.append(f"{nodes:,} nodes (measured: at most {most_nodes:,})")
    if not past:
        return flat
    said = (f"extrapolated: {' and '.join(past)}: {hw.name}'s network was calibrated by {how}; "
            "beyond that the model extrapolates the fit (more hops, switch levels and "
            "congestion than it saw), so treat this answer as unvalidated at this scale")
    return said if flat is None else f"{said}; {flat}"
