"""The memory model (simulator/memory/activations.py, simulator/memory/peak.py): each term against
the formula it cites, and the runs published teams trained on 80 GB GPUs."""

from __future__ import annotations

import itertools
from dataclasses import replace

import pytest

from profiles import UserError, load_hardware, load_model
from scape.plan import Dtypes, make_config
from simulator.layout.pipeline import stage_layers
from simulator.memory.activations import in_flight, layer_memory, loss_bytes_per_token
from simulator.memory.peak import DEFAULT_RESERVE, memory_columns, memory_use, reserve, usable_bytes
from simulator.step.step_config import StepConfig


def test_gpt_layer_keeps_korthikantis_34_sbh_and_5_as2b_unfused():
    """Korthikanti et al. 2022 Table 2: 34 s b h + 5 a s^2 b bytes per GPT layer (with dropout),
    and FlashAttention keeps the log-sum-exp (4 bytes per head and token) for the s x s."""
    m = load_model("gpt-345m")
    h, a, s = m.arch.d_model, m.arch.n_heads, 1024
    flash = layer_memory(m, True, "flash", s, 1, False, "none")
    unfused = layer_memory(m, True, "unfused", s, 1, False, "none")
    assert flash.kept == pytest.approx(34 * h + 4 * a)
    assert unfused.kept == pytest.approx(34 * h + 5 * a * s)
    # sequence parallelism splits every term over the tensor-parallel ranks (34 s b h / t)
    assert layer_memory(m, True, "flash", s, 4, True, "none").kept == pytest.approx(
        (34 * h + 4 * a) / 4)
    # without it the norms' inputs and outputs and the masks stay whole: s b h (10 + 24 / t)
    assert layer_memory(m, True, "flash", s, 4, False, "none").kept == pytest.approx(
        10 * h + 24 * h / 4 + 4 * a / 4)


def test_llama_layer_has_no_masks_and_keeps_its_swiglu_and_narrow_kv():
    m = load_model("llama-405b")
    a = m.arch
    h, f, kv = a.d_model, a.d_ff, a.n_kv_heads * a.head_dim
    kept = layer_memory(m, m.dropout, "flash", 8192, 1, False, "none").kept
    # norms' inputs and outputs 8h, Q and O 4h, K and V 4kv, gate, up and product 6f
    assert not m.dropout and kept == pytest.approx(8 * h + 4 * h + 4 * kv + 6 * f + 4 * a.n_heads)


def test_policies_keep_less_in_order_and_full_keeps_the_input():
    m = load_model("llama-7b")
    h = m.arch.d_model
    kept = {p: layer_memory(m, False, "flash", 4096, 1, False, p).kept
            for p in ("none", "selective", "selective-norm", "selective-op", "full")}
    assert kept["none"] == kept["selective"]  # flash keeps no s x s to recompute
    assert kept["none"] - kept["selective-norm"] == pytest.approx(4 * h)  # two norm outputs
    assert kept["selective-norm"] > kept["selective-op"] > kept["full"] == 2 * h
    # what a recomputed layer materializes again is what it did not keep
    full = layer_memory(m, False, "flash", 4096, 1, False, "full")
    assert full.kept + full.working == pytest.approx(kept["none"])


def test_in_flight_follows_1f1b_and_megatrons_interleaving():
    # 1F1B: stage s holds min(p - s, m) micro-batches of its layers
    layers = stage_layers(32, 4)
    assert [in_flight(s, 4, 8, tuple(layers[s])) for s in range(4)] == [32, 24, 16, 8]
    assert in_flight(0, 4, 2, tuple(layers[0])) == 16  # fewer micro-batches than stages
    # interleaved: stage 0 holds L (1 + (p - 1) / (p v)) layer-micro-batches (Korthikanti
    # section 4.2.3) with enough micro-batches
    p, v, n = 4, 2, 32
    chunks = stage_layers(n, p, v)
    assert in_flight(0, p, 16, tuple(chunks[0])) == n * (1 + (p - 1) / (p * v))
    assert in_flight(0, 1, 1, (n,)) == n


