"""The real optimizer on gloo, 2-3 ranks on CPU (marker `dist`): compression off equals dense,
ranks stay bitwise identical, bytes follow the plan, SCAPE's masks behave as DESIGN section 5
says, resume is exact, and dead or missing peers end in a clear error, not a hang."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from scape.plan import make_config
from tests.dist_util import free_port, run_ranks

pytestmark = pytest.mark.dist
REPO = Path(__file__).resolve().parents[1]
SPECS = [
    ("dense-ddp", {}), ("dense-adams", {}), ("dense-adamw", {}),
    ("dense-ddp", {"optimizer": "adamw"}),
    ("quantized", {"bits": 8}), ("quantized", {"bits": 4}), ("quantized", {"bits": 1}),
    ("quantized", {"bits": 32}), ("topk", {"sparsity": 0.99}), ("topk", {"sparsity": 0.0}),
    ("scalecom", {"sparsity": 0.99}), ("scalecom", {"sparsity": 0.0}),
    ("scape-partitioned", {"sparsity": 0.9}), ("scape-partitioned", {"sparsity": 0.99}),
    ("scape-partitioned", {"sparsity": 0.99, "update_scope": "all", "error_feedback": False}),
    ("scape-partitioned", {"sparsity": 0.99, "refresh_every": 3, "score": "m_over_sqrt_v"}),
    ("scape-partitioned", {"sparsity": 0.0}), ("scape-partitioned", {"sparsity": 1e-9}),
    ("scape-partitioned", {"sparsity": 0.99, "extra": {"unmasked_moment": "local"}}),
    ("scape-partitioned", {"sparsity": 0.99, "sync": "momentum"}),
    ("scape-partitioned", {"sparsity": 1e-9, "sync": "momentum"}),
    ("scape-partitioned", {"sparsity": 0.99, "sync": "momentum", "select_per": "tensor",
               "density_warmup_steps": 3}),
    # global-norm clipping (0.01 clips every step of these runs): sharded schemes sum the
    # squared norm over ranks, the others hold the whole synced gradient
    ("dense-adams", {"clip_grad": 0.01}), ("dense-ddp", {"optimizer": "adams", "clip_grad": 0.01}),
    ("topk", {"sparsity": 0.99, "clip_grad": 0.01}),
    ("scape-partitioned", {"sparsity": 0.99, "clip_grad": 0.01}),
    ("scape-partitioned", {"sparsity": 0.99, "sync": "momentum", "clip_grad": 0.01}),
]
STEPS = 5


def _config(name, opts, **kw):
    from scape.train.loop import TrainConfig

    return TrainConfig(scheme=make_config(name, **opts), steps=STEPS, micro_batch=4, seq_len=32,
                       eval_every=0, checksum=True, timeout_s=30, **kw)


def _run_specs(specs):
    import torch.distributed as dist

    from scape.train.loop import train

    out = {}
    for name, opts in specs:
        r = train(_config(name, opts))
        s = r["scheme"]
        out[_key(name, opts)] = {
            "losses": [row["loss"] for row in r["rows"]],
            "crc": [row["param_crc"] for row in r["rows"]],
            "master": s.flat.master.clone(),
            "records": [row["collectives"] for row in r["rows"]],
            "plan": s.plan(), "config": s.cfg, "n": s.n,
            "sparsity": opts.get("sparsity", 0.0),
            "dense_steps": [t for t in range(1, STEPS + 1) if getattr(s, "is_dense", None)
                            and s.is_dense(t)],
            "history": [m.clone() for m in getattr(s, "history", [])],
            "chosen": [m.clone() for m in getattr(s, "chosen", [])],
            "density": [s.density_at(t) for t in range(1, STEPS + 2)]
            if hasattr(s, "density_at") else None,
        }
        dist.barrier()
    return out


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory):
    results = run_ranks(_run_specs, 2, (SPECS,), tmp_path_factory.mktemp("two"))
    for r in results:
        assert "error" not in r, r.get("trace")
    return results


def _key(name, opts):
    return (name, repr(sorted(opts.items())))


def test_ranks_hold_identical_parameters_after_every_step(two_ranks):
    a, b = two_ranks
    for key in a:
        assert a[key]["crc"] == b[key]["crc"], key
        assert torch.equal(a[key]["master"], b[key]["master"]), key


@pytest.mark.parametrize(("off", "dense"), [
    (("topk", {"sparsity": 0.0}), ("dense-ddp", {})),
    (("scalecom", {"sparsity": 0.0}), ("dense-ddp", {})),
    (("quantized", {"bits": 32}), ("dense-ddp", {})),
    (("scape-partitioned", {"sparsity": 0.0}), ("dense-adams", {})),
    # SCAPE's sparse code path with a full mask (density 1 - 1e-9 rounds to every element)
    (("scape-partitioned", {"sparsity": 1e-9}), ("dense-adams", {})),
    # the authors' momentum sync with a full mask is dense AdamS too
    (("scape-partitioned", {"sparsity": 1e-9, "sync": "momentum"}), ("dense-adams", {})),
    (("dense-adams", {"clip_grad": 0.01}),
     ("dense-ddp", {"optimizer": "adams", "clip_grad": 0.01})),
])
def test_compression_off_matches_dense(two_ranks, off, dense):
    """Also: clipping by the sharded norm is clipping by the whole one."""
    got, ref = two_ranks[0][_key(*off)], two_ranks[0][_key(*dense)]
    assert got["losses"] == pytest.approx(ref["losses"], abs=1e-6)
    assert torch.allclose(got["master"], ref["master"], atol=1e-6, rtol=0)


def _warmup_ops(res, t):
    """A density warm-up step's ops: the plan at that step's density, and the mask all-gather
    at the next step's (it carries the next mask)."""
    from dataclasses import replace

    from scape.plan import plan
    from scape.schemes.base import RUNTIME_DTYPES

    def at(step):
        cfg = replace(res["config"], sparsity=1 - res["density"][step - 1])
        return plan(cfg, res["n"], 2, RUNTIME_DTYPES).steps[0][1].ops

    return [op for op in at(t) if op.name != "mask all-gather"] + [
        op for op in at(t + 1) if op.name == "mask all-gather"]


