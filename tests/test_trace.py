"""`scape calibrate trace` (issue 41, part 2): a Kineto trace read as far as it is valid, its
classes fitted into a hardware profile that `simulate` then prices the traced step on."""

from __future__ import annotations

import gzip
import json

import pytest

from calibration.trace import read_trace
from calibration.trace_fit import classes_s
from profiles import UserError, load_hardware, load_model
from tests.test_cli import scape
from tests.trace_util import kineto, write

H100, L18 = "dgx-h100", "llama-1.8b"


@pytest.fixture
def profile_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("SCAPE_PROFILE_DIR", str(tmp_path / "profiles"))
    return tmp_path / "profiles"


def test_kernels_are_classed_per_step_and_overlaps_count_once(tmp_path):
    secs = {"gemm": 0.1, "attention": 0.02, "memory": 0.03, "optimizer": 0.004,
            "communication": 0.01}
    doc = kineto(secs, steps=3)
    # a second GEMM stream overlapping the first GEMM of step 0: busy time, not kernel time
    first = next(e for e in doc["traceEvents"] if e.get("cat") == "kernel")
    doc["traceEvents"].append({**first, "tid": 9, "dur": first["dur"] / 2})
    trace = read_trace(write(tmp_path / "t.json", doc))
    assert trace.source == "gpu kernels" and trace.device == "NVIDIA H100 80GB HBM3"
    assert [s.number for s in trace.steps] == [10, 11, 12]
    for step in trace.steps:
        for cls, s in secs.items():
            assert step.busy_s[cls] == pytest.approx(s, rel=1e-9), (step.number, cls)
        assert step.compute_s == pytest.approx(0.154, rel=1e-9)
    gz = tmp_path / "t.json.gz"
    gz.write_bytes(gzip.compress(json.dumps(doc).encode()))
    assert read_trace(gz).steps[1].busy_s == trace.steps[1].busy_s


@pytest.mark.parametrize(("doc", "match"), [
    ('{"traceEvents": [\n{"ph": "X", "cat": "kernel",\n', r"t\.json:3: not JSON"),
    ('{"events": []}', "no traceEvents list"),
    ('{"traceEvents": [{"ph": "M", "name": "process_name"}]}', "no complete events"),
])
def test_a_broken_trace_is_refused_with_the_file_and_the_line(tmp_path, doc, match):
    path = tmp_path / "t.json"
    path.write_text(doc)
    with pytest.raises(UserError, match=match):
        read_trace(path)


def test_a_trace_of_several_ranks_is_refused(tmp_path):
    doc = kineto({"gemm": 0.1, "attention": 0.01, "memory": 0.01}, devices=2)
    with pytest.raises(UserError, match="several ranks"):
        read_trace(write(tmp_path / "t.json", doc))


def test_the_fitted_profile_prices_the_traced_step(capsys, tmp_path, profile_dir):
    """A step 25% slower than dgx-h100's shapes model in every class: the fit lowers each
    rate, writes a profile that loads, and `simulate` on it gives the traced step's compute;
    a trace slower in GEMMs only moves the GEMM rate alone."""
    hw, model = load_hardware(H100), load_model(L18)
    base = classes_s(model, hw, 1, 2048, 4)
    slow = {c: 1.25 * v for c, v in base.items()} | {"optimizer": 0.004}
    path = write(tmp_path / "step.json", kineto(slow))
    args = ("calibrate", "trace", str(path), "-H", H100, "-m", L18, "--micro-batch", "1",
            "--seq-len", "2048", "--grad-accum", "4", "--out", "h100-traced")
    code, out, err = scape(capsys, *args, "--format", "json")
    assert code == 0, err
    rows = {r["class"]: r for r in json.loads(out)}
    for cls in ("gemm", "attention", "memory"):
        assert rows[cls]["fitted_s"] == pytest.approx(slow[cls], rel=1e-6)
    step = rows["step compute, GPU busy (simulate, in sample)"]
    assert step["fitted_s"] == pytest.approx(sum(slow.values()), rel=1e-3)
    fitted = load_hardware("measured/h100-traced")
    assert fitted.roofline.gemm_peak_fraction < hw.roofline.gemm_peak_fraction
    # memory-bound kernels: slower than 1.25x in bandwidth, their launches being fixed
    assert fitted.compute.mem_efficiency < hw.compute.mem_efficiency / 1.25
    code, out, err = scape(capsys, "simulate", "-m", L18, "-H", "measured/h100-traced",
                           "--gpus", "8", "--micro-batch", "1", "--seq-len", "2048",
                           "--format", "json")
    assert code == 0, err
    gemm_only = base | {"gemm": 1.25 * base["gemm"], "optimizer": 0.004}
    code, out, err = scape(capsys, "calibrate", "trace",
                           str(write(tmp_path / "g.json", kineto(gemm_only))), *args[3:-1],
                           "h100-gemm", "--format", "json")
    assert code == 0, err
    g = load_hardware("measured/h100-gemm")
    assert g.compute.mem_efficiency == pytest.approx(hw.compute.mem_efficiency, rel=1e-6)
    assert g.roofline.attn_fwd_fraction == pytest.approx(hw.roofline.attn_fwd_fraction,
                                                         rel=1e-6)


def test_a_trace_faster_than_the_machine_can_be_is_refused(capsys, tmp_path, profile_dir):
    fast = {"gemm": 1e-6, "attention": 0.01, "memory": 0.01}
    code, _, err = scape(capsys, "calibrate", "trace",
                         str(write(tmp_path / "t.json", kineto(fast))), "-H", H100, "-m", L18,
                         "--micro-batch", "1", "--out", "x")
    assert code == 2 and "gemm time" in err and "hardware profile of the machine" in err
    assert not (profile_dir / "measured" / "x.toml").exists()


