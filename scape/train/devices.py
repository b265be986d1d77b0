"""Which device a rank computes on, and NCCL's settings for several ranks sharing one GPU
(issue 15: real NCCL and real kernels on the one GPU a session may be lent).

NCCL refuses two ranks of one communicator on the same GPU of the same host ("Duplicate GPU
detected"); it tells hosts apart by a hash of the host name that NCCL_HOSTID replaces. Each rank
given its own NCCL_HOSTID is its own "node", so NCCL connects the ranks through its network
transport; with InfiniBand off that is its TCP socket transport, the transport of the SCAPE
authors' runs (NCCL_SOCKET_IFNAME picks the interface: loopback here, a netbed veth there).
Shared memory and P2P are turned off as well, so nothing bypasses the sockets.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

SHARE_ENV = "SCAPE_SHARE_GPU"  # "1": ranks share the GPUs round-robin over NCCL's sockets
NETBED_ENV = "SCAPE_NETBED"  # the shaped testbed the ranks run on, as --netbed spells it


def sharing(env: Mapping[str, str] | None = None) -> bool:
    return (os.environ if env is None else env).get(SHARE_ENV) == "1"


def shared_gpu_env(env: Mapping[str, str]) -> dict[str, str]:
    """The NCCL variables a rank sets before it joins the group when ranks share GPUs; empty
    otherwise. A value the user exported (NCCL_SOCKET_IFNAME on a netbed) is kept."""
    if not sharing(env):
        return {}
    rank = env.get("RANK", "0")
    want = {
        "NCCL_HOSTID": f"scape-rank-{rank}",  # each rank its own host: no duplicate-GPU refusal
        "NCCL_IB_DISABLE": "1",  # the network transport is then TCP sockets
        "NCCL_SHM_DISABLE": "1",
        "NCCL_P2P_DISABLE": "1",
        "NCCL_SOCKET_IFNAME": "lo",  # torchrun's ranks on this machine
    }
    return {k: v for k, v in want.items() if k == "NCCL_HOSTID" or k not in env}


def gpu_sharing(proc: Path = Path("/proc")) -> str:
    """How ranks on one GPU share it: "mps" where CUDA's multi-process service runs (its
    control daemon or server among this machine's processes), their kernels side by side;
    else "time-sliced", the driver's default, one context at a time. Timings differ by the
    mode: on the H200 a 64 KiB all-gather on 4 ranks over the netbed took 14.5 ms time-sliced
    and 0.28 ms under MPS (results/gpu-sessions/session13). A reading of the process list,
    not of the clients: a daemon for another CUDA_MPS_PIPE_DIRECTORY reads as "mps" too, and
    one outside this PID namespace as "time-sliced"."""
    for comm in proc.glob("[0-9]*/comm"):
        try:
            if comm.read_text().startswith("nvidia-cuda-mps"):
                return "mps"
        except OSError:  # the process ended meanwhile
            continue
    return "time-sliced"


def backend_env(backend: str, share_gpu: bool, netbed=None) -> dict[str, str]:
    """The variables a launcher gives its ranks: the backend they join with (SCAPE_BACKEND),
    whether they share the GPUs (`sharing`) and the testbed they run on (`netbed`, a
    NetbedSpec or None), so that rank 0's summary says how the run was launched."""
    return {"SCAPE_BACKEND": backend, SHARE_ENV: "1" if share_gpu else "0",
            NETBED_ENV: "" if netbed is None else str(netbed)}


def launched_as(env: Mapping[str, str] | None = None) -> dict:
    """How this rank was launched (`backend_env`'s variables read back): backend, share_gpu,
    netbed (None: on the host's own links)."""
    env = os.environ if env is None else env
    return {"backend": env.get("SCAPE_BACKEND", "gloo"), "share_gpu": sharing(env),
            "netbed": env.get(NETBED_ENV) or None}


def prepare_rank() -> None:
    """Set this rank's NCCL variables (before init_process_group reads them)."""
    os.environ.update(shared_gpu_env(os.environ))


def nccl_device():
    """An NCCL rank's GPU (`local_gpu`), made current, its sharing variables set first."""
    import torch

    prepare_rank()
    device = torch.device("cuda", local_gpu())
    torch.cuda.set_device(device)
    return device


def rank_gpu(local_rank: int, gpus: int) -> int:
    """The GPU a rank computes on: its own, or round-robin when ranks outnumber GPUs."""
    if gpus < 1:
        raise ValueError("no GPU to place the rank on")
    return local_rank % gpus


def local_gpu() -> int:
    """This process's GPU: `rank_gpu` of its LOCAL_RANK (torchrun's, or 0 on a netbed node)
    over the GPUs torch sees."""
    import torch

    return rank_gpu(int(os.environ.get("LOCAL_RANK", "0")), torch.cuda.device_count())