def test_bytes_follow_the_plan(two_ranks):
    from scape.plan import Plan

    for key, res in two_ranks[0].items():
        plan: Plan = res["plan"]
        kinds = [s for _, s in plan.steps]
        sparse = kinds[0]
        dense = kinds[1] if len(kinds) > 1 else None
        for t, records in enumerate(res["records"], start=1):
            if t in res["dense_steps"] and res["sparsity"] > 0:
                if dense is None:  # the first (dense) step of SCAPE without refresh
                    continue
                ops = dense.ops
            elif res["density"] and res["density"][t - 1 : t + 1] != res["density"][-2:]:
                ops = _warmup_ops(res, t)
            else:
                ops = sparse.ops
            counted: dict[str, int] = {}
            for name, collective, size, seconds, wait in records:
                assert seconds >= 0 and wait >= 0
                counted[name] = counted.get(name, 0) + size
                assert collective in {op.collective for op in ops if op.name == name}
            assert counted == {op.name: pytest.approx(op.size_bytes) for op in ops}, (key, t)


def test_clipping_changes_the_run(two_ranks):
    """A clip far below the gradient norm must change every clipped run (a check that can
    fail: an ignored clip_grad leaves the parameters equal)."""
    for name, opts in [("dense-adams", {}), ("topk", {"sparsity": 0.99}),
                       ("scape-partitioned", {"sparsity": 0.99})]:
        plain = two_ranks[0][_key(name, opts)]["master"]
        clipped = two_ranks[0][_key(name, {**opts, "clip_grad": 0.01})]["master"]
        assert not torch.allclose(plain, clipped, atol=1e-6), name


def test_scape_sends_no_second_moment(two_ranks):
    res = two_ranks[0][_key("scape-partitioned", {"sparsity": 0.99})]
    names = {record[0] for step in res["records"] for record in step}
    assert names == {"grad reduce-scatter", "param all-gather", "compact grad reduce-scatter",
                     "mask all-gather"}


