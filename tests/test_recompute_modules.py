"""Megatron-Core's selective recomputation of named modules (vocabulary/recompute.py):
`--recompute-modules`, what each module frees (simulator/memory/activations.py) and what its
forward costs again (simulator/step/compute.py recompute_s, simulator/step/moe.py)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from profiles import UserError, load_hardware, load_model
from simulator.layout.shapes import Routing
from simulator.memory.activations import layer_memory, layer_tensors
from simulator.step.compute import fwd_bwd
from tests.test_cli import scape
from vocabulary.recompute import MODULES, check, combine, modules_of, recomputes, with_modules


def test_module_lists_are_read_as_megatron_writes_them():
    # spaces or commas, any order, each once: Megatron's order back
    assert with_modules("moe mla_up_proj, mlp") == "selective:mla_up_proj,mlp,moe"
    assert check("selective:moe,mlp") == "selective:mlp,moe"
    assert modules_of("selective") == {"core_attn"}
    assert modules_of("selective-norm") == {"core_attn", "layernorm"}
    assert modules_of("full") is None and modules_of("selective-op") is None
    assert recomputes("full", "moe") and recomputes("selective:moe", "moe")
    assert not recomputes("selective", "moe") and not recomputes("none", "core_attn")
    with pytest.raises(UserError, match="unknown module 'mla_upproj' \\(did you mean "
                                        "'mla_up_proj'"):
        with_modules("mla_upproj")
    with pytest.raises(UserError, match="give it with --recompute selective, not full"):
        combine("full", "mlp")
    with pytest.raises(UserError, match="must be one of"):
        check("selectiv")
    assert combine("selective", None) == "selective" and combine("none", "moe") == "selective:moe"


@pytest.mark.parametrize("name", ["llama-70b", "deepseek-v3", "mixtral-8x7b", "gpt-345m"])
def test_the_named_policies_are_their_module_sets(name):
    """selective is selective:core_attn and selective-norm is selective:core_attn,layernorm,
    kept and recomputed bytes alike, on dense, MoE and latent-attention models."""
    model = load_model(name)
    for named, modules in (("selective", "core_attn"), ("selective-norm", "core_attn,layernorm")):
        for attention in ("flash", "unfused"):
            a = layer_memory(model, False, attention, 4096, 2, True, named)
            b = layer_memory(model, False, attention, 4096, 2, True, f"selective:{modules}")
            assert a.kept == pytest.approx(b.kept, rel=1e-12)
            assert a.working == pytest.approx(b.working, rel=1e-12)


def test_each_module_frees_only_its_own_tensors_and_more_modules_keep_less():
    dsv3 = load_model("deepseek-v3")
    routing = Routing(64, 1, 1.0)

    def kept(policy: str, model=dsv3) -> float:
        return layer_memory(model, False, "flash", 4096, 1, False, policy, routing=routing
                            if model.moe else None).kept

    none = kept("none")
    for m in MODULES:
        assert kept(f"selective:{m}") <= none
    # every module adds to what is freed; full keeps the least
    assert kept("selective:mla_up_proj,mlp,moe") < kept("selective:mla_up_proj") < none
    assert kept("full") < kept("selective:mla_up_proj,mlp,moe")
    # moe recomputes the whole MoE layer: its activation and shared expert within it
    assert kept("selective:moe") == kept("selective:moe,moe_act,shared_experts")
    # a model without latent attention has no up-projection to recompute; without experts,
    # no MoE layer
    llama = load_model("llama-70b")
    assert kept("selective:mla_up_proj", llama) == kept("none", llama)
    assert kept("selective:moe,moe_act,shared_experts", llama) == kept("none", llama)
    assert kept("selective:mlp", llama) < kept("none", llama)


def test_latent_attention_keeps_its_per_head_queries_keys_and_values():
    """DeepSeek-V3's MLA (128 heads, 192-wide queries and keys, 128-wide values): the up-
    projected Q, K and V per token are 128 x (192 + 192 + 128) wide, and the attention output
    128 x 128, far more than the 7,168 of h; mla_up_proj frees Q, K and V."""
    m = load_model("deepseek-v3")
    mla = m.mla
    tensors = {t.name: t for t in layer_tensors(m.arch, m.family, False, "flash", 4096, mla=mla)}
    heads = m.arch.n_heads
    assert tensors["Q (up-projected, with rotary)"].bytes_per_token == 2 * heads * 192
    assert tensors["K (up-projected, with rotary)"].bytes_per_token == 2 * heads * 192
    assert tensors["V (up-projected)"].bytes_per_token == 2 * heads * 128
    assert tensors["attention output (projection input)"].bytes_per_token == 2 * heads * 128
    freed = {n for n, t in tensors.items() if "mla_up_proj" in t.freed_by}
    assert freed == {"Q (up-projected, with rotary)", "K (up-projected, with rotary)",
                     "V (up-projected)"}
    assert mla.qk_head_dim == 192 and mla.v_head_dim == 128


def test_recomputed_modules_cost_their_forward_again():
    model, hw = load_model("deepseek-v3"), load_hardware("dgx-h100")
    routing = Routing(64, 1, 1.0)

    def bwd(policy: str, **kw) -> float:
        return fwd_bwd(model, hw, 1, 4096, 1, recompute=policy, routing=routing, **kw).bwd_s

    none, full = bwd("none"), bwd("full")
    modules = bwd("selective:mla_up_proj,mlp,moe")
    assert none < bwd("selective:mla_up_proj") < modules < full
    assert bwd("selective:moe") == pytest.approx(bwd("selective:moe,moe_act,shared_experts"),
                                                 rel=1e-12)
    assert bwd("selective") == pytest.approx(bwd("selective:core_attn"), rel=1e-12)
    # at an MFU (no kernels), the modules' share of the layer's linear FLOPs
    at_mfu = [bwd(p, mfu=0.4) for p in ("none", "selective:mlp,moe", "full")]
    assert at_mfu[0] < at_mfu[1] < at_mfu[2]


def test_a_recomputed_moe_layer_dispatches_again_in_the_backward():
    from simulator.planning.options import Batch, Parallelism, StepOptions
    from simulator.step.moe import ep_bytes_per_layer, ep_layer_s

    def cfg(policy: str):
        return StepOptions("deepseek-v3", "dgx-h100", 512, batch=Batch(1, 4096, None, 512),
                           parallelism=Parallelism(pp=8, recompute=policy, ep=64,
                                                   etp=1)).config()

    plain, again = cfg("selective:mla_up_proj"), cfg("selective:mla_up_proj,moe")
    assert ep_layer_s(again, 0, 0)[1] == pytest.approx(2 * ep_layer_s(plain, 0, 0)[1],
                                                       rel=1e-12)
    assert ep_bytes_per_layer(again) == pytest.approx(1.5 * ep_bytes_per_layer(plain),
                                                      rel=1e-12)


def test_simulate_takes_recompute_modules_and_refuses_what_it_cannot_read(capsys):
    step = ("simulate", "-m", "deepseek-v3", "-H", "dgx-h100", "--gpus", "1024", "--pp", "8",
            "--tp", "2", "--ep", "64", "--etp", "1", "--global-batch", "8192", "--format",
            "json")
    code, out, err = scape(capsys, *step)
    assert code == 0, err
    import json

    (plain,) = json.loads(out)
    code, out, err = scape(capsys, *step, "--recompute-modules", "mla_up_proj mlp moe")
    assert code == 0, err
    (row,) = json.loads(out)
    assert row["recompute"] == "selective:mla_up_proj,mlp,moe"
    assert row["memory_activations_GB"] < plain["memory_activations_GB"] / 2
    assert row["step_time_s"] > plain["step_time_s"]
    for bad, match in ((("--recompute-modules", "mlpp"), "unknown module 'mlpp'"),
                       (("--recompute", "full", "--recompute-modules", "mlp"),
                        "give it with --recompute selective, not full")):
        code, _, err = scape(capsys, *step, *bad)
        assert code == 2 and match in err and "Traceback" not in err, err


def test_a_model_with_wider_queries_keeps_them_whole():
    """Queries and the attention output are heads x head width (Qwen3-30B-A3B: 32 x 128 =
    4,096 against h = 2,048)."""
    m = load_model("qwen3-30b-a3b")
    assert m.arch.q_width == 2 * m.arch.d_model
    tensors = {t.name: t for t in layer_tensors(m.arch, m.family, False, "flash", 4096)}
    assert tensors["Q"].bytes_per_token == 2 * m.arch.q_width
    assert tensors["attention output (projection input)"].bytes_per_token == 2 * m.arch.q_width
    narrow = replace(m.arch, head_width=m.arch.d_model // m.arch.n_heads)
    assert layer_memory(replace(m, arch=narrow), False, "flash", 4096, 1, False, "none").kept \
        < layer_memory(m, False, "flash", 4096, 1, False, "none").kept


def test_a_refused_moe_step_suggests_the_modules_its_recipes_recompute(capsys):
    """DeepSeek-V3 on 1,024 H100 without recomputation does not fit; Megatron's recipes
    recompute mla_up_proj, mlp and moe, which fits before full recomputation does."""
    code, _, err = scape(capsys, "simulate", "-m", "deepseek-v3", "-H", "dgx-h100", "--gpus",
                         "1024", "--pp", "8", "--ep", "64", "--etp", "1", "--global-batch",
                         "8192")
    assert code == 2 and "needs" in err
    hint = err.split("each of these fits", 1)[1]
    assert "--recompute-modules mla_up_proj,mlp,moe" in hint
    assert hint.index("--recompute-modules") < hint.index("--recompute full")


def test_the_planner_tries_module_recomputation_for_moe_and_latent_attention():
    """plan's ladder (simulator/planning/space.py recompute_order): for DeepSeek-V3, after the
    norms, the cheap modules then the recipes' MLP and MoE recomputation, before full; a dense
    model's ladder is unchanged. Each rung keeps no more than the one before it."""
    from simulator.planning.space import RECOMPUTE_ORDER, recompute_order

    assert recompute_order(load_model("llama-70b")) == RECOMPUTE_ORDER
    dsv3 = load_model("deepseek-v3")
    order = recompute_order(dsv3)
    assert order[:2] == ("none", "selective-norm") and order[-1] == "full"
    assert "selective:core_attn,layernorm,mla_up_proj,mlp,moe" in order
    megatron = [p for p in order if p != "selective-op"]
    kept = [layer_memory(dsv3, False, "flash", 4096, 1, True, p,
                         routing=Routing(64, 1, 1.0)).kept for p in megatron]
    assert kept == sorted(kept, reverse=True)