def test_loss_only_on_the_last_stage_and_fused_keeps_less():
    m = load_model("llama-7b")
    fp32, fused = (loss_bytes_per_token(m, 1, k, False) for k in ("fp32", "fused"))
    assert fp32 - fused == pytest.approx(4 * m.arch.vocab_size)  # the fp32 softmax
    dt = Dtypes()
    flat = memory_use(m, make_config("dense-zero1"), 8, 1, 1, 4096, dt, micro_batches=8)
    piped = memory_use(m, make_config("dense-zero1"), 8, 1, 1, 4096, dt, pp=4, micro_batches=8)
    assert flat.loss > 0 and piped.stage == 0 and piped.loss == 0  # stage 0 peaks, no logits


def test_reserve_is_the_profiles_and_a_missing_table_says_default():
    hw = load_hardware("dgx-h100")
    held, which = reserve(hw)
    assert which == "profile" and held.device_MiB == 81559
    for comms in (0, 1, 3):
        outside = held.cuda_context_GiB + held.workspace_GiB + comms * held.nccl_communicator_GiB
        assert usable_bytes(hw, comms) == pytest.approx(
            (81559 * 2**20 - outside * 2**30) / (1 + held.fragmentation), rel=1e-12)
    # a lump, as profiles gave it before the parts: the same whatever the layout
    lump = replace(hw, memory=replace(held, cuda_context_GiB=None, workspace_GiB=None,
                                      nccl_communicator_GiB=None, context_GiB=2.5))
    assert usable_bytes(lump, 0) == usable_bytes(lump, 5) == pytest.approx(
        (81559 * 2**20 - 2.5 * 2**30) / (1 + held.fragmentation), rel=1e-12)
    bare = replace(hw, memory=None)
    held, which = reserve(bare)
    assert which == "default" and held.device_MiB * 2**20 == pytest.approx(80e9)
    assert held.nccl_communicator_GiB == DEFAULT_RESERVE["nccl_communicator_GiB"]


@pytest.mark.parametrize("layout, comms", [
    (dict(grad_ranks=1), 0),  # one GPU: no NCCL
    (dict(grad_ranks=64), 1),  # data parallel only
    (dict(grad_ranks=8, tp=8), 2),
    (dict(grad_ranks=128, tp=8, pp=16), 3),  # Llama 3 405B as Meta ran it
    (dict(grad_ranks=16, tp=8, pp=4, cp=2), 4),  # CP's ring is a group of its own
    (dict(grad_ranks=256, shard=8), 2),  # HSDP: shard group and replicas
    (dict(grad_ranks=256, shard=256), 1),  # a shard group of every rank is plain FSDP
    (dict(grad_ranks=64, tp=2, pp=8, ep=8, etp=1, edp=16), 5),  # EP all-to-all, expert DP, ETP 1
    (dict(grad_ranks=64, tp=2, pp=8, ep=8, etp=2, edp=8), 5),  # ETP = TP: the TP group
    (dict(grad_ranks=64, tp=2, pp=8, ep=8, etp=4, edp=4), 6),
])
def test_nccl_communicators_count_the_groups_a_step_uses(layout, comms):
    from simulator.memory.peak import nccl_communicators

    assert nccl_communicators(**layout) == comms


def test_a_step_with_more_groups_has_less_usable_memory():
    """The same model on the same GPUs: each process group a layout adds keeps its NCCL
    buffers outside the allocator, so memory_columns' usable memory falls by the profile's
    nccl_communicator_GiB over the allocator slack, and reserved + outside is the device's
    bytes where the step just fits."""
    hw = load_hardware("dgx-h100")
    held = reserve(hw)[0]
    model = load_model("llama-7b")
    cols = [memory_columns(StepConfig(model, hw, 64, make_config("dense-zero1"), micro_batch=1,
                                      global_batch=64, tp=tp, pp=pp).validate())
            for tp, pp in ((1, 1), (8, 1), (8, 2))]
    assert [c["nccl_communicators"] for c in cols] == [1, 2, 3]
    step = held.nccl_communicator_GiB * 2**30 / (1 + held.fragmentation) / 1e9
    for a, b in itertools.pairwise(cols):
        assert a["usable_memory_GB"] - b["usable_memory_GB"] == pytest.approx(step, rel=1e-9)
    for c in cols:
        assert c["memory_reserved_GB"] == pytest.approx(
            c["memory_GB"] * (1 + held.fragmentation), rel=1e-12)
        assert c["memory_reserved_GB"] + c["memory_outside_GB"] <= c["device_memory_GB"]


