"""The deepspeed stack (issue 60: BLOOM's GPU-hours): Megatron-DeepSpeed with bf16 as BLOOM ran it,
DeepSpeed's pipeline engine and BF16_Optimizer. Each mechanism is checked against its count: the
fp32 gradient folded in after every micro-batch (18 bytes a parameter at HBM bandwidth), the
gradient all-reduced after the last micro-batch, the bf16 gradients kept beside the fp32 ones;
what the stack does not run is refused with the rule."""

from __future__ import annotations

from dataclasses import replace

import pytest

from profiles import UserError, load_hardware, load_model
from scape.plan import Dtypes, make_config, plan
from simulator.memory.activations import embedding_kept_per_token
from simulator.memory.peak import memory_use
from simulator.planning.options import (
    Batch,
    Overlap,
    Parallelism,
    Pricing,
    SchemeOptions,
    StepOptions,
)
from simulator.step.compute import BF16_OPTIMIZER_ACCUM_BYTES, fwd_bwd
from simulator.step.simulate import simulate_step
from simulator.step.step_config import deepspeed_scheme
from tests.test_cli import scape

A100 = load_hardware("dgx-a100")
GPT = load_model("bloom-176b")


def _options(stack: str | None = "deepspeed", scheme: str = "dense-adamw",
             overlap: Overlap | None = None, pp: int = 4, schedule: str = "1f1b",
             hardware: str = "jean-zay-a100") -> StepOptions:
    """BLOOM 176B at BigScience's layout on 96 GPUs (TP 4, PP 4 of 70 layers, DP 6)."""
    return StepOptions(
        "bloom-176b", hardware, 96, scheme=SchemeOptions(scheme),
        batch=Batch(2, 2048, None, 96), overlap=overlap or Overlap(),
        parallelism=Parallelism(tp=4, pp=pp, recompute="full", sequence_parallel=False,
                                pp_schedule=schedule),
        pricing=Pricing(attention="unfused", stack=stack))


def test_accumulation_pass_is_eighteen_bytes_a_parameter_at_hbm_bandwidth():
    """BF16_Optimizer.update_hp_grads after each backward: the cast reads 2 bytes and writes 4,
    the add reads 4 + 4 and writes 4; over a TP rank's layer parameters and its share of the
    (tied) output layer, at the profile's HBM bandwidth x memory efficiency."""
    assert BF16_OPTIMIZER_ACCUM_BYTES == 18
    tp, a = 4, GPT.arch
    plain = fwd_bwd(GPT, A100, 2, 2048, tp, recompute="full", attention="unfused")
    ds = fwd_bwd(GPT, A100, 2, 2048, tp, recompute="full", attention="unfused",
                 accum_pass_bytes=18)
    hbm = A100.gpu.hbm_bw_GBps * 1e9 * A100.compute.mem_efficiency
    layer = GPT.layer_params / tp * 18 / hbm
    head = a.vocab_size * a.d_model / tp * 18 / hbm
    assert ds.layer_bwd_s - plain.layer_bwd_s == pytest.approx(layer, rel=1e-9)
    assert ds.head_bwd_s - plain.head_bwd_s == pytest.approx(head, rel=1e-9)
    assert ds.bwd_s - plain.bwd_s == pytest.approx(a.n_layers * layer + head, rel=1e-9)
    assert ds.fwd_s == plain.fwd_s
    # about 45 ms a micro-batch for a 6-layer stage of BLOOM: 3.7e9 parameters x 18 bytes
    assert 6 * layer == pytest.approx(6 * 2.466e9 / 4 * 18 / hbm, rel=1e-3)


def test_scheme_all_reduces_fp32_gradients_after_the_last_micro_batch():
    """deepspeed_scheme: the gradient all-reduced whole after the backward (pipe/engine.py
    _exec_reduce_grads, _bf16_reduce_grads), the shard updated, the parameters gathered after
    the update; Megatron's ZeRO-1 reduce-scatters in the backward instead."""
    zero1 = make_config("dense-adamw")
    ds = deepspeed_scheme(zero1)
    n, world = 1e9, 8
    dt = Dtypes(param_bytes=2, grad_bytes=4)
    (_, step), = plan(ds, n, world, dt).steps
    reduce, gather = step.ops
    assert (reduce.collective, reduce.phase, reduce.size_bytes) == ("all_reduce",
                                                                     "after_backward", 4 * n)
    assert (gather.collective, gather.phase, gather.size_bytes) == ("all_gather",
                                                                     "after_update", 2 * n)
    (_, mega), = plan(zero1, n, world, dt).steps
    assert mega.ops[0].collective == "reduce_scatter" and mega.ops[0].phase == "backward"
    assert step.kernels == mega.kernels  # the update on the shard either way