def test_a_trace_of_a_faster_gpu_names_the_shares_above_peak(capsys, tmp_path, profile_dir):
    """An H100 step fitted on the commodity profile's L40S: the trace's device name (an H100)
    is refused under an L40S profile; without a name, every class needs more than the L40S's
    peak, and the refusal says which, in the trace's terms. Neither writes anything."""
    hw, model = load_hardware(H100), load_model(L18)
    fast = classes_s(model, hw, 1, 2048, 4) | {"optimizer": 0.004}
    shape = ("-m", L18, "--micro-batch", "1", "--seq-len", "2048", "--grad-accum", "4")
    named = kineto(fast)
    code, _, err = scape(capsys, "calibrate", "trace", str(write(tmp_path / "h.json", named)),
                         "-H", "commodity-100gbe", *shape, "--out", "y")
    assert code == 2 and "ran on NVIDIA H100 80GB HBM3, and -H commodity-100gbe holds L40S" in err
    unnamed = {**named, "deviceProperties": [{"id": 0}]}
    code, _, err = scape(capsys, "calibrate", "trace", str(write(tmp_path / "u.json", unnamed)),
                         "-H", "commodity-100gbe", *shape, "--out", "y")
    assert code == 2, err
    assert "runs faster than commodity-100gbe's GPU" in err and "GEMMs at" in err
    assert "Traceback" not in err
    assert not (profile_dir / "measured" / "y.toml").exists()


def _megatron_line(iteration: int, ms: float, mean: float | None = None) -> str:
    """One log interval as Megatron-LM's training_log prints it (megatron/training/training.py;
    `X/MEAN` in newer versions)."""
    time = f"{ms:.1f}" if mean is None else f"{ms:.1f}/{mean:.1f}"
    return (f" [2026-11-29 10:00:00] iteration {iteration:8d}/{1000:8d} | consumed samples: "
            f"{iteration * 64:12d} | elapsed time per iteration (ms): {time} | learning rate: "
            "3.000E-04 | global batch size:    64 | lm loss: 7.1E+00 | loss scale: 1.0 | "
            "number of skipped iterations:   0 | number of nan iterations:   0 |")


def test_a_megatron_log_times_the_run_beside_the_traced_steps(capsys, tmp_path, profile_dir):
    """The run's own iterations (Megatron-LM's log, the first interval with start-up left
    out) beside the traced steps' wall time; a line naming the iteration time that cannot be
    read, or iterations going back (two runs in one file), are refused and nothing is
    written; a failed run is read up to its failure."""
    from calibration.megatron_log import read_megatron_log

    hw, model = load_hardware(H100), load_model(L18)
    step = classes_s(model, hw, 1, 2048, 4) | {"optimizer": 0.004}
    trace = write(tmp_path / "step.json", kineto(step, gap_us=0.0))
    wall = sum(step.values())  # the kernels back to back: the traced step's wall time
    lines = ["using world size: 8", _megatron_line(10, 2 * wall * 1e3),  # start-up
             _megatron_line(20, 1.1 * wall * 1e3), _megatron_line(30, 1.2 * wall * 1e3, 1.15),
             _megatron_line(40, 1.3 * wall * 1e3)]
    log = tmp_path / "train.log"
    log.write_text("\n".join(lines) + "\n")
    read = read_megatron_log(log)
    assert read.iterations == (10, 20, 30, 40) and read.median_ms() == pytest.approx(
        1.2 * wall * 1e3, rel=1e-3)
    args = ("calibrate", "trace", str(trace), "-H", H100, "-m", L18, "--micro-batch", "1",
            "--seq-len", "2048", "--grad-accum", "4")
    code, out, err = scape(capsys, *args, "--out", "with-log", "--megatron-log", str(log),
                           "--format", "json")
    assert code == 0, err
    rows = {r["class"]: r for r in json.loads(out)}
    assert rows["iteration (Megatron log)"]["traced_s"] == pytest.approx(1.2 * wall, rel=1e-3)
    assert rows["step wall (trace) / compute with the host's wait (simulate)"]["traced_s"] == (
        pytest.approx(wall, rel=1e-6))
    assert rows["gemm"]["megatron_log"] == str(log) and "holds start-up" in err
    code, out, err = scape(capsys, *args, "--out", "with-log-2", "--megatron-log", str(log))
    assert code == 0 and "the traced steps' wall" in out and "-16.7% against it" in out
    # refused, nothing written
    for name, text, said in (
            ("bad.log", lines[1].replace("(ms): ", "(ms): fast "), "bad.log:1: a line naming"),
            ("twice.log", "\n".join(lines[1:3] + lines[1:3]), "twice.log:3: iteration 10 "
             "after 20"),
            ("empty.log", "using world size: 8\n", "not a Megatron-LM training log")):
        (tmp_path / name).write_text(text + "\n")
        code, _, err = scape(capsys, *args, "--out", "refused", "--megatron-log",
                             str(tmp_path / name))
        assert code == 2 and said in err, (name, err)
    assert not (profile_dir / "measured" / "refused.toml").exists()
    failed = tmp_path / "failed.log"
    failed.write_text("\n".join([*lines[:3], "Traceback (most recent call last):",
                                 lines[3]]) + "\n")
    got = read_megatron_log(failed)
    assert got.iterations == (10, 20) and any("failed here" in n for n in got.notes)