def test_llama3_405b_as_meta_ran_it_fits_without_recomputation():
    """Llama 3 paper section 3.3: 16,384 H100 80GB, TP 8, PP 16, DP 128, sequence 8192,
    micro-batch 1, no activation checkpointing, one layer fewer on the first and last stages
    (stage_layers' uneven split); FSDP sharding the optimizer state and the gradients, not the
    weights, and gradients reduce-scattered in fp32 (sections 3.3.2 and 3.3.4): ZeRO-2 with
    fp32 gradients. It ran, so the model must not refuse it; it is tight."""
    cfg = StepConfig(load_model("llama-405b"), load_hardware("dgx-h100"), 16384,
                     make_config("dense-zero2", optimizer="adamw"), micro_batch=1,
                     seq_len=8192, global_batch=2048, tp=8, pp=16,
                     dtypes=Dtypes(grad_bytes=4, param_bytes=2)).validate()
    assert stage_layers(126, 16)[0] == [7] and stage_layers(126, 16)[-1] == [7]
    cols = memory_columns(cfg)
    assert cols["fits_memory"] and 0 < cols["memory_spare_pct"] < 10
    # the GPT layer's dropout masks the old model kept for every layer: about 4 GB more, half
    # the spare (with ZeRO-1 and bf16 gradients, as this test read Meta's run before, they
    # made it refused)
    gpt_like = replace(cfg.model, arch=replace(cfg.model.arch, dropout=True))
    masks_GB = memory_columns(replace(cfg, model=gpt_like))["memory_GB"] - cols["memory_GB"]
    assert 3 < masks_GB < cols["usable_memory_GB"] - cols["memory_GB"]


def test_the_stages_priced_give_the_peak_every_stage_gives(monkeypatch):
    """memory_use prices only the stages that can peak (peak_candidates); over random
    pipelines, pricing every stage finds no higher one."""
    import random

    import simulator.memory.peak as mem

    rng = random.Random(3)
    schemes = [make_config("dense-zero1"), make_config("dense-ddp"),
               make_config("scape", sparsity=0.9), make_config("topk", sparsity=0.99)]
    checked = 0
    while checked < 150:
        model = load_model(rng.choice(["llama-70b", "llama-7b", "gpt-345m", "llama-405b"]))
        pp, v = rng.choice([2, 3, 4, 8, 16]), rng.choice([1, 1, 2, 3])
        tp = rng.choice([1, 2, 4, 8])
        if pp * v > model.arch.n_layers or not model.arch.splits_over(tp):
            continue
        m = rng.choice([1, pp, 2 * pp, 4 * pp]) if v == 1 else rng.choice([pp, 2 * pp])
        args = dict(model=model, scheme=rng.choice(schemes), dp=8, tp=tp, micro_batch=1,
                    seq_len=2048, dtypes=Dtypes(), pp=pp, chunks=v, micro_batches=m,
                    recompute=rng.choice(["none", "full", "selective-op"]))
        mem._stage_activations.cache_clear()  # remembered per layout: price it afresh
        fast = memory_use(**args)
        mem._stage_activations.cache_clear()
        monkeypatch.setattr(mem, "peak_candidates", lambda layers: list(range(len(layers))))
        slow = mem.memory_use(**args)
        monkeypatch.undo()
        mem._stage_activations.cache_clear()
        assert fast.total == pytest.approx(slow.total, rel=1e-12)
        checked += 1