def test_memory_keeps_the_bf16_gradients_beside_the_fp32_ones():
    """2 bytes a parameter more than Megatron's ZeRO-1 (its fp32 main gradients only)."""
    dt = Dtypes(param_bytes=2, grad_bytes=4)
    args = dict(dp=8, tp=4, micro_batch=2, seq_len=2048, dtypes=dt, recompute="full",
                sequence_parallel=False, pp=12, attention="unfused", micro_batches=128)
    zero1 = make_config("dense-adamw")
    mega = memory_use(GPT, zero1, **args)
    ds = memory_use(GPT, deepspeed_scheme(zero1), **args)
    assert ds.stage == mega.stage
    assert ds.grads == pytest.approx(mega.grads * (4 + 2) / 4, rel=1e-12)
    assert (ds.weights, ds.optimizer, ds.activations) == (mega.weights, mega.optimizer,
                                                          mega.activations)


def test_gradient_all_reduce_copy_is_the_peak_where_the_state_outweighs_activations():
    """After the last backward DeepSpeed casts each parameter group's flat fp32 gradient to
    its bf16 communication dtype to all-reduce it (engine.py allreduce_bucket): 2 bytes a
    parameter beside the state, the activations freed. BLOOM at PP 4 and micro-batch 1 (11B
    parameters a GPU) peaks there; at its PP 12 and micro-batch 2 the activations peak, as
    before; Megatron's ZeRO-1 reduces its buffer in place."""
    dt = Dtypes(param_bytes=2, grad_bytes=4)
    args = dict(dp=8, tp=4, seq_len=2048, dtypes=dt, recompute="full",
                sequence_parallel=False, attention="unfused")
    zero1 = make_config("dense-adamw")
    ds = deepspeed_scheme(zero1)
    heavy = memory_use(GPT, ds, micro_batch=1, pp=4, micro_batches=4, **args)
    assert heavy.comm_buffer == pytest.approx(heavy.weights, rel=1e-12)  # bf16 copy = weights
    assert heavy.activations == 0 and heavy.loss == 0
    assert heavy.total == pytest.approx(heavy.weights + heavy.grads + heavy.optimizer
                                        + heavy.comm_buffer, rel=1e-12)
    passes = memory_use(GPT, zero1, micro_batch=1, pp=4, micro_batches=4, **args)
    assert passes.comm_buffer == 0 and heavy.total > passes.total
    ran = memory_use(GPT, ds, micro_batch=2, pp=12, micro_batches=128, **args)
    assert ran.comm_buffer == 0 and ran.activations > ran.weights  # BLOOM's own layout


def test_out_of_memory_runs_are_refused_and_the_band_is_the_benchs():
    """bench/deepspeed_steps.py: BigScience's PP 6 candidates of 184B that ran out of memory
    at micro-batch 1 and 2 are refused, every run that ran is accepted, and the shipped band
    `scape simulate` quotes is the bench's (regenerate: SCAPE_PROFILE_DIR=profiles python
    bench/deepspeed_steps.py --bands profiles/external/memory-fidelity-bands-deepspeed.csv)."""
    import pandas as pd

    from reports.memory_fidelity import DEEPSPEED_BANDS
    from tests.test_fidelity_bands import _bench

    bench = _bench("deepspeed_steps")
    df = bench.priced(megatron=False).set_index("case")
    assert df[df["outcome"] == "ran"]["fits"].all()
    assert not df.loc["bs-12288-100-h64-tp4-pp6-mbs1", "fits"]
    assert not df.loc["bs-12288-100-h64-tp4-pp6-mbs2", "fits"]
    band = bench.memory_band(df[df["outcome"] == "ran"].reset_index())
    pd.testing.assert_frame_equal(band.reset_index(drop=True), pd.read_csv(DEEPSPEED_BANDS),
                                  check_dtype=False)


def test_pipeline_engine_keeps_each_in_flight_output_partition_and_the_embedding():
    """DeepSpeed's pipeline engine keeps every in-flight micro-batch's output until its
    backward, as its 1/TP partition (pipe_buffers['outputs'], is_pipe_partitioned); Megatron
    frees it. Both stacks keep the first stage's embedding, which neither recomputes:
    BLOOM's embedding LayerNorm input (2 h + 8 bytes a token) and the dropout mask (h bytes).
    On BLOOM's stage 0 (PP 12, 12 micro-batches in flight of 2 x 2048 tokens)."""
    dt = Dtypes(param_bytes=2, grad_bytes=4)
    tp, pp, mb, seq, h = 4, 12, 2, 2048, GPT.arch.d_model
    args = dict(dp=8, tp=tp, micro_batch=mb, seq_len=seq, dtypes=dt, recompute="full",
                sequence_parallel=False, pp=pp, attention="unfused", micro_batches=128)
    zero1 = make_config("dense-adamw")
    mega = memory_use(GPT, zero1, **args)
    ds = memory_use(GPT, deepspeed_scheme(zero1), stack="deepspeed", **args)
    assert ds.stage == mega.stage == 0
    tokens_in_flight = pp * mb * seq
    assert ds.activations - mega.activations == pytest.approx(
        tokens_in_flight * 2 * h / tp, rel=1e-9)
    plain = replace(GPT, arch=replace(GPT.arch, embed_layernorm=None))
    without = memory_use(plain, zero1, **args)
    assert mega.activations - without.activations == pytest.approx(
        tokens_in_flight * (2 * h + 8), rel=1e-9)
    # the mask alone: a byte an element, sharded where sequence parallelism scatters first
    assert embedding_kept_per_token(plain, tp, False) == h
    assert embedding_kept_per_token(plain, tp, True) == h / tp
    assert embedding_kept_per_token(load_model("llama3-8b"), 1, False) == 0