def _run_masks(opts):
    import torch.distributed as dist

    from scape.train.loop import train

    r = train(_config("scape-partitioned", opts))
    s = r["scheme"]
    dist.barrier()
    return {"history": [m.clone() for m in s.history], "chosen": [m.clone() for m in s.chosen]}


# the second in `make test-long` only (about 10 s on 2 cores): CI's 6 minutes
@pytest.mark.parametrize("opts", [
    {"sparsity": 0.99},
    pytest.param({"sparsity": 0.99, "sync": "momentum", "select_per": "tensor"},
                 marks=pytest.mark.slow),
])
def test_scape_masks_identical_and_one_step_late(tmp_path, opts):
    ranks = run_ranks(_run_masks, 3, (opts,), tmp_path)
    for r in ranks:
        assert "error" not in r, r.get("trace")
    # every rank uses the same global mask at every sparse step
    for step in range(len(ranks[0]["history"])):
        for r in ranks[1:]:
            assert torch.equal(r["history"][step], ranks[0]["history"][step])
    # the mask used at step t+1 is the union of the shards' choices at step t
    for t, used in enumerate(ranks[0]["history"], start=1):  # used at step t + 1
        chosen = torch.cat([r["chosen"][t - 1] for r in ranks])
        assert torch.equal(used, chosen)
    assert len(ranks[0]["history"]) == STEPS - 1  # step 1 is dense


def _run_resume(out: str, split: bool, name: str, opts: dict):
    import torch.distributed as dist

    from scape.train.loop import train

    cfg = _config(name, opts, out=out)
    if split:
        train(cfg, steps_this_run=3)
        dist.barrier()
        from dataclasses import replace

        r = train(replace(cfg, resume=True))
    else:
        r = train(cfg)
    dist.barrier()
    return {"crc": [row["param_crc"] for row in r["rows"]],
            "losses": [row["loss"] for row in r["rows"]],
            "master": r["scheme"].flat.master.clone()}


# two of the four in the default run (about 9 s each on 2 cores), all four in `make test-long`:
# the default test run stays under CI's 6 minutes
@pytest.mark.parametrize(("name", "opts"), [
    ("scape-partitioned", {"sparsity": 0.99, "error_feedback": True}),
    pytest.param("scape-partitioned",
                 {"sparsity": 0.99, "sync": "momentum", "density_warmup_steps": 4},
                 marks=pytest.mark.slow),
    ("quantized", {"bits": 4}),
    pytest.param("scalecom", {"sparsity": 0.99}, marks=pytest.mark.slow),
])
def test_resume_continues_exactly(tmp_path, name, opts):
    whole = run_ranks(_run_resume, 2, (str(tmp_path / "a"), False, name, opts), tmp_path / "ra")
    split = run_ranks(_run_resume, 2, (str(tmp_path / "b"), True, name, opts), tmp_path / "rb")
    for w, s in zip(whole, split, strict=True):
        assert "error" not in w and "error" not in s, (w.get("trace"), s.get("trace"))
        assert s["crc"] == w["crc"][3:]  # the resumed run made steps 4 and 5
        assert s["losses"] == w["losses"][3:]
        assert torch.equal(s["master"], w["master"])


def _cli(*args, env=None, timeout=120):
    return subprocess.run([sys.executable, "-m", "cli", *args], cwd=REPO, capture_output=True,
                          text=True, timeout=timeout, env={**os.environ, **(env or {})})


def test_train_cli_json(tmp_path):
    r = _cli("train", "--scheme", "scape-partitioned:0.99", "--steps", "6", "--nprocs", "2",
             "--micro-batch", "4", "--seq-len", "32", "--eval-every", "3", "--out",
             str(tmp_path), "--format", "json")
    assert r.returncode == 0, r.stderr
    (summary,) = json.loads(r.stdout)  # one row, like every command's JSON
    for key in ("final_train_loss", "final_val_loss", "median_step_s", "bytes_per_step"):
        assert summary[key] is not None and summary[key] > 0
    assert (tmp_path / "log.jsonl").read_text().count("\n") == 6
    # rank 0 wrote how the run was launched into the summary, once; the CLI prints that file
    saved = json.loads((tmp_path / "summary.json").read_text())
    assert (saved["backend"], saved["share_gpu"], saved["netbed"]) == ("gloo", False, None)
    assert {k: summary[k] for k in ("backend", "share_gpu", "netbed")} == {
        k: saved[k] for k in ("backend", "share_gpu", "netbed")}