def test_first_fit_is_the_first_policy_memory_use_fits():
    """The planner's first_fit prices the scheme's state once for every policy; its answer is
    the first policy whose memory_use fits, with that peak."""
    from simulator.memory.peak import first_fit

    order = ("none", "selective-norm", "selective-op", "full")
    model = load_model("llama-70b")
    hw = load_hardware("dgx-h100")
    usable = usable_bytes(hw, 2)
    from simulator.step.step_config import deepspeed_scheme

    # DeepSpeed's whole-gradient all-reduce, whose copy peaks where the state outweighs the
    # activations (fp32 gradients: its copy is 16-bit)
    ds = (deepspeed_scheme(make_config("dense-zero1")), Dtypes(param_bytes=2, grad_bytes=4))
    for scheme, dt in ((make_config("dense-zero1"), Dtypes()),
                       (make_config("scape", sparsity=0.99), Dtypes()), ds):
        for tp, pp, m in ((8, 1, 8), (8, 4, 16), (4, 8, 32), (8, 2, 4)):
            args = (model, scheme, 16, tp, 1, 4096, dt)
            fit = first_fit(*args, order, usable, pp, 1, m)
            uses = [memory_use(*args, rc, True, pp, 1, "flash", m) for rc in order]
            first = next((rc for rc, u in zip(order, uses, strict=True)
                          if u.total <= usable), None)
            if first is None:
                assert fit is None
            else:
                assert fit[0] == first
                assert fit[1] == pytest.approx(uses[order.index(first)].total, rel=1e-12)


def test_sharded_state_is_16_bytes_a_parameter_for_zero3_and_fsdp():
    """DeepSpeed ZeRO-3 keeps a bf16 shard beside the fp32 master (2 + 2 + 12 bytes over the
    ranks); FSDP's mixed precision reduces in fp32 and its sharded parameter is the fp32
    master (4 + 4 + 8): both 16 bytes a parameter over the ranks, plus the gathered units."""
    from simulator.memory.peak import state_bytes

    model = load_model("llama-7b")
    n, dp = 1e9, 64
    unit = model.layer_params
    for grad_bytes in (2, 4):
        w, g, o, _ = state_bytes(model, make_config("dense-zero3", optimizer="adamw"), n, dp,
                                 1, Dtypes(grad_bytes=grad_bytes))
        gathered = 2 * 2 * unit + grad_bytes * unit  # two bf16 units, one unit's gradient
        assert w + g + o - gathered == pytest.approx(16 * n / dp)


def test_torchtitan_keeps_gathered_inputs_the_loss_parallel_peak_and_pipeline_buffers():
    """The torchtitan stack (issue 39; docs/research/memory-terms.md section 12): its TP
    linears save their sequence-gathered inputs (2 x 2h bytes a token unsharded, where Megatron
    keeps them split over TP), the loss-parallel cross-entropy peaks at 16 bytes a logit and
    the output layer saves its gathered input; PyTorch's pipelining kept, per micro-batch,
    receive buffers and outputs (the bf16 logits on the last stage) before 2025. Without TP or
    PP the two stacks agree."""
    from simulator.memory.activations import layer_memory, pipeline_buffers_per_token

    m = load_model("llama-70b")
    h, v, tp = m.arch.d_model, m.arch.vocab_size, 8
    mega = layer_memory(m, False, "flash", 4096, tp, True, "none", "megatron").kept
    titan = layer_memory(m, False, "flash", 4096, tp, True, "none", "torchtitan").kept
    assert titan - mega == pytest.approx(2 * 2 * h * (1 - 1 / tp))
    assert layer_memory(m, False, "flash", 4096, 1, False, "none", "torchtitan").kept == (
        layer_memory(m, False, "flash", 4096, 1, False, "none", "megatron").kept)
    eager = loss_bytes_per_token(m, tp, "eager", True, "megatron")
    parallel = loss_bytes_per_token(m, tp, "eager", True, "torchtitan")
    assert parallel - eager == pytest.approx(4 * v / tp + 2 * h * (1 - 1 / tp))
    assert loss_bytes_per_token(m, 1, "eager", False, "torchtitan") == (
        loss_bytes_per_token(m, 1, "eager", False, "megatron"))
    hidden = 2 * h / tp
    # as PyTorch's pipelining kept them before 2025 (tests/test_eager.py: today's, without)
    kept = {"stack": "torchtitan", "kept_outputs": True}
    assert pipeline_buffers_per_token(m, tp, 8, True, False, **kept) == 8 * 2 * hidden
    assert pipeline_buffers_per_token(m, tp, 8, False, False, **kept) == 8 * 4 * hidden
    assert pipeline_buffers_per_token(m, tp, 8, False, True, **kept) == pytest.approx(
        8 * (2 * hidden + 2 * v / tp))
    assert pipeline_buffers_per_token(m, tp, 8, False, True, "megatron") == 0
    dt = Dtypes(grad_bytes=4)
    args = (m, make_config("dense-zero1"), 8, tp, 1, 4096, dt)
    kw = {"pp": 4, "micro_batches": 8, "recompute": "full", "loss": "eager"}
    assert (memory_use(*args, stack="torchtitan", **kw).total
            > memory_use(*args, stack="megatron", **kw).total)
    with pytest.raises(UserError, match="--stack"):
        memory_use(*args, stack="colossalai", **kw)


