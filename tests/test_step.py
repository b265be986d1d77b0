"""One training step: closed forms, overlap, SCAPE's hidden mask all-gather, exact timelines."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace

import pytest

from profiles import UserError, load_hardware, load_model
from scape.plan import Dtypes, Plan, StepPlan, make_config, plan
from simulator.network.collective import collective_time
from simulator.step.compute import fwd_bwd, kernel_time
from simulator.step.simulate import simulate_step
from simulator.step.step_config import StepConfig
from simulator.step.trace import chrome_trace, write_trace

VISTA = load_hardware("vista-gh200")
H100 = load_hardware("dgx-h100")
TINY = load_model("gpt-345m")
DT = Dtypes(grad_bytes=4, param_bytes=2)


def once(updated: float, buffer: float, hw=VISTA) -> float:
    """Seconds of the Megatron stack's once-a-step kernels beside the update
    (simulator/step/per_step.py): the clip's norm over the `updated` gradients, the zeroing of
    the `buffer` gradients' fp32 buffer."""
    return (kernel_time("grad_norm", updated, hw)
            + kernel_time("memset", buffer * DT.grad_bytes, hw))


def cfg(scheme="dense-adams", gpus=4, hw=VISTA, **opts):
    extra = {k: opts.pop(k) for k in list(opts) if k in (
        "micro_batch", "grad_accum", "tp", "chunks", "algo", "seq_len")}
    return StepConfig(TINY, hw, gpus, make_config(scheme, **opts), dtypes=DT, **extra)


def test_no_communication_step_is_compute():
    c = cfg("dense-adams", gpus=1, grad_accum=3)
    r = simulate_step(c)
    t = fwd_bwd(TINY, VISTA, c.micro_batch, c.seq, 1, 3)
    opt = kernel_time("optimizer_adams", TINY.n_params, VISTA)
    per_step = opt + once(TINY.n_params, TINY.n_params)
    assert r.step_time_s == pytest.approx(3 * (t.fwd_s + t.bwd_s) + per_step, rel=1e-12)
    assert r.per_step_s == pytest.approx(per_step, rel=1e-12)
    assert r.exposed_comm_s == pytest.approx(0, abs=1e-12) and r.bytes_per_gpu == 0


def test_zero1_without_overlap_closed_form():
    c = cfg("dense-adams", gpus=4, algo="ring", overlap_grad_reduce=False,
            overlap_param_gather=False, bucket_bytes=1e12)
    r = simulate_step(c)
    n = TINY.n_params
    t = fwd_bwd(TINY, VISTA, 1, c.seq)
    rs = collective_time(VISTA, 4, "reduce_scatter", "ring", n * DT.grad_bytes).time_s
    ag = collective_time(VISTA, 4, "all_gather", "ring", n * DT.param_bytes).time_s
    opt = kernel_time("optimizer_adams", n / 4, VISTA)
    # the closed form of each ring: (P-1) alpha + (P-1)/P S/B
    b, a = VISTA.nic.effective_Bps, VISTA.nic.latency_us * 1e-6
    assert rs == pytest.approx(3 * a + 3 / 4 * n * DT.grad_bytes / b, rel=1e-12)
    opt += once(n / 4, n)  # the norm over the shard, the whole buffer zeroed
    assert r.step_time_s == pytest.approx(t.fwd_s + t.bwd_s + rs + opt + ag, rel=1e-12)


@pytest.mark.parametrize("scheme", ["dense-adams", "dense-ddp", "scape-partitioned"])
@pytest.mark.parametrize("gpus", [4, 32])
def test_overlap_never_makes_a_step_slower(scheme, gpus):
    opts = {"sparsity": 0.9} if scheme == "scape-partitioned" else {}
    off = simulate_step(cfg(scheme, gpus, overlap_grad_reduce=False,
                            overlap_param_gather=False, **opts))
    on = simulate_step(cfg(scheme, gpus, overlap_grad_reduce=True, overlap_param_gather=True,
                           **opts))
    assert on.step_time_s <= off.step_time_s * (1 + 1e-12)


