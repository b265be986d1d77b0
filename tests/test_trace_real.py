"""`calibrate trace` on real Kineto traces as PyTorch wrote them (issue 59 item 3;
tests/fixtures/traces/SOURCES.md): a 2-GPU DDP training step of a CNN on A100 is read into
its steps and classes, its communication the busy time of its NCCL kernels as counted here
independently, and refused by the fit for having no attention (a transformer's step runs
GEMMs, attention and memory-bound kernels); a forward-only BERT pass on H100 is read and
refused as inference."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from calibration.trace import read_trace
from tests.test_cli import scape

TRACES = Path(__file__).resolve().parent / "fixtures" / "traces"
DDP = TRACES / "hta-resnet-ddp-a100-rank0.json.gz"
BERT = TRACES / "tracelens-bert-small-h100-forward.json.gz"


def _union_s(spans: list[tuple[float, float]]) -> float:
    total, end = 0.0, float("-inf")
    for a, b in sorted(spans):
        if b > end:
            total += b - max(a, end)
            end = b
    return total * 1e-6


def test_a_real_ddp_training_trace_is_read_into_its_steps_and_classes():
    trace = read_trace(DDP)
    assert trace.source == "gpu kernels" and trace.trains
    assert trace.device == "NVIDIA A100-PG509-200"
    assert [s.number for s in trace.steps] == [4, 5, 6]
    # the steps' windows and NCCL kernels, counted here from the JSON itself
    with gzip.open(DDP) as f:
        events = json.load(f)["traceEvents"]
    windows = {int(e["name"].split("#")[1]): (e["ts"], e["ts"] + e["dur"]) for e in events
               if e.get("cat") == "user_annotation" and str(e["name"]).startswith("ProfilerStep#")}
    kernels = [e for e in events if e.get("cat") == "kernel"]
    for step in trace.steps:
        a, b = windows[step.number]
        assert step.wall_s == pytest.approx((b - a) * 1e-6, rel=1e-9)
        inside = [e for e in kernels if a <= e["ts"] <= b]
        nccl = [(e["ts"], e["ts"] + e["dur"]) for e in inside if "nccl" in e["name"].lower()]
        assert nccl and step.busy_s["communication"] == pytest.approx(_union_s(nccl), rel=1e-9)
        every = [(e["ts"], e["ts"] + e["dur"]) for e in inside]
        # the classes' busy times: at least every kernel's union, at most their sum (1e-6
        # relative: timestamps of 1e15 us round in the last digits)
        classes = sum(step.busy_s.values())
        assert _union_s(every) * (1 - 1e-6) <= classes
        assert classes <= sum(e["dur"] for e in inside) * 1e-6 * (1 + 1e-6)
        assert step.busy_s["attention"] == 0 and step.busy_s["optimizer"] > 0
        assert step.busy_s["gemm"] > 0 and step.busy_s["memory"] > 0


def test_real_traces_the_fit_cannot_take_are_refused_saying_why(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("SCAPE_PROFILE_DIR", str(tmp_path))
    code, _, err = scape(capsys, "calibrate", "trace", str(DDP), "-H", "dgx-a100", "-m",
                         "gpt-345m", "--micro-batch", "8", "--out", "cnn")
    assert code == 2 and "no attention time in its steps (gpu kernels)" in err
    bert = read_trace(BERT)
    assert not bert.trains and bert.device == "NVIDIA H100 80GB HBM3"
    assert bert.steps[0].busy_s["attention"] > 0  # PyTorch's flash_fwd_kernel
    code, _, err = scape(capsys, "calibrate", "trace", str(BERT), "-H", "dgx-h100", "-m",
                         "tiny-gpt", "--micro-batch", "1", "--out", "bert")
    assert code == 2 and "a forward pass only" in err and "inference trace" in err
    assert not list(tmp_path.rglob("*.toml"))


H200_MB2 = TRACES / "scape-llama-500m-h200-mb2.json.gz"
H200_MB4 = TRACES / "scape-llama-500m-h200-mb4.json.gz"


def test_a_real_h200_step_fitted_eager_predicts_another_micro_batch(capsys, tmp_path,
                                                                     monkeypatch):
    """The runtime's own eager GPT traced on a lent H200 (SOURCES.md): fitted as fused kernels
    its memory-bound kernels' extra bytes leave no rate for its GEMMs, and the refusal names
    --eager; fitted --eager at micro-batch 2, the profile prices micro-batch 4's traced
    compute within 10% (measured 2026-12-04: -3.1%), held out. Those are the GPU's busy
    times; the traced steps' wall is 1.2-1.7x them (the eager host), and the step's compute
    with the host's wait (simulator/step/host.py's traced blend) lies between the two, where
    the GPU's time alone (max(host, GPU), before 2026-12-06) was the busy time."""
    import statistics

    from profiles import load_hardware, load_model
    from scape.plan import make_config
    from simulator.step.simulate import simulate_step
    from simulator.step.step_config import StepConfig

    monkeypatch.setenv("SCAPE_PROFILE_DIR", str(tmp_path))
    fit = ("calibrate", "trace", str(H200_MB2), "-H", "dgx-h200", "-m", "llama-500m",
           "--micro-batch", "2", "--seq-len", "2048", "--out", "h200")
    code, _, err = scape(capsys, *fit)
    assert code == 2 and "give --eager" in err and not list(tmp_path.rglob("*.toml"))
    code, _out, err = scape(capsys, *fit, "--eager")
    assert code == 0, err
    hw = load_hardware(str(tmp_path / "measured" / "h200.toml"))
    assert hw.roofline.sustained == 1.0 and hw.roofline.gemm_peak_fraction <= 1
    from simulator.step.simulate import _fwd_bwd

    for mb, path, tol in ((2, H200_MB2, 0.01), (4, H200_MB4, 0.10)):
        steps = read_trace(path).steps
        busy = statistics.median(s.compute_s for s in steps)
        wall = statistics.median(s.wall_s for s in steps)
        cfg = StepConfig(load_model("llama-500m"), hw, 1, make_config("dense-adamw"),
                         micro_batch=mb, seq_len=2048, stack="torchtitan").validate()
        compute = simulate_step(cfg).compute_s
        waited = _fwd_bwd(cfg).parts["host_wait"]
        assert compute - waited == pytest.approx(busy, rel=tol)
        assert busy < compute < wall