def test_step_is_slower_by_what_the_mechanisms_add():
    """The same layout under both stacks: the deepspeed step's compute grows by the
    accumulation pass of every micro-batch on the first stage, its gradient reduction waits for
    the last backward; every output says which stack it priced."""
    ds_cfg = _options().config()
    mega_cfg = _options(stack=None).config()
    assert ds_cfg.stack == "deepspeed" and ds_cfg.scheme.grad_all_reduce
    assert not ds_cfg.scheme.overlap_grad_reduce and mega_cfg.scheme.overlap_grad_reduce
    ds, mega = simulate_step(ds_cfg), simulate_step(mega_cfg)
    assert ds.step_time_s > mega.step_time_s
    assert ds.overlapped_comm_s == 0.0  # nothing of the reduction hides under the backward
    assert ds.exposed_comm_s > mega.exposed_comm_s
    assert _options().ran(ds_cfg)["stack"] == "deepspeed"


@pytest.mark.parametrize("change, words", [
    (dict(overlap=Overlap(grad=True)), "leave --overlap-grad and --overlap-param out"),
    (dict(overlap=Overlap(param=True)), "leave --overlap-grad and --overlap-param out"),
    (dict(scheme="dense-ddp"), "give -s dense-adamw, dense-adams or dense-zero1"),
    (dict(scheme="scape:0.99"), "not scape"),
    (dict(schedule="interleaved", pp=2), "no interleaving"),
])
def test_what_deepspeed_does_not_run_is_refused(change, words):
    with pytest.raises(UserError, match=words.replace("(", r"\(")):
        _options(**change).config()


def test_bf16_gradients_sharding_and_plan_are_refused(capsys):
    cfg = _options().config()
    with pytest.raises(UserError, match="fp32 gradients"):
        replace(cfg, dtypes=Dtypes(param_bytes=2, grad_bytes=2)).validate()
    with pytest.raises(UserError, match="experts, --fp8 and --shard-group"):
        replace(cfg, shard_group=2).validate()
    code, _, err = scape(capsys, "plan", "-m", "bloom-176b", "-H", "jean-zay-a100", "--tokens",
                         "1e11", "--stack", "deepspeed")
    assert code != 0 and "priced by simulate and compare" in err


def test_cli_prints_the_stack_and_the_all_reduce(capsys):
    code, out, err = scape(capsys, "simulate", "-m", "bloom-176b", "-H", "jean-zay-a100",
                           "--gpus", "384", "--tp", "4", "--pp", "12", "--micro-batch", "2",
                           "--global-batch", "2048", "--recompute", "full", "--attention",
                           "unfused", "--no-sequence-parallel", "--stack", "deepspeed")
    assert code == 0, err
    assert "stack deepspeed" in out and "grad_all_reduce True" in out
    assert "overlap_grad_reduce False" in out


def test_the_tied_embedding_is_all_reduced_between_the_first_and_last_stage():
    """DeepSpeed's _exec_reduce_tied_grads: with pipelining, each first-stage rank all-reduces
    its fp32 share of the tied embedding's gradient (vocab x d_model / TP, 4 bytes) with its
    counterpart on the last stage, after the backward and before the data-parallel reduction;
    the step waits for it. Without pipelining, or on the Megatron stack, there is none."""
    cfg = _options().config()
    (step,) = [s for _, s in cfg._plan().steps]
    tied = step.ops[0]
    a = GPT.arch
    assert (tied.name, tied.collective, tied.group, tied.phase) == (
        "tied embedding all-reduce", "all_reduce", "tied", "after_backward")
    assert tied.size_bytes == pytest.approx(a.vocab_size * a.d_model / 4 * 4, rel=1e-9)
    assert step.ops[1].name == "grad all-reduce"  # the data-parallel reduction comes after
    with_tied = simulate_step(cfg)
    without = simulate_step(cfg, the_plan=replace(
        cfg._plan(), steps=((1.0, replace(step, ops=step.ops[1:])),)))
    # 3.6 GB between two nodes: a two-rank ring sends S a rank (S/2 reduce-scattered, S/2
    # gathered) over the node's links, which its 8 GPUs share at once (every pair runs together)
    hw = load_hardware("jean-zay-a100")
    share = hw.nic.effective_Bps * hw.nic.nics_per_node / hw.node.gpus_per_node  # B/s a GPU
    floor = tied.size_bytes / share  # s
    assert 0.9 * floor <= with_tied.step_time_s - without.step_time_s <= 1.5 * floor
    assert with_tied.bytes_per_gpu > without.bytes_per_gpu
    for other in (_options(pp=1).config(), _options(stack="megatron").config()):
        assert all(op.group != "tied" for _, s in other._plan().steps for op in s.ops)
