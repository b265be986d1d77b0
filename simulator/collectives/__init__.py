"""Collective algorithms, registered in a plain dict: ALGORITHMS[op][algo] -> builder."""

from simulator.collectives import alltoall, broadcast, hierarchical, ring, tree
from simulator.collectives.base import BUS_FACTOR, Builder, Phase

ALGORITHMS: dict[str, dict[str, Builder]] = {
    "all_reduce": {
        "ring": ring.all_reduce,
        "tree": tree.all_reduce,
        "hierarchical": hierarchical.all_reduce,
    },
    "reduce_scatter": {"ring": ring.reduce_scatter, "hierarchical": hierarchical.reduce_scatter},
    "all_gather": {"ring": ring.all_gather, "hierarchical": hierarchical.all_gather},
    "broadcast": {"ring": broadcast.broadcast},
    "all_to_all": {"pairwise": alltoall.all_to_all},
}
AUTO = "auto"  # pick the fastest registered algorithm for each size

__all__ = ["ALGORITHMS", "AUTO", "BUS_FACTOR", "Builder", "Phase"]
