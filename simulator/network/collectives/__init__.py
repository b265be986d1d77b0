"""Collective algorithms, registered in a plain dict: ALGORITHMS[op][algo] -> builder.

The names (and which need hardware or a backend) are vocabulary/names.py's ALGORITHM_NAMES;
this registry holds a builder for each, in that order (tests/test_architecture.py checks).
"""

from simulator.network.collectives import (
    alltoall,
    broadcast,
    collnet,
    hierarchical,
    nvls,
    ring,
    tree,
)
from simulator.network.collectives.base import BUS_FACTOR, Builder, Phase
from vocabulary.names import (
    AUTO,
    BACKEND_ONLY,
    NEEDS_HARDWARE,
    auto_candidates,
    software_algorithms,
)

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
                       "via_all_reduce": ring.all_reduce, "nvls": nvls.reduce_scatter},
    "all_gather": {"ring": ring.all_gather, "hierarchical": hierarchical.all_gather,
                   "nvls": nvls.all_gather},
    "broadcast": {"ring": broadcast.broadcast, "flat": broadcast.flat},
    "all_to_all": {"pairwise": alltoall.all_to_all},
}
__all__ = ["ALGORITHMS", "AUTO", "BACKEND_ONLY", "BUS_FACTOR", "NEEDS_HARDWARE", "Builder",
           "Phase", "auto_candidates", "software_algorithms"]
