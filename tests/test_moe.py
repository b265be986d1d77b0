"""Mixture-of-experts end to end (issue 57): model files with experts and latent attention,
expert parallelism in the step (dispatch and combine, expert gradients over their own group),
memory sharded by EP, the planner searching EP, and the refusals of bad layouts."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import pytest

from profiles import UserError, load_hardware, load_model
from simulator.memory.peak import step_memory
from simulator.planning.options import Batch, Parallelism, SchemeOptions, StepOptions
from simulator.step.moe import ep_bytes_per_layer, moe_layer_s, routed_tokens
from simulator.step.simulate import simulate_step
from simulator.step.step_config import StepConfig


def _cfg(model="mixtral-8x7b", hardware="dgx-h100", gpus=64, seq=4096, scheme="dense-adams",
         accum=None, **parallel) -> StepConfig:
    """One micro-batch per GPU at `seq` tokens (`accum` of them a step where given), TP 1
    unless given."""
    return StepOptions(model, hardware, gpus, scheme=SchemeOptions(scheme),
                       batch=Batch(1, seq, accum, None),
                       parallelism=Parallelism(**{"tp": 1, **parallel})).config()


@pytest.mark.parametrize("name, published", [
    # DeepSeek-V3 report (arXiv 2412.19437) abstract: '671B total parameters with 37B
    # activated for each token'; Mixtral paper (arXiv 2401.04088) section 2: '47B parameters,
    # but only uses 13B active parameters during inference'; Qwen3-30B-A3B: 3.3B activated
    # (Qwen3 technical report Table 2)
    ("deepseek-v3", 37e9), ("mixtral-8x7b", 13e9), ("qwen3-30b-a3b", 3.3e9)])
def test_active_parameters_match_the_published_figures(name, published):
    """A token's active parameters (its top-k experts, the shared ones, attention and the
    embedding) within 5% of the published figure, which rounds to two digits."""
    model = load_model(name)
    assert model.active_params == pytest.approx(published, rel=0.05)
    assert model.active_params < 0.3 * model.n_params  # sparse: a fraction of the total


def test_dense_models_keep_their_tensors_and_counts():
    """The per-layer inventory gives a dense model the tensors and count it had: Llama-7B's
    six tensors per layer in Megatron-Core's order, summing to its published count."""
    m = load_model("llama-7b")
    layer = m.tensors()[1:7]
    h, f = m.arch.d_model, m.arch.d_ff
    assert layer == [(h, True), (3 * h * h, False), (h * h, False), (h, True),
                     (2 * f * h, False), (f * h, False)]
    assert sum(s for s, _ in m.tensors()) == m.n_params == 6_738_415_616
    assert m.moe is None and m.expert_layer_params == 0.0
    assert m.active_layer_params == m.layer_params


def test_expert_tensors_cover_the_routed_experts():
    """Dense tensors plus every routed expert's tensors are the whole model; a stage of the
    first k layers holds the experts of its MoE layers only (DeepSeek-V3's first three layers
    are dense)."""
    m = load_model("deepseek-v3")
    every = m.stage_expert_tensors(m.arch.n_layers)
    assert sum(s for s, _ in m.tensors()) + sum(s for s, _ in every) == m.n_params
    assert m.stage_expert_tensors(3) == []
    one_layer = sum(s for s, _ in m.stage_expert_tensors(4))
    assert one_layer == 256 * 3 * 7168 * 2048


@pytest.mark.parametrize("text, expect", [
    ("top_k = 9", "top_k: a token picks at most the 8 experts"),
    ("first_dense_layers = 32", "no layer of the 32 has experts"),
    ("groups = 3\ngroup_topk = 1", "groups: must divide the 8 experts, got 3"),
    ("groups = 4", "give both or neither"),
    ("groups = 4\ngroup_topk = 5", "group_topk: at most the 4 groups"),
    ("groups = 8\ngroup_topk = 1", "hold fewer than the top_k 2"),
])
def test_a_bad_moe_table_is_refused_with_its_rule(tmp_path, text, expect):
    src = load_model("mixtral-8x7b").path
    body = Path(src).read_text()
    keys = [line.split(" = ")[0] for line in text.splitlines()]
    lines = [ln for ln in body.splitlines() if not any(ln.startswith(f"{k} =") for k in keys)]
    at = lines.index("[moe]") + 1
    lines.insert(at, text)
    path = tmp_path / "bad-moe.toml"
    path.write_text("\n".join(lines).replace('name = "mixtral-8x7b"', 'name = "bad-moe"'))
    with pytest.raises(UserError, match=expect):
        load_model(str(path))


