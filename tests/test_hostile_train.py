"""Hostile input (issue 16), training runs: an --out holding another run, a resume with other
settings or past the run's schedule, a broken config.json, RANK/WORLD_SIZE not set by torchrun,
and an ignored SIGHUP. The shared contract: tests/hostile_util.py."""

from __future__ import annotations

import json

import pytest

from tests.hostile_util import _refused
from tests.test_cli import scape


def test_train_keeps_other_runs_apart(capsys, tmp_path):
    """An --out holding another run is refused without --resume (not overwritten); --resume
    with other settings than the checkpoint's run is refused, naming them."""
    other = tmp_path / "run"
    (other / "checkpoint").mkdir(parents=True)
    code, _out, err = scape(capsys, "train", "--steps", "2", "--out", str(other))
    _refused(code, err, "holds another run (checkpoint)")
    (other / "config.json").write_text(json.dumps({"model": "tiny-gpt", "lr": 0.5}))
    code, _out, err = scape(capsys, "train", "--steps", "2", "--out", str(other), "--resume")
    _refused(code, err, "lr: 0.5 then, 0.001 now")


def test_a_resume_keeps_the_runs_schedule_and_a_broken_config_is_refused(capsys, tmp_path,
                                                                        monkeypatch):
    """--steps set the learning-rate schedule: a resume may stop earlier on it (stop_at), not
    go past it; a config.json that cannot be read cannot vouch for the settings; RANK and
    WORLD_SIZE alone (a job script's) do not make scape train a torchrun rank."""
    from cli.train import _refuse_changed, _resumed_steps
    from profiles import UserError
    from scape.train.launch import under_torchrun
    from scape.train.loop import TrainConfig

    cfg = TrainConfig(steps=5, warmup_steps=1)
    assert _resumed_steps(cfg, {"steps": 5}) is cfg
    early = _resumed_steps(cfg, {"steps": 8})
    assert (early.steps, early.stop_at) == (8, 5)
    assert early.lr_at(5) != cfg.lr_at(5)  # step 5 of the run's 8-step schedule, not of 5
    with pytest.raises(UserError, match="goes past the run's 3"):
        _resumed_steps(cfg, {"steps": 3})
    (tmp_path / "checkpoint").mkdir()
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(UserError, match=r"config\.json cannot be read"):
        _refuse_changed(tmp_path, cfg)
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "1")
    monkeypatch.delenv("TORCHELASTIC_RUN_ID", raising=False)
    assert not under_torchrun()
    code, _out, err = scape(capsys, "train", "--steps", "1", "--out", str(tmp_path / "r"))
    _refused(code, err, "RANK and WORLD_SIZE are set, but not by torchrun")
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "x")
    assert under_torchrun()


def test_an_ignored_sighup_stays_ignored():
    """`nohup scape ...` ignores SIGHUP before scape starts: the run must outlive its terminal
    (the review caught SIGHUP ending such a run); a default SIGHUP ends it with cleanup."""
    import signal

    from vocabulary.errors import catch_terminating, raise_terminated, restore

    before = signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        previous = catch_terminating()
        assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
        assert signal.getsignal(signal.SIGTERM) is raise_terminated
        restore(previous)
        signal.signal(signal.SIGHUP, signal.SIG_DFL)
        previous = catch_terminating()
        assert signal.getsignal(signal.SIGHUP) is raise_terminated
        restore(previous)
    finally:
        signal.signal(signal.SIGHUP, before)