def test_short_mask_allgather_adds_nothing():
    c = cfg("scape-partitioned", gpus=32, sparsity=0.99)
    full = plan(c.scheme, TINY.n_params, 32, DT)
    (w, step), = full.steps
    without = Plan(full.scheme, ((w, StepPlan(tuple(op for op in step.ops
                                                    if op.phase != "next_step"), step.kernels)),))
    assert simulate_step(c).step_time_s == simulate_step(c, the_plan=without).step_time_s


def test_long_mask_allgather_is_exposed():
    # Make the mask all-gather huge: it outlasts forward + backward and shows in the step.
    c = cfg("scape-partitioned", gpus=32, sparsity=0.99)
    (w, step), = plan(c.scheme, TINY.n_params, 32, DT).steps
    ops = tuple(replace(op, size_bytes=op.size_bytes * 1e4) if op.phase == "next_step" else op
                for op in step.ops)
    slow = simulate_step(c, the_plan=Plan("scape-partitioned", ((w, StepPlan(ops, step.kernels)),)))
    assert slow.step_time_s > simulate_step(c).step_time_s


def test_exact_timeline_ddp_two_ranks():
    c = cfg("dense-ddp", gpus=2, chunks=1, algo="ring", overlap_grad_reduce=False,
            bucket_bytes=float("inf"))
    r = simulate_step(c)
    t = fwd_bwd(TINY, VISTA, 1, c.seq)
    ar = collective_time(VISTA, 2, "all_reduce", "ring", TINY.n_params * DT.grad_bytes).time_s
    n = TINY.n_params
    opt = kernel_time("optimizer_adams", n, VISTA)
    norm = kernel_time("grad_norm", n, VISTA)
    zero = kernel_time("memset", n * DT.grad_bytes, VISTA)
    f, b = t.fwd_s, t.bwd_s
    got = [(s.collective, s.phase, s.start_s, s.end_s) for s in r.spans]
    approx = lambda x: pytest.approx(x, rel=1e-12)  # noqa: E731
    u = f + b + ar + norm  # the update starts after the clip's norm
    assert got == [
        ("compute", "forward mb0", 0.0, approx(f)),
        ("compute", "backward mb0", approx(f), approx(f + b)),
        ("comm", "grad all-reduce", approx(f + b), approx(f + b + ar)),
        ("compute", "gradient norm (clipping)", approx(f + b + ar), approx(u)),
        ("compute", "adams update", approx(u), approx(u + opt)),
        ("compute", "zero the gradient buffer", approx(u + opt), approx(u + opt + zero)),
    ]


def test_tensor_parallel_adds_blocking_allreduces():
    base = simulate_step(cfg("dense-adams", gpus=8, hw=H100))
    tp = simulate_step(cfg("dense-adams", gpus=8, hw=H100, tp=2))
    assert tp.tp_comm_s > 0 and tp.compute_s < base.compute_s


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"tp": 3}, "tensor-parallel degree must divide the 8 GPUs"),
    ({"gpus": 33}, "multiple of the node size"),
    ({"micro_batch": 0}, "micro-batch must be at least 1"),
])
def test_bad_step_configs(kwargs, message):
    gpus = kwargs.pop("gpus", 16)
    with pytest.raises(UserError, match=message):
        simulate_step(cfg("dense-adams", gpus=gpus, hw=H100, **kwargs))


def test_trace_is_chrome_trace_json(tmp_path):
    r = simulate_step(cfg("scape-partitioned", gpus=32, sparsity=0.9))
    path = write_trace(tmp_path / "t" / "trace.json", r.spans)
    doc = json.loads(path.read_text())
    events = doc["traceEvents"]
    assert doc == chrome_trace(r.spans)
    complete = [e for e in events if e["ph"] == "X"]
    assert len(complete) == len(r.spans)
    for e in complete:
        assert {"name", "ph", "ts", "dur", "pid", "tid"} <= e.keys() and e["dur"] >= 0
    names = {e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    assert names == {"compute", "comm"}


def test_simulator_never_imports_torch():
    code = ("import sys, simulator.step.simulate, simulator.network.collective, cli; "
            "assert 'torch' not in sys.modules, 'torch imported'")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_interference_slows_only_the_overlapped_compute():
    """While a collective runs its CTAs hold SMs (profiles/hardware.py sm_share_interference):
    compute beside it runs at 1 / (1 + i) of its rate, so the compute time grows by exactly
    i / (1 + i) of the time it overlapped communication, and no more."""
    slow = H100.compute.interference
    assert slow == pytest.approx(16 / (132 - 16))  # derived from the profile's SMs and CTAs
    free = replace(H100, compute=replace(H100.compute, interference=0.0))
    opts = {"gpus": 16, "grad_accum": 2}
    r0 = simulate_step(cfg("dense-ddp", hw=free, **opts))
    r1 = simulate_step(cfg("dense-ddp", hw=H100, **opts))
    assert r1.overlapped_comm_s > 0
    extra = r1.compute_s - r0.compute_s
    assert extra == pytest.approx(slow / (1 + slow) * r1.overlapped_comm_s, rel=1e-6)
    assert r1.interference_s == pytest.approx(extra, rel=1e-6)
    assert r0.interference_s == pytest.approx(0, abs=1e-12)
    assert r1.step_time_s > r0.step_time_s
    # without communication nothing is slowed
    one = simulate_step(cfg("dense-ddp", hw=H100, gpus=1))
    assert one.compute_s == pytest.approx(simulate_step(cfg("dense-ddp", hw=free,
                                                            gpus=1)).compute_s, rel=1e-12)


@pytest.mark.parametrize(("accum", "hw", "gpus"), [(12, H100, 16), (40, VISTA, 8)])
def test_zero3_steps_of_many_micro_batches_extend_their_steady_state_exactly(accum, hw, gpus):
    """A ZeRO-3 step of many micro-batches is simulated with a few and extended (step.py
    _extended); every reported quantity equals the full simulation's (trace=True)."""
    c = cfg("dense-zero3", gpus=gpus, hw=hw, grad_accum=accum)
    short, full = simulate_step(c), simulate_step(c, trace=True)
    for key, value in full.as_dict().items():
        assert short.as_dict()[key] == pytest.approx(value, rel=1e-9, abs=1e-12), key
    assert len(short.spans) < len(full.spans)  # the extension did run: fewer spans
    few = cfg("dense-zero3", gpus=gpus, hw=hw, grad_accum=6)  # below EXTEND_FROM: all simulated
    assert len(simulate_step(few).spans) == len(simulate_step(few, trace=True).spans)


@pytest.mark.parametrize("scheme", ["dense-ddp", "scape", "quantized"])
def test_plain_steps_of_very_many_micro_batches_extend_too(scheme):
    """Steps without per-micro-batch collectives are extended from EXTEND_PLAIN_FROM
    micro-batches on (--grad-accum 10^8 in a second, not hours), equal to the whole."""
    import simulator.step.simulate as step

    c = cfg(scheme, gpus=16, hw=H100, grad_accum=step.EXTEND_PLAIN_FROM)
    short, full = simulate_step(c), simulate_step(c, trace=True)
    for key, value in full.as_dict().items():
        assert short.as_dict()[key] == pytest.approx(value, rel=1e-9, abs=1e-12), key
    assert len(short.spans) < len(full.spans)
    below = cfg(scheme, gpus=16, hw=H100, grad_accum=step.EXTEND_PLAIN_FROM - 1)
    assert len(simulate_step(below).spans) == len(simulate_step(below, trace=True).spans)


def test_a_step_that_is_not_yet_periodic_is_simulated_whole(monkeypatch):
    """Where the short runs do not grow by equal amounts (here made so: their step times
    bent by a term in accum^2) the step is not extended but simulated in full."""
    import simulator.step.simulate as step

    c = cfg("dense-zero3", gpus=16, hw=H100, grad_accum=12)
    full = simulate_step(c, trace=True).step_time_s
    real = step._run_kind

    def bent(kind_cfg, *args):
        values, spans = real(kind_cfg, *args)
        if kind_cfg.accum < step.EXTEND_FROM:
            values = {**values, "step": values["step"] + 1e-3 * kind_cfg.accum**2}
        return values, spans

    monkeypatch.setattr(step, "_run_kind", bent)
    topo = step.build_topology(c.hardware, c.gpus)
    assert step._extended(c, topo, step.PhaseCache(topo), c._plan().steps[0][1]) is None
    assert simulate_step(c).step_time_s == pytest.approx(full, rel=1e-12)