def test_expert_parallelism_shards_the_experts_memory():
    """EP 8 holds an eighth of Mixtral's experts per GPU: weights fall by close to 7/8 of the
    expert share, and the expert optimizer state shards over the expert data-parallel ranks."""
    one, eight = _cfg(ep=1), _cfg(ep=8)
    m = one.model
    experts = m.arch.n_layers * m.expert_layer_params
    w1, w8 = step_memory(one).weights, step_memory(eight).weights
    assert w1 - w8 == pytest.approx(2 * experts * 7 / 8, rel=1e-9)  # bf16 weights
    assert eight.edp == 64 // 8 and one.edp == 64


def test_dispatch_and_combine_are_priced_per_layer_and_cross_nodes():
    """EP 1 sends nothing; EP 8 inside a node and EP 16 across two: the per-layer all-to-alls
    cost more once they leave the NVLink domain; their bytes are tokens x top-k x h x 2 bytes
    x (EP-1)/EP, four times a layer (dispatch and combine, forward and backward)."""
    assert moe_layer_s(_cfg(ep=1)) == 0.0
    inside, across = _cfg(ep=8), _cfg(ep=16, model="qwen3-30b-a3b")
    assert moe_layer_s(inside) > 0
    cfg8q = _cfg(ep=8, model="qwen3-30b-a3b")
    assert moe_layer_s(across) > moe_layer_s(cfg8q)
    m = inside.model
    size = routed_tokens(inside) * m.moe.top_k * m.arch.d_model * 2
    assert ep_bytes_per_layer(inside) == pytest.approx(4 * size * 7 / 8, rel=1e-12)


def test_load_imbalance_and_overlap_move_the_dispatch():
    """A max/mean load of 2 makes the busiest rank's all-to-all about twice as long; the
    overlap with another micro-batch's compute hides some of it."""
    even = simulate_step(_cfg(ep=8, model="qwen3-30b-a3b", accum=8))
    skewed = simulate_step(_cfg(ep=8, model="qwen3-30b-a3b", accum=8, moe_imbalance=2.0))
    hidden = simulate_step(_cfg(ep=8, model="qwen3-30b-a3b", accum=8, moe_overlap=True))
    assert even.ep_comm_s > 0
    assert skewed.ep_comm_s == pytest.approx(2 * even.ep_comm_s, rel=0.15)
    assert hidden.ep_comm_s < even.ep_comm_s


def test_the_overlap_leaves_the_passes_it_cannot_pair_exposed():
    """Megatron-Core's overlap pairs a forward with another micro-batch's backward
    (combined_1f1b.py): one micro-batch a step has nothing beside it, so nothing is hidden;
    without pipelining 1 of m forwards and backwards run alone, interleaved p of m (the mean
    rank's warm-up and cool-down), and what stays exposed grows as m shrinks."""
    from simulator.step.moe import unpaired_share

    def ep_s(accum, **more):
        return simulate_step(_cfg(ep=8, model="qwen3-30b-a3b", accum=accum, **more)).ep_comm_s

    assert ep_s(1, moe_overlap=True) == pytest.approx(ep_s(1), rel=1e-12)
    exposed = [ep_s(m, moe_overlap=True) / ep_s(m) for m in (2, 4, 16)]
    assert exposed[0] > exposed[1] > exposed[2] and exposed[0] < 1
    assert unpaired_share(_cfg(ep=8, accum=16, moe_overlap=True)) == pytest.approx(1 / 16)
    inter = _cfg(ep=8, gpus=64, accum=32, pp=4, pp_schedule="interleaved", virtual_stages=2,
                 moe_overlap=True)
    assert unpaired_share(inter) == pytest.approx(4 / 32)
    assert unpaired_share(replace(inter, global_batch=None, grad_accum=2)) == 1.0


@pytest.mark.parametrize("scheme", ["dense-ddp", "dense-adams", "quantized:8", "topk:0.99",
                                    "scalecom:0.99", "scape:0.99", "scape-partitioned:0.99"])