def test_a_resume_keeps_the_runs_checkpoint_period_and_reads_its_log_before_training(
        capsys, tmp_path):
    """Issue 45: --resume without --checkpoint-every keeps the run's own period (it fell back
    to 100, and a second interruption lost every step since the last old checkpoint); the log
    is read before training, so a damaged line is refused with its file and line, and what the
    log keeps is said as it is; an unwritable checkpoint folder is refused before training."""
    import os

    from cli.train import _check_checkpoint_folder, _config_int, _log_kept
    from profiles import UserError
    from scape.train.loop import keep_log

    (tmp_path / "config.json").write_text(json.dumps({"steps": 50, "checkpoint_every": 5}))
    assert _config_int(tmp_path, "checkpoint_every", 0) == 5
    assert _config_int(tmp_path, "steps", 1) == 50
    (tmp_path / "config.json").write_text(json.dumps({"checkpoint_every": True}))
    assert _config_int(tmp_path, "checkpoint_every", 0) is None  # a bool is not a period
    log = tmp_path / "log.jsonl"
    log.write_text("".join(json.dumps({"step": s, "loss": 1.0}) + "\n" for s in (1, 2, 4, 7)))
    assert _log_kept(log, 4) == "the log keeps steps 1-4 (1 of the steps up to 4 are not in it)"
    assert _log_kept(log, 0) == f"the log ({log}) holds no step up to 0"
    keep_log(log, 4)
    assert [json.loads(x)["step"] for x in log.read_text().splitlines()] == [1, 2, 4]
    log.write_text(json.dumps({"step": 1}) + "\n{broken\n")
    with pytest.raises(UserError, match=r"log\.jsonl: line 2 is not a step of the log"):
        _log_kept(log, 6)
    with pytest.raises(UserError, match="line 2"):
        keep_log(log, 6)
    assert log.read_text().endswith("{broken\n")  # refused: the log is left as it was
    if os.geteuid() != 0:  # root writes anywhere
        locked = tmp_path / "locked"
        (locked / "checkpoint").mkdir(parents=True)
        (locked / "checkpoint").chmod(0o500)
        with pytest.raises(UserError, match=r"checkpoint folder .* cannot be written"):
            _check_checkpoint_folder(locked)
    blocked = tmp_path / "blocked"
    blocked.mkdir()
    (blocked / "checkpoint").write_text("a file where the folder goes")
    with pytest.raises(UserError, match=r"checkpoint folder .* cannot be written"):
        _check_checkpoint_folder(blocked)


def test_cleanup_ends_what_a_killed_run_left_and_keeps_what_resume_needs(capsys, tmp_path):
    """Issue 45: `scape train --cleanup DIR` ends the processes that name the run's folder and
    removes half-written files, keeping checkpoints, log and config; it trains nothing."""
    import subprocess
    import sys
    import time

    run = tmp_path / "run"
    (run / "checkpoint").mkdir(parents=True)
    (run / "checkpoint" / "rank0-step4.pt").write_bytes(b"kept")
    (run / "checkpoint" / "rank0-step6.tmp").write_bytes(b"half")
    (run / ".summary.json.x1.tmp").write_text("{")
    (run / "log.jsonl").write_text(json.dumps({"step": 4}) + "\n")
    (run / "config.json").write_text("{}")
    # a rank of the run as torchrun starts it (its module and the run's config), and a
    # process that merely names a file of the folder, which is not the run's and stays
    stray = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)",
                              "scape.train.worker", str((run / "config.json").resolve())])
    bystander = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)",
                                  str(run / "log.jsonl")])
    try:
        time.sleep(0.3)
        code, out, err = scape(capsys, "train", "--cleanup", str(run))
        assert code == 0, err
        assert stray.wait(timeout=10) is not None  # ended
        assert f"ended 1 process(es) ({stray.pid})" in out
        assert "removed 2 half-written file(s)" in out
        assert (run / "checkpoint" / "rank0-step4.pt").exists()
        assert not (run / "checkpoint" / "rank0-step6.tmp").exists()
        assert (run / "log.jsonl").exists() and (run / "config.json").exists()
        assert bystander.poll() is None  # not the run's: left alone
    finally:
        for p in (stray, bystander):
            if p.poll() is None:
                p.kill()
    code, _, err = scape(capsys, "train", "--cleanup", str(tmp_path / "nowhere"))
    assert code == 2 and "no such folder" in err
    code, _, err = scape(capsys, "train", "--cleanup", "")  # not the current folder
    assert code == 2 and "no such folder" in err
    code, _, err = scape(capsys, "train", "--cleanup", str(tmp_path))  # not a run's folder
    assert code == 2 and "holds no config.json" in err


@pytest.mark.parametrize("model, said", [
    ("qwen3-30b-a3b", "routed experts ([moe])"),
    ("deepseek-v3", "latent attention ([mla])"),
    ("gpt-oss-20b", "a sliding attention window")])
def test_train_refuses_a_model_its_dense_transformer_cannot_build(capsys, model, said):
    """scape train builds dense transformers with full attention: a model with experts, latent
    attention or a sliding window is refused before any rank starts, not trained as another
    model."""
    code, _out, err = scape(capsys, "train", "-m", model, "--steps", "1")
    _refused(code, err, said)
    assert "simulate, compare or plan" in err