def test_ranks_read_how_they_were_launched():
    """The launcher's variables reach rank 0's summary as they were given."""
    from scape.netbed import NetbedSpec
    from scape.train.devices import backend_env, launched_as

    spec = NetbedSpec(rate_mbit=200.0)
    env = backend_env("nccl", True, spec)
    assert launched_as(env) == {"backend": "nccl", "share_gpu": True, "netbed": str(spec)}
    assert launched_as({}) == {"backend": "gloo", "share_gpu": False, "netbed": None}


def test_dead_rank_ends_every_rank_with_a_clear_error(tmp_path):
    t0 = time.perf_counter()
    r = _cli("train", "--steps", "50", "--nprocs", "2", "--micro-batch", "2", "--seq-len", "32",
             "--timeout", "10", "--out", str(tmp_path),
             env={"SCAPE_FAULT_RANK": "1", "SCAPE_FAULT_STEP": "3"})
    elapsed = time.perf_counter() - t0
    assert r.returncode != 0
    assert r.stderr.count("\n") == 1 and "training failed" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr
    assert elapsed < 10 + 30  # the timeout plus start-up, never a hang


def _lonely():
    from scape.train.loop import init_distributed

    t0 = time.perf_counter()
    try:
        init_distributed(3.0)
    except Exception as exc:  # the peer never arrives
        from scape.train.launch import describe_failure

        return {"message": describe_failure(exc, 3.0), "elapsed": time.perf_counter() - t0}
    return {"message": None, "elapsed": time.perf_counter() - t0}


def test_missing_peer_times_out_with_a_clear_error():
    env = dict(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()), RANK="0", WORLD_SIZE="2")
    code = ("import json, tests.test_dist as t; print(json.dumps(t._lonely()))")
    r = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True,
                       timeout=60, env={**os.environ, **env})
    result = json.loads(r.stdout.strip().splitlines()[-1])
    assert result["message"] and "did not arrive" in result["message"]
    assert result["elapsed"] < 3.0 + 10


# SIGTERM in `make test-long` only (the same path as SIGINT, about 15 s): CI's 6 minutes
@pytest.mark.parametrize("sig", [pytest.param(signal.SIGTERM, marks=pytest.mark.slow),
                                 signal.SIGINT])
def test_a_signal_ends_torchrun_and_every_rank(tmp_path, sig):
    """SIGTERM or SIGINT to `scape train` mid-run: one line, exit 128+N within seconds, and no
    process of this run (its OUT folder is on every rank's command line) left behind."""
    proc = _training(tmp_path, 2, "--nprocs", "2", "--micro-batch", "2", "--seq-len", "32",
                     "--eval-every", "0", "--out", str(tmp_path))
    t0 = time.monotonic()
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=30)
    elapsed = time.monotonic() - t0
    assert proc.returncode == 128 + sig, err
    assert err.count("\n") == 1 and "every process it started was ended" in err, err
    assert elapsed < 10
    assert _processes_naming(str(tmp_path)) == []