def test_every_scheme_reduces_the_expert_gradients_over_their_own_group(scheme):
    """Every scheme's plan covers the experts: the step carries ops over the expert
    data-parallel group, and its bytes include the expert gradients'."""
    cfg = _cfg(ep=8, scheme=scheme)
    experts = cfg._expert_plan()
    assert experts is not None
    assert any(op.collective for _, s in experts.steps for op in s.ops)
    result = simulate_step(cfg)
    dense_only = cfg._plan().wire_bytes(cfg.grad_ranks, cfg.accum)
    assert result.bytes_per_gpu > dense_only


def test_scape_sends_fewer_expert_bytes_than_dense():
    dense, scape = _cfg(ep=8, scheme="dense-ddp"), _cfg(ep=8, scheme="scape:0.99")
    assert (scape._expert_plan().wire_bytes(scape.edp)
            < 0.1 * dense._expert_plan().wire_bytes(dense.edp))


@pytest.mark.parametrize("parallel, expect", [
    ({"ep": 3}, "--ep 3 must divide the 8 experts"),
    ({"ep": 8, "etp": 16}, "must divide the 64 GPUs"),
    ({"ep": 4, "moe_imbalance": 5.0}, "between 1 \\(even\\) and --ep"),
    ({"ep": 8, "moe_imbalance": 0.5}, "between 1 \\(even\\) and --ep"),
])
def test_bad_expert_layouts_are_refused_with_the_rule(parallel, expect):
    with pytest.raises(UserError, match=expect):
        _cfg(**parallel)


def test_expert_options_on_a_dense_model_are_refused():
    with pytest.raises(UserError, match="has no experts"):
        StepOptions("llama-7b", "dgx-h100", 8, parallelism=Parallelism(ep=2)).config()


def test_tensor_parallelism_across_two_nodes_is_priced_not_refused():
    """TP 16 over two H100 nodes: accepted, said in a note, and its per-layer collectives
    cost more than TP 8's inside a node."""
    opts = StepOptions("gpt3-175b", "dgx-h100", 32, batch=Batch(1, 2048, None, None))
    tp16 = replace(opts, parallelism=Parallelism(tp=16)).config()
    tp8 = replace(opts, parallelism=Parallelism(tp=8)).config()
    assert any("spans 2 NVLink domains" in n for n in tp16.notes())
    r16, r8 = simulate_step(tp16), simulate_step(tp8)
    assert r16.tp_comm_s > r8.tp_comm_s


def test_an_nvl72_rack_is_one_nvlink_domain():
    """GB200 NVL72: 72 GPUs share NVLink; an all-reduce over them never leaves the rack (no NIC
    link carries its flows), and TP 16 or EP 64 stay inside it."""
    from simulator.network.topology import build_topology

    hw = load_hardware("gb200-nvl72")
    topo = build_topology(hw, 72)
    assert topo.nodes == 1 and topo.gpus_per_node == 72
    two = build_topology(hw, 144)
    assert two.nodes == 2 and two.nics_per_node == 72  # 18 trays x 4 NICs
    # 512 GPUs use 64 of each rack's 72 (16 of 18 trays): EP 64 stays on one rack's NVLink
    assert build_topology(hw, 512).gpus_per_node == 64
    cfg = _cfg(model="deepseek-v3", hardware="gb200-nvl72", gpus=512, pp=8, ep=64, tp=1)
    assert cfg.notes() == []
    across = _cfg(model="deepseek-v3", hardware="dgx-h100", gpus=512, pp=8, ep=64, tp=1)
    assert moe_layer_s(cfg) < moe_layer_s(across)


def test_an_nvlink_domain_smaller_than_the_node_is_refused(tmp_path):
    text = Path(load_hardware("dgx-h100").path).read_text().replace(
        "gpus_per_node = 8", "gpus_per_node = 8\nnvlink_domain_gpus = 4")
    path = tmp_path / "small-domain.toml"
    path.write_text(text.replace('name = "dgx-h100"', 'name = "small-domain"'))
    with pytest.raises(UserError, match=r"an NVLink domain is whole nodes.*nearest valid: 8"):
        load_hardware(str(path))


def test_fp8_prices_on_blackwell():
    """B200 now carries a sourced FP8 rate: --fp8 is priced, and faster than BF16."""
    opts = StepOptions("llama3-8b", "dgx-b200", 8, batch=Batch(1, 8192, None, None))
    bf16 = simulate_step(opts.config())
    fp8 = simulate_step(replace(opts, precision=replace(opts.precision, fp8=True)).config())
    assert fp8.compute_s < bf16.compute_s


