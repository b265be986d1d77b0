"""Communication plans: bytes per scheme as DESIGN section 4 states them; compression off is
the dense counterpart exactly; bad options are one-line user errors."""

from __future__ import annotations

import pytest

from profiles import UserError
from scape.plan import Dtypes, make_config, mask_bytes, plan

N, P = 10_000_000, 8
DT = Dtypes(grad_bytes=2, param_bytes=2)


def wire(name, **opts):
    return plan(make_config(name, **opts), N, P, DT).wire_bytes(P)


@pytest.mark.parametrize(("name", "opts", "dense"), [
    ("topk", {"sparsity": 0.0}, "dense-ddp"),
    ("scalecom", {"sparsity": 0.0}, "dense-ddp"),
    ("quantized", {"bits": 16}, "dense-ddp"),
    ("scape-partitioned", {"sparsity": 0.0}, "dense-adams"),
])
def test_compression_off_is_the_dense_plan(name, opts, dense):
    off = plan(make_config(name, **opts), N, P, DT)
    ref = plan(make_config(dense), N, P, DT)
    assert off.steps == ref.steps


def test_bytes_per_rank_match_design_table():
    b, d = DT.grad_bytes, 0.01
    k = d * N
    assert wire("dense-ddp") == pytest.approx(2 * (P - 1) / P * N * b)
    assert wire("dense-zero1") == pytest.approx((P - 1) / P * N * (b + DT.param_bytes))
    assert wire("topk", sparsity=0.99) == pytest.approx((P - 1) * k * (b + 4))
    assert wire("scalecom", sparsity=0.99) == pytest.approx(k * 4 + 2 * (P - 1) / P * k * b)
    scape = (P - 1) / P * (k * b + k * DT.param_bytes + mask_bytes(N, P, k))
    assert wire("scape-partitioned", sparsity=0.99) == pytest.approx(scape)
    bits = 8
    payload = N * bits / 8 + -(-N // 2048) * 4
    assert wire("quantized", bits=bits) == pytest.approx(2 * (P - 1) / P * payload)


def test_scape_options_change_bytes():
    masked = wire("scape-partitioned", sparsity=0.99)
    dense_params = wire("scape-partitioned", sparsity=0.99, update_scope="all")
    assert dense_params - masked == pytest.approx((P - 1) / P * (N - 0.01 * N) * DT.param_bytes)
    # Mask: int32 indices below 1/32 density, a bitmap above.
    assert mask_bytes(N, P, 0.01 * N) == pytest.approx(0.01 * N * 4)
    assert mask_bytes(N, P, 0.10 * N) == pytest.approx(P * -(-N // P // 8))


def test_refresh_steps_are_amortized():
    p = plan(make_config("scape-partitioned", sparsity=0.99, refresh_every=10), N, P, DT)
    assert [w for w, _ in p.steps] == pytest.approx([0.9, 0.1])
    # a refresh step is a dense ZeRO-1 step that still gathers the next mask
    mask = (P - 1) / P * mask_bytes(N, P, 0.01 * N)
    dense = plan(make_config("dense-adams"), N, P, DT).wire_bytes(P) + mask
    sparse = wire("scape-partitioned", sparsity=0.99)
    assert p.wire_bytes(P) == pytest.approx(0.9 * sparse + 0.1 * dense)


def test_scape_selection_is_on_the_shard():
    (_, step), = plan(make_config("scape-partitioned", sparsity=0.9), N, P, DT).steps
    select = [k for k in step.kernels if k.kind == "select"]
    assert [k.elements for k in select] == [N / P]
    assert {op.phase for op in step.ops if "mask" in op.name} == {"next_step"}


def test_one_rank_sends_nothing():
    p = plan(make_config("scape-partitioned", sparsity=0.9), N, 1, DT)
    assert p.wire_bytes(1) == 0 and all(not s.ops for _, s in p.steps)


@pytest.mark.parametrize(("name", "opts", "message"), [
    ("scape-partitioned", {"sparsity": 1.0}, "sparsity must be in"),
    ("topk", {"sparsity": -0.1}, "sparsity must be in"),
    ("quantized", {"bits": 3}, "bits must be one of"),
    ("zip", {}, "unknown scheme 'zip'"),
    ("scape-partitioned", {"update_scope": "some"}, "update_scope"),
])
def test_bad_options(name, opts, message):
    with pytest.raises(UserError, match=message):
        make_config(name, **opts)


def test_every_plan_uses_known_collectives_phases_and_kernels():
    from scape.plan import KERNEL_STAGES, PHASES
    from vocabulary.names import COLLECTIVES, KERNEL_BYTES

    for spec in ("dense-ddp", "dense-adamw", "quantized", "topk", "scalecom", "scape-partitioned"):
        for opts in ({}, {"sparsity": 0.9}, {"bits": 4}, {"refresh_every": 5, "sparsity": 0.99}):
            if ("bits" in opts and spec != "quantized") or (spec.startswith("dense") and opts):
                continue
            for _, step in plan(make_config(spec, **opts), N, P, DT).steps:
                assert all(op.collective in COLLECTIVES and op.phase in PHASES
                           for op in step.ops)
                assert all(k.kind in KERNEL_BYTES and k.stage in KERNEL_STAGES
                           for k in step.kernels)


@pytest.mark.parametrize(("opts", "match"), [
    ({"sync": "momentum"}, "--sync: options of scape-partitioned"),
    ({"refresh_every": 10, "score": "m_over_sqrt_v"}, "--score, --refresh-every"),
    ({"extra": {"unmasked_moment": "local"}}, "scape takes no option unmasked_moment"),
    ({"extra": {"param_offload": True}}, "needs the distributed optimizer"),
])
def test_the_authors_scape_refuses_options_it_does_not_have(opts, match):
    with pytest.raises(UserError, match=match):
        make_config("scape", sparsity=0.99, **opts)


def test_a_line_up_gives_each_scape_variant_its_own_options():
    from simulator.planning.compare import parse_scheme

    base = make_config("dense-adams", sync="momentum",
                       extra={"distributed_optimizer": True, "unmasked_moment": "local"})
    authors = parse_scheme("scape:0.99", base, only_own=True)
    ours = parse_scheme("scape-partitioned:0.99", base, only_own=True)
    assert authors.sync == "gradient" and authors.extra == {"distributed_optimizer": True}
    assert ours.sync == "momentum" and ours.extra == {"unmasked_moment": "local"}
    with pytest.raises(UserError, match="--sync"):
        parse_scheme("scape:0.99", base)  # one scheme, its flags: used or refused


def test_the_authors_reducer_at_sparsity_0_runs_its_own_protocol():
    """README (issue 45): `scape` at sparsity 0 is not the dense plan: as the authors' reducer
    at density 1, it all-reduces every momentum value in fp32 (R:5153-5180) and all-gathers the
    masks, so it sends more than a bf16 dense all-reduce's 2 (P - 1) / P N b bytes."""
    fp32_momentum = 2 * (P - 1) / P * N * 4
    off = wire("scape", sparsity=0.0)
    assert off > fp32_momentum > wire("dense-ddp")
    # the masks: a bit per element of the largest owner's tensors (here the one tensor, owned
    # whole by one rank: R:390-459), all-gathered from every rank
    assert off == pytest.approx(fp32_momentum + (P - 1) / P * P * N / 8)