def test_transformer_engine_fp8_keeps_linear_inputs_in_one_byte():
    """Megatron-Core's --fp8 (Transformer Engine): the linears save the FP8 copies of their
    inputs (QKV, fc1 and fc2 inputs, the experts' and latent attention's up-projections'), one
    byte an element, and the projection's FP8 input beside the attention kernel's 16-bit
    output; torchtitan's float8 (torchao) is priced as 16-bit, as its published peaks are
    (simulator/memory/activations.py fp8_saved)."""
    from simulator.memory.activations import fp8_saved, layer_tensors

    m = load_model("llama-70b")
    a, h, f = m.arch, m.arch.d_model, m.arch.d_ff
    plain = {t.name: t.bytes_per_token for t in layer_tensors(a, m.family, False, "flash", 4096)}
    fp8 = {t.name: t.bytes_per_token
           for t in fp8_saved(layer_tensors(a, m.family, False, "flash", 4096))}
    assert fp8["QKV input (norm1 output)"] == h and plain["QKV input (norm1 output)"] == 2 * h
    assert fp8["activation output (fc2 input)"] == f
    assert fp8["fc1 gate output"] == plain["fc1 gate output"] == 2 * f  # SwiGLU reads it
    assert fp8["projection input (FP8 copy)"] == a.q_width
    assert fp8["attention output (projection input)"] == 2 * a.q_width
    # per token: h + h + f saved, the projection's copy q_width added
    assert sum(plain.values()) - sum(fp8.values()) == h + h + f - a.q_width
    for stack, less in (("megatron", True), ("torchtitan", False)):
        on = layer_memory(m, False, "flash", 4096, 8, True, "none", stack, None, True).kept
        off = layer_memory(m, False, "flash", 4096, 8, True, "none", stack, None, False).kept
        assert (on < off) == less and (on == off) != less


def test_precision_aware_optimizer_keeps_fp32_master_and_bf16_moments():
    """--optimizer-dtype bf16-moments (Megatron-Core's --use-precision-aware-optimizer with
    --exp-avg-dtype bf16 --exp-avg-sq-dtype bf16): 4 + 2 + 2 B a parameter for AdamW, between
    fp32's 12 and NeMo's bf16 with 16-bit remainders (6)."""
    from simulator.memory.peak import OPTIMIZER_STATE_BYTES

    m, dt = load_model("llama-7b"), Dtypes()
    opt = {d: memory_use(m, make_config("dense-ddp", optimizer="adamw"), 1, 1, 1, 2048, dt,
                         optimizer_dtype=d).optimizer for d in ("fp32", "bf16", "bf16-moments")}
    assert opt["bf16-moments"] == pytest.approx(opt["fp32"] * 8 / 12, rel=1e-12)
    assert opt["bf16"] < opt["bf16-moments"] < opt["fp32"]
    assert OPTIMIZER_STATE_BYTES["adams", "bf16-moments"] == 6  # AdamS: no second moment