def test_the_planner_searches_expert_parallelism():
    """A MoE model's plans carry EP, searched: every plan's EP divides the experts."""
    from simulator.planning.plan_request import PlanRequest
    from simulator.planning.planner import plan_training

    req = PlanRequest(load_model("qwen3-30b-a3b"), 1e11, (load_hardware("dgx-h100"),),
                      max_gpus=64, global_batch=256, schemes=("dense-adams", "scape:0.99"),
                      workers=1).validate()
    df = plan_training(req, keep=5)
    assert "ep" in df.columns and len(df) > 0
    assert all(128 % e == 0 for e in df["ep"]) and df["ep"].iloc[0] > 1
    assert math.isfinite(df["hours"].iloc[0])


def test_a_job_inside_one_rack_places_any_group_dividing_it():
    """64 GPUs of one GB200 NVL72 rack: EP 64 is all NVLink (Megatron-Bridge's gpt-oss-120b
    runs so), and the job's collectives may take NCCL's NVLS all-gather and reduce-scatter
    inside the domain."""
    from simulator.network.collective import collective_time

    cfg = _cfg(model="gpt-oss-120b", hardware="gb200-nvl72", gpus=64, ep=64)
    assert cfg.domain == 64 and cfg.notes() == []
    hw = load_hardware("gb200-nvl72")
    for op in ("all_gather", "reduce_scatter"):
        nvls = collective_time(hw, 32, op, "nvls", 256 * 2**20)
        ring = collective_time(hw, 32, op, "ring", 256 * 2**20)
        # the switch multicasts or reduces, but a port still carries about S: NVLS's gain is
        # latency and SMs, not bandwidth, at this size (within its efficiency of the ring)
        assert ring.time_s < nvls.time_s < 1.5 * ring.time_s


def test_the_flex_dispatcher_sends_one_copy_a_gpu_and_a_remote_domain():
    """DeepEP/HybridEP (Megatron-Core's flex dispatcher) send a token once to each GPU holding
    one of its experts (DeepEP's token-by-rank dispatch mask), where the all-to-all dispatcher
    sends one copy per expert. DeepSeek-V3 on EP 8 holds one of its 8 expert groups a GPU and
    routes a token to 4 groups, its 8 experts drawn from their 128: a GPU is reached unless its
    group is not chosen (1/2) or is chosen and gets none of the 8 (1/2 x C(96, 8) / C(128, 8)),
    3.63 GPUs of the all-to-all's 8 copies. Across four
    8-GPU nodes a token also crosses the network once per node holding one of its 8 experts
    (3.6 of 4 on average, not 7 of 8 copies), so the layer's dispatch and combine take less
    time still."""
    from math import comb

    from simulator.step.moe import ep_bytes_per_layer

    gpus_reached = 8 * (1 - (0.5 + 0.5 * comb(96, 8) / comb(128, 8)))
    assert gpus_reached == pytest.approx(3.63, abs=0.005)
    inside = [_cfg(model="deepseek-v3", gpus=64, pp=8, ep=8, moe_dispatcher=d)
              for d in ("alltoall", "flex")]
    assert ep_bytes_per_layer(inside[1]) == pytest.approx(
        gpus_reached / 8 * ep_bytes_per_layer(inside[0]), rel=1e-12)
    assert moe_layer_s(inside[1]) < moe_layer_s(inside[0])
    across = [moe_layer_s(_cfg(model="deepseek-v3", gpus=256, pp=8, ep=32,
                               moe_dispatcher=d)) for d in ("alltoall", "flex")]
    assert across[1] < 0.75 * across[0]


def test_deepep_traffic_does_not_pay_nccls_all_to_all_latency():
    """The all-to-all latency dgx-h100 fitted on NCCL's alltoall_perf (its proxy's cost per
    peer) prices NCCL's grouped send/recv; DeepEP/HybridEP (`flex`) send with their own kernels
    and keep P - 1 steps, as a profile without the fitted pair prices them."""
    from simulator.step.moe import _collective_s

    hw = load_hardware("dgx-h100")
    bare = replace(hw, nccl=replace(hw.nccl, a2a_call_us=None, a2a_peer_us=None))
    args = ("all_to_all", "auto", 64, 1, 64e6)
    assert _collective_s(hw, *args, nccl_p2p=False) == pytest.approx(
        _collective_s(bare, *args), rel=1e-12)
    assert _collective_s(hw, *args) < _collective_s(bare, *args)  # 150 + 56 x 3.5 < 63 x 14 us


