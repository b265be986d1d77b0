"""Collective algorithms, registered in a plain dict: ALGORITHMS[op][algo] -> builder."""

from simulator.collectives import alltoall, broadcast, collnet, hierarchical, nvls, ring, tree
from simulator.collectives.base import BUS_FACTOR, Builder, Phase

ALGORITHMS: dict[str, dict[str, Builder]] = {
    "all_reduce": {
        "ring": ring.all_reduce,
        "tree": tree.all_reduce,
        "hierarchical": hierarchical.all_reduce,
        "nvls": nvls.all_reduce,
        "nvls_tree": nvls.tree_all_reduce,
        "collnet_direct": collnet.all_reduce,
    },
    "reduce_scatter": {"ring": ring.reduce_scatter, "hierarchical": hierarchical.reduce_scatter,
                       "via_all_reduce": ring.all_reduce},
    "all_gather": {"ring": ring.all_gather, "hierarchical": hierarchical.all_gather},
    "broadcast": {"ring": broadcast.broadcast, "flat": broadcast.flat},
    "all_to_all": {"pairwise": alltoall.all_to_all},
}
AUTO = "auto"  # pick the fastest registered algorithm for each size
# How some backends implement a collective (gloo over TCP, as `scape calibrate` identifies
# it: reduce-scatter as a full all-reduce, a flat broadcast), never a choice `auto` makes.
BACKEND_ONLY: frozenset[tuple[str, str]] = frozenset(
    {("reduce_scatter", "via_all_reduce"), ("broadcast", "flat")})
# Algorithms that need hardware a topology may lack (NVSwitch multicast): `auto` on a profile
# without NCCL's tuner never picks them; the tuner picks them where the profile says so.
NEEDS_HARDWARE: frozenset[tuple[str, str]] = frozenset({("all_reduce", "nvls"),
                                                       ("all_reduce", "nvls_tree"),
                                                       ("all_reduce", "collnet_direct")})


def auto_candidates(op: str) -> list[str]:
    """The algorithms `auto` chooses among for `op`."""
    return [a for a in ALGORITHMS[op]
            if (op, a) not in BACKEND_ONLY and (op, a) not in NEEDS_HARDWARE]

def software_algorithms(op: str) -> list[str]:
    """The algorithms any backend can run for `op` (what `scape calibrate` fits a measured
    backend against): all but those that need switch hardware."""
    return [a for a in ALGORITHMS[op] if (op, a) not in NEEDS_HARDWARE]


__all__ = ["ALGORITHMS", "AUTO", "BACKEND_ONLY", "BUS_FACTOR", "NEEDS_HARDWARE", "Builder",
           "Phase", "auto_candidates", "software_algorithms"]
