"""Ranks sharing a GPU under NCCL (scape/train/devices.py, issue 15): what each rank sets before
it joins, where it computes, and the refusals before any rank starts. The NCCL run itself needs
a GPU (the device session's script, bench/gpu_session.sh); this is what the CPUs can check."""

from __future__ import annotations

import pytest

from profiles import UserError
from scape.train.devices import SHARE_ENV, rank_gpu, shared_gpu_env
from scape.train.launch import check_backend


def test_each_rank_is_its_own_nccl_host_over_sockets():
    env = {SHARE_ENV: "1", "RANK": "3"}
    got = shared_gpu_env(env)
    assert got == {"NCCL_HOSTID": "scape-rank-3", "NCCL_IB_DISABLE": "1",
                   "NCCL_SHM_DISABLE": "1", "NCCL_P2P_DISABLE": "1", "NCCL_SOCKET_IFNAME": "lo"}
    # an interface the user chose (a netbed veth) is kept; the host id is always the rank's
    kept = shared_gpu_env({**env, "NCCL_SOCKET_IFNAME": "eth0", "NCCL_HOSTID": "x"})
    assert kept["NCCL_HOSTID"] == "scape-rank-3" and "NCCL_SOCKET_IFNAME" not in kept
    assert shared_gpu_env({"RANK": "3"}) == {} and shared_gpu_env({SHARE_ENV: "0"}) == {}


def test_ranks_take_the_gpus_round_robin(monkeypatch):
    import torch

    from scape.train.devices import local_gpu

    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setenv("LOCAL_RANK", "3")
    assert local_gpu() == 1  # torchrun's LOCAL_RANK over the GPUs torch sees
    assert [rank_gpu(r, 1) for r in range(4)] == [0, 0, 0, 0]
    assert [rank_gpu(r, 2) for r in range(4)] == [0, 1, 0, 1]
    assert [rank_gpu(r, 8) for r in range(8)] == list(range(8))
    with pytest.raises(ValueError):
        rank_gpu(0, 0)


def test_sharing_is_for_nccl_ranks():
    with pytest.raises(UserError, match="--share-gpu puts NCCL ranks on shared GPUs"):
        check_backend("gloo", 2, share_gpu=True)
    check_backend("gloo", 2)  # unchanged without it


@pytest.mark.parametrize("name", ["tiny-gpt", "tiny-llama"])
def test_model_makes_its_positions_on_the_input_device(name):
    """Positions and rotary angles follow the input, not torch's default device: a rank that
    sets none (calibrate collectives' interference check on a GPU) once failed with "index is
    on cpu" (a lent H100, 2026-11-26). The meta device stands in for the GPU here."""
    import torch

    from profiles import load_model
    from scape.train.model import GPT

    with torch.device("meta"):
        model = GPT(load_model(name))
    idx = torch.zeros(2, 16, dtype=torch.long, device="meta")  # [b, s]
    assert model(idx, idx).device.type == "meta"


def test_nccl_on_the_netbed_shares_the_gpu_over_the_veth():
    """Each netbed namespace is a one-rank node: NCCL's ranks there need --share-gpu, and both
    gloo and NCCL's sockets bind the namespace's veth (a user's choice is kept)."""
    from scape.netbed import Netbed, NetbedSpec

    spec = NetbedSpec.parse("rate=100mbit")
    with pytest.raises(UserError, match="give --share-gpu"):
        check_backend("nccl", 2, spec, share_gpu=False)
    env = Netbed(spec, 2).rank_env(1, {SHARE_ENV: "1"})  # nothing created before __enter__
    assert env["NCCL_SOCKET_IFNAME"] == env["GLOO_SOCKET_IFNAME"] == "eth0"
    assert shared_gpu_env(env)["NCCL_HOSTID"] == "scape-rank-1"
    assert "NCCL_SOCKET_IFNAME" not in shared_gpu_env(env)  # the veth stays, not loopback


def test_the_gpu_sharing_mode_is_mps_only_where_its_daemon_runs(tmp_path):
    """Profiles and validations record how ranks shared a GPU: under CUDA's multi-process
    service (its daemon among the processes) or in the driver's time slices."""
    from scape.train.devices import gpu_sharing

    for pid, comm in (("1", "systemd\n"), ("77", "python3\n"), ("self", "nvidia-cuda-mps\n")):
        (tmp_path / pid).mkdir()
        (tmp_path / pid / "comm").write_text(comm)
    assert gpu_sharing(tmp_path) == "time-sliced"  # only numbered entries are processes
    (tmp_path / "4242").mkdir()
    (tmp_path / "4242" / "comm").write_text("nvidia-cuda-mps-control\n")
    assert gpu_sharing(tmp_path) == "mps"


def test_the_bitmap_candidates_the_gpu_session_times_give_the_bytes_in_use(tmp_path):
    """bench/gpu_compute.py --parts bits times other ways to make and read the mask's bitmap;
    they are worth timing only if they give the same bytes (checked on this CPU, small n)."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    out = tmp_path / "bits.json"
    repo = Path(__file__).resolve().parents[1]
    subprocess.run([sys.executable, str(repo / "bench" / "gpu_compute.py"), "--quick",
                    "--parts", "bits", "--out", str(out)], check=True, cwd=repo,
                   capture_output=True, timeout=300)
    rows = json.loads(out.read_text())["bits"]
    assert [r["candidates_equal"] for r in rows] == [True, True]
    assert all(r["pack sum (in use, MSB)"] > 0 for r in rows)


def test_the_kernel_probe_runs_and_its_host_figures_grow_with_the_experts(tmp_path):
    """bench/kernel_probe.py (for a lent GPU) at toy sizes on this CPU: it names the machine,
    times causal attention per sequence length, and the host time of a SequentialMLP-shaped
    loop grows with the experts it runs (the slope it reports is that growth); an unknown part
    is refused."""
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    out = tmp_path / "probe.json"
    repo = Path(__file__).resolve().parents[1]
    script = str(repo / "bench" / "kernel_probe.py")
    # one intra-op thread and five repeats: the host figures are medians of wall times, and
    # beside another test worker on a 2-core host, torch's own threads and a single
    # descheduled repeat made the 1-expert loop read slower than the 32-expert one
    quiet = {**os.environ, "OMP_NUM_THREADS": "1"}
    subprocess.run([sys.executable, script, "--quick", "--repeats", "5", "--out", str(out)],
                   check=True, cwd=repo, capture_output=True, timeout=300, env=quiet)
    got = json.loads(out.read_text())
    assert got["options"] == {"quick": True, "parts": ["env", "attention", "host"],
                              "repeats": 5}
    assert got["env"]["torch"] and got["env"]["device"] in ("cpu", "cuda")
    rows = [r for r in got["attention"] if "fwd_tflops" in r]
    assert {r["seq"] for r in rows} == {128, 256} and all(r["fwd_tflops"] > 0 for r in rows)
    loop = {int(k): v for k, v in got["host"]["sequential_us"].items()}
    assert loop[32] > loop[1] and got["host"]["sequential_us_per_expert"] > 0
    bad = subprocess.run([sys.executable, script, "--quick", "--parts", "env,nope", "--out",
                          str(tmp_path / "x.json")], cwd=repo, capture_output=True, text=True,
                         timeout=60)
    assert bad.returncode == 2 and "unknown part(s) nope" in bad.stderr