def test_a_sliding_window_cuts_the_attention_of_the_layers_that_use_it(tmp_path):
    """gpt-oss attends through a 128-token window on every other layer (openai/gpt-oss
    model.py): at 4,096 tokens a windowed layer does (4096 x 128 - 128 x 127 / 2) of the
    4096 x 4097 / 2 causal score products, so the mean layer's attention is 0.531 of the full
    one; at a sequence within the window nothing changes; a window without its share is
    refused."""
    from profiles import ProfileError
    from simulator.layout.shapes import layer_shapes

    m = load_model("gpt-oss-120b")
    s, w = 4096, 128
    local = (s * w - w * (w - 1) / 2) / (s * (s + 1) / 2)
    assert m.arch.attention_share(s) == pytest.approx(0.5 + 0.5 * local, rel=1e-12)
    assert m.arch.attention_share(w) == 1.0
    full = replace(m, arch=replace(m.arch, sliding_window=None, sliding_window_share=None))
    windowed, whole = layer_shapes(m, 1, s), layer_shapes(full, 1, s)
    assert windowed.attention_flops == pytest.approx(
        m.arch.attention_share(s) * whole.attention_flops, rel=1e-12)
    assert windowed.gemms == whole.gemms  # parameters and GEMMs as before
    text = Path(m.path).read_text().replace("sliding_window_share = 0.5\n", "")
    half = tmp_path / "half.toml"
    half.write_text(text)
    with pytest.raises(ProfileError, match="give both or neither"):
        load_model(str(half))


def test_megatron_cores_overlap_hides_the_profiles_share_of_what_it_could():
    """dgx-h100's [compute] ep_overlap_share (0.65, fitted on two published A/B pairs) scales
    what the overlap hides on Megatron-Core's schedules: a share of 1 hides all the pairing
    would, 0 nothing; a non-interleaved pipeline (DualPipe's) keeps all of it. The shipped
    value is the mean of bench/moe_overlap_fit.py's pairs."""
    import statistics
    import sys

    from simulator.step.moe import overlap_share

    def ep(share, **more):
        hw = load_hardware("dgx-h100")
        hw = replace(hw, compute=replace(hw.compute, ep_overlap_share=share))
        cfg = replace(_cfg(ep=16, gpus=16, model="qwen3-30b-a3b", accum=64, moe_overlap=True,
                           **more), hardware=hw)
        return simulate_step(cfg).ep_comm_s, overlap_share(cfg)

    off = simulate_step(_cfg(ep=16, gpus=16, model="qwen3-30b-a3b", accum=64)).ep_comm_s
    (all_hidden, one), (none, zero), (unset, share) = ep(1.0), ep(0.0), ep(None)
    assert (one, zero, share) == (1.0, 0.0, 1.0) and unset == all_hidden  # None: all of it
    assert none == pytest.approx(off, rel=1e-9) and all_hidden < none
    (partly, s) = ep(0.6)
    assert s == 0.6 and partly == pytest.approx(all_hidden + 0.4 * (off - all_hidden), rel=1e-4)
    dual = _cfg(ep=8, gpus=64, accum=32, pp=4, moe_overlap=True)
    assert overlap_share(dual) == 1.0  # not Megatron-Core's schedule
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
    import moe_overlap_fit

    fitted = moe_overlap_fit.fit(load_hardware("dgx-h100"))
    assert load_hardware("dgx-h100").compute.ep_overlap_share == pytest.approx(
        statistics.mean(fitted["share"]), abs=0.005)


