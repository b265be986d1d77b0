"""Shared helpers: hand-made topologies whose closed forms are easy to write down."""

from __future__ import annotations

import fcntl
import tempfile
from pathlib import Path

import numpy as np
import pytest

from simulator.network.engine import Request, run
from simulator.network.topology import Topology

SHIPPED_MEASURED = Path(__file__).resolve().parents[1] / "profiles/measured/netbed-100mbit.toml"


def renamed_measured(name: str) -> str:
    """A whole shipped measured profile (netbed-100mbit: 2-3 ranks, compute and network) as
    TOML text named `name`, for a test to write as <name>.toml, edited or not."""
    return SHIPPED_MEASURED.read_text().replace('name = "netbed-100mbit"', f'name = "{name}"')


def topo(
    gpus: int,
    *,
    g: int = 1,
    k: int = 1,
    leaf: int = 1024,
    intra: float = 0.0,
    nic: float = 10e9,
    up: float | None = None,
    a_intra: float = 0.0,
    a_nic: float = 0.0,
    a_switch: float = 0.0,
) -> Topology:
    """A topology with G GPUs and K NICs per node; uplinks non-blocking unless `up` is given."""
    return Topology(
        gpus=gpus, gpus_per_node=g, nics_per_node=k, nodes_per_leaf=leaf,
        intra_Bps=intra, nic_Bps=nic, uplink_Bps=up if up is not None else leaf * k * nic,
        intra_latency_s=a_intra, nic_latency_s=a_nic, switch_latency_s=a_switch,
    )


def time_of(t: Topology, op: str, algo: str, size: float, group=None) -> float:
    (res,) = run(t, [Request(op, algo, size, group=None if group is None else np.array(group))]
                 ).results
    return res.time_s


@pytest.fixture
def approx():
    """Exact up to float rounding."""
    return lambda value: pytest.approx(value, rel=1e-12, abs=1e-15)


# the netbed tests build and remove network namespaces and qdiscs and compare the host's
# before and after: one at a time on this host, whatever runs them
NETBED_LOCK = Path(tempfile.gettempdir()) / "scape-netbed-tests.lock"


@pytest.fixture(autouse=True)
def _netbed_alone(request):
    """A netbed test holds an exclusive lock on NETBED_LOCK while it runs. `make test` runs
    one test process per core (pytest-xdist), and `--dist loadgroup` no longer keeps a group
    on one worker under pytest 9 (xdist 3.8 renames `item._nodeid`, which pytest 9's
    `nodeid` no longer reads): two netbed tests ran at once and each saw the other's
    namespaces."""
    if request.node.get_closest_marker("netbed") is None:
        yield
        return
    with open(NETBED_LOCK, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield
