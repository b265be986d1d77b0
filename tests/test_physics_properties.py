"""Physics invariants as properties (issue 45), drawn at random over the shipped hardware
profiles, collectives, sizes, GPU counts and NCCL protocols:

- no collective gets faster when a link, NIC or GPU rate is lowered or a latency raised, at
  the same algorithm and protocol, nor when NCCL's tuner picks again on the slower machine
  (the chosen pair's time, as the tool reports it);
- the bytes a step sends never depend on link rates;
- no step gets faster on a slower machine.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from profiles import UserError, load_hardware
from simulator.collective import sweep
from simulator.step import simulate_step
from simulator.step_config import StepConfig

PROFILES = ("dgx-h100", "dgx-a100", "dgx-b200", "aws-p5", "gcp-a3-mega", "oci-h100-roce",
            "vista-gh200", "vista-gh200-socket", "commodity-100gbe")
OPS = ("all_reduce", "all_gather", "reduce_scatter", "broadcast")
SLACK = 1 + 1e-9  # float residue of equal times


def slower(hw, what: str, factor: float):
    """`hw` with one rate divided by `factor` (or a latency multiplied by it)."""
    if what == "intra":
        return replace(hw, intra_node=replace(hw.intra_node,
                                              bw_GBps=hw.intra_node.bw_GBps / factor))
    if what == "nic":
        return replace(hw, nic=replace(hw.nic, bw_Gbps=hw.nic.bw_Gbps / factor))
    if what == "nic_latency":
        return replace(hw, nic=replace(hw.nic, latency_us=hw.nic.latency_us * factor + 1.0))
    return replace(hw, gpu=replace(hw.gpu, peak_bf16_tflops=hw.gpu.peak_bf16_tflops / factor,
                                   hbm_bw_GBps=hw.gpu.hbm_bw_GBps / factor))


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(profile=st.sampled_from(PROFILES), op=st.sampled_from(OPS),
       nodes=st.sampled_from((1, 2, 4, 16, 64)), size_exp=st.integers(10, 30),
       proto=st.sampled_from(("auto", "ll", "ll128", "simple")),
       what=st.sampled_from(("intra", "nic", "nic_latency")),
       factor=st.floats(1.05, 4.0))
def test_no_collective_is_faster_on_a_slower_machine(profile, op, nodes, size_exp, proto,
                                                     what, factor):
    hw = load_hardware(profile)
    gpus = max(2, nodes * hw.node.gpus_per_node)
    if hw.nccl is None and proto != "auto":
        proto = "simple"
    size = 2.0 ** size_exp
    try:
        fast = sweep(hw, gpus, op, "auto", [size], proto=proto)[0]
    except UserError:  # a protocol this op or machine does not run: nothing to compare
        return
    slow_hw = slower(hw, what, factor)
    # the same pair on the slower machine, and the tuner's own pick there
    same = sweep(slow_hw, gpus, op, fast.algo, [size], proto=fast.proto or proto)[0]
    assert same.time_s * SLACK >= fast.time_s, (fast, same)
    if proto == "auto":
        picked = sweep(slow_hw, gpus, op, "auto", [size])[0]
        assert picked.time_s * SLACK >= fast.time_s, (fast, picked)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(profile=st.sampled_from(("dgx-h100", "dgx-a100", "vista-gh200-socket")),
       scheme=st.sampled_from(("dense-adams", "dense-ddp", "topk", "scape")),
       nodes=st.sampled_from((2, 4, 8)), what=st.sampled_from(("intra", "nic", "gpu")),
       factor=st.floats(1.1, 3.0))
def test_steps_keep_their_bytes_and_never_get_faster_on_a_slower_machine(
        profile, scheme, nodes, what, factor):
    from profiles import load_model
    from scape.plan import make_config

    hw = load_hardware(profile)
    gpus = nodes * hw.node.gpus_per_node
    sparsity = {"topk": 0.99, "scape": 0.99}.get(scheme, 0.0)
    cfg = StepConfig(model=load_model("gpt-345m"), hardware=hw, gpus=gpus,
                     scheme=make_config(scheme, sparsity=sparsity), micro_batch=4,
                     seq_len=1024, global_batch=4 * gpus).validate()
    fast = simulate_step(cfg)
    slow = simulate_step(replace(cfg, hardware=slower(hw, what, factor)))
    assert slow.bytes_per_gpu == pytest.approx(fast.bytes_per_gpu, rel=1e-12)
    assert slow.step_time_s * SLACK >= fast.step_time_s