@pytest.mark.parametrize("domains", [2, 4, 8, 16, 32])
def test_node_limited_routing_copies_match_counting_every_choice(domains):
    """simulator/step/moe.py domain_copies, DeepSeek-V3's 4 of 8 groups: the expected
    domains a token's 8 experts reach, against counting every choice of 4 groups (each
    equally likely) and the chance a domain's experts among them are all missed; without
    the limit, the plain draw of 8 of 256. The limit never adds a copy."""
    from itertools import combinations

    from simulator.step.moe import domain_copies

    moe = load_model("deepseek-v3").moe
    e, k, g, tg = moe.n_experts, moe.top_k, moe.groups, moe.group_topk
    size, total = e // g, 0.0
    for chosen in combinations(range(g), tg):
        experts = [x for grp in chosen for x in range(grp * size, (grp + 1) * size)]
        held = [sum(1 for x in experts if x * domains // e == d) for d in range(domains)]
        pool = len(experts)
        total += sum(1 - math.comb(pool - n, k) / math.comb(pool, k) for n in held)
    expected = total / math.comb(g, tg)
    assert domain_copies(moe, domains) == pytest.approx(expected, rel=1e-12)
    free = replace(moe, groups=None, group_topk=None)
    plain = domains * (1 - math.comb(e - e // domains, k) / math.comb(e, k))
    assert domain_copies(free, domains) == pytest.approx(plain, rel=1e-12)
    assert domain_copies(moe, domains) <= plain


def test_mtp_layers_are_priced_on_the_last_stage():
    """--mtp-layers: each MTP layer is a layer and the output layer and loss again, on the
    last pipeline stage (its time, its parameters and logits), so the step and the last
    stage's memory grow; without pipelining too."""
    base = dict(model="deepseek-v3", gpus=256, pp=8, ep=32, recompute="full")
    plain, mtp = (_cfg(**base, mtp_layers=m) for m in (None, 1))
    assert mtp.mtp_layers == 1 and plain.mtp_layers == 0
    assert simulate_step(mtp).step_time_s > simulate_step(plain).step_time_s
    one = _cfg(model="mixtral-8x7b", gpus=8, ep=8, mtp_layers=1, recompute="full")
    none = _cfg(model="mixtral-8x7b", gpus=8, ep=8, recompute="full")
    assert simulate_step(one).step_time_s > simulate_step(none).step_time_s
    # one stage: its parameters (a layer, the projection) and a second logits tensor
    grown = step_memory(one).total - step_memory(none).total
    assert grown > one.model.layer_params / 8 * 2  # at least the layer's bf16 weights
    with pytest.raises(UserError, match="--mtp-layers must be 0 or more"):
        _cfg(**base, mtp_layers=-1)


@pytest.mark.parametrize("layout, chunks, expect", [
    ("Et*4|(t*4|)*14tmL", 4, ((4, 4, 4, 4), (4, 4, 4, 4), (4, 4, 4, 4), (4, 4, 4, 1))),
    ("Et*16|t*16|t*16|t*13mL", 1, ((16,), (16,), (16,), (13,))),
])
def test_a_megatron_pipeline_layout_places_the_decoder_layers(layout, chunks, expect):
    """--pipeline-model-parallel-layout as Megatron-Core writes it (Megatron-Bridge's
    DeepSeek-V3 layouts): virtual stage j on rank j mod PP as its chunk j // PP."""
    cfg = _cfg(model="deepseek-v3", gpus=256, pp=4, ep=64, mtp_layers=1, pp_layout=layout,
               **({"pp_schedule": "interleaved", "virtual_stages": chunks} if chunks > 1
                  else {}))
    assert tuple(map(tuple, cfg.layer_split())) == expect
    assert cfg.stage0_layers == sum(expect[0])
    even = replace(cfg, pp_layout=None)
    assert simulate_step(cfg).step_time_s != simulate_step(even).step_time_s


@pytest.mark.parametrize("layout, mtp, expect", [
    ("Et*4|(t*4|)*14tmL", 1, "16 virtual stages, the layout has 4"),
    ("Et*16|t*16|t*16|t*14mL", 1, "62 decoder layers"),
    ("t*16|Et*16|t*16|t*13mL", 1, "one 'E'"),
    ("Et*16|t*16|t*16L|t*13m", 1, "one 'L'"),
    ("Et*16|t*16|t*16|t*13mL", 0, "1 'm' units where --mtp-layers is 0"),
    ("Et*16|t*16m|t*16|t*13L", 1, "they go in the last virtual stage"),
    ("Et*16|(t*16|t*16|t*13L", 0, "not closed"),
    ("Et*16|t*16|t*16|t*13Lx", 0, "unexpected 'x'"),
])
def test_a_layout_that_does_not_fit_is_refused_with_its_rule(layout, mtp, expect):
    with pytest.raises(UserError, match=expect):
        _cfg(model="deepseek-v3", gpus=256, pp=4, ep=64, mtp_layers=mtp, pp_layout=layout)