def _training(out: Path, lines: int, *args: str) -> subprocess.Popen:
    """`scape train --steps 2000 ARGS` started in the background, once its log (in `out`)
    holds `lines` steps."""
    proc = subprocess.Popen([sys.executable, "-m", "cli", "train", "--steps", "2000",
                             *args], cwd=REPO, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    log = out / "log.jsonl"
    deadline = time.monotonic() + 90
    while not (log.exists() and log.read_text().count("\n") >= lines):
        assert proc.poll() is None and time.monotonic() < deadline, "training never started"
        time.sleep(0.2)
    return proc


def _processes_naming(text: str) -> list[str]:
    """Command lines of live processes that contain `text` (from /proc)."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            args = cmdline.read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:  # ended while we looked
            continue
        if text in args:
            found.append(args)
    return found


# long (24 s on 2 cores): resume is also checked by test_resume_continues_exactly, a
# signal's end by test_a_signal_ends_torchrun_and_every_rank; `make test-long` runs it
@pytest.mark.slow
def test_resume_after_an_interrupt_continues_from_the_last_checkpoint(tmp_path):
    """Checkpoints every 3 steps; SIGTERM mid-run; --resume says from which step, redoes the
    steps logged after it, and leaves one log row per step. Nothing to resume is an error."""
    common = ["--nprocs", "2", "--micro-batch", "2", "--seq-len", "32", "--eval-every", "0",
              "--out", str(tmp_path), "--checkpoint-every", "3"]
    proc = _training(tmp_path, 8, *common)
    log = tmp_path / "log.jsonl"
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=30)
    logged = [json.loads(line)["step"] for line in log.read_text().splitlines()]
    last = max(s for s in logged if s % 3 == 0)
    # the newest checkpoint: the last logged multiple of 3, or the one before it when the
    # signal landed between that step's log line and its (atomic) checkpoint save
    r = _cli("train", "--steps", str(last + 2), "--resume", *common)
    assert r.returncode == 0, r.stderr
    found = re.search(r"resuming from step (\d+)", r.stderr)
    assert found, r.stderr
    checkpoint = int(found.group(1))
    assert checkpoint in (last, last - 3) and checkpoint > 0
    assert f"the log keeps steps 1-{checkpoint}" in r.stderr
    steps = [json.loads(line)["step"] for line in log.read_text().splitlines()]
    assert steps == list(range(1, last + 3))  # each step once, in order
    done = _cli("train", "--steps", str(last + 2), "--resume", *common)
    assert done.returncode == 2 and "already at step" in done.stderr
    empty = _cli("train", "--steps", "5", "--resume", *common[:-4], "--out",
                 str(tmp_path / "none"))
    assert empty.returncode == 2 and "nothing to resume" in empty.stderr


# long (20 s: it waits out a 10 s timeout); a missing peer's timeout is also checked by
# test_missing_peer_times_out_with_a_clear_error; `make test-long` runs it
@pytest.mark.slow
def test_a_stopped_peer_ends_the_run_within_one_and_a_half_timeouts(tmp_path):
    """SIGSTOP one rank mid-run: the others time out after --timeout, and the launcher ends
    the rest (the stopped rank too) at once instead of waiting for torchrun's own teardown."""
    from scape.train.launch import descendants

    timeout = 10
    proc = _training(tmp_path, 3, "--nprocs", "2", "--micro-batch", "2", "--seq-len", "32",
                     "--eval-every", "0", "--timeout", str(timeout), "--out", str(tmp_path))
    ranks = [pid for pid in descendants(proc.pid)
             if b"scape.train.worker" in Path(f"/proc/{pid}/cmdline").read_bytes()
             and b"torch.distributed.run" not in Path(f"/proc/{pid}/cmdline").read_bytes()]
    assert len(ranks) == 2
    os.kill(max(ranks), signal.SIGSTOP)
    t0 = time.monotonic()
    _, err = proc.communicate(timeout=120)
    elapsed = time.monotonic() - t0
    assert proc.returncode == 2 and "did not arrive or answer" in err, err
    assert elapsed < 1.5 * timeout, elapsed
    assert _processes_naming(str(tmp_path)) == []


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="prctl PR_SET_PDEATHSIG")
def test_a_kill_9_of_the_launcher_ends_torchrun_and_every_rank(tmp_path):
    """Issue 45: kill -9 of `scape train` (no handler runs) left torchrun and both ranks
    training to the end. With the parent-death signal they end within seconds."""
    out = tmp_path / "run"
    proc = _training(out, 2, "--nprocs", "2", "--micro-batch", "2", "--seq-len", "32",
                     "--eval-every", "0", "--out", str(out))
    from scape.train.cleanup import run_processes  # torchrun and ranks, by the run's config

    assert run_processes(out), "no rank of the run found"
    t0 = time.monotonic()
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)
    while run_processes(out) and time.monotonic() - t0 < 30:
        time.sleep(0.1)
    left = run_processes(out)
    for pid in left:  # never leave them behind, whatever the test says
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    assert not left, f"still running {time.monotonic() - t0:.1f} s after kill -9: {left}"
    print(f"no process of the run left {time.monotonic() - t0:.2f} s after kill -9")
