"""Pipeline parallelism: exact timelines against the closed forms, and the step that runs them."""

from __future__ import annotations

import itertools
import random

import pytest

from profiles import UserError, load_hardware, load_model
from scape.plan import Dtypes, make_config
from simulator.layout.pipeline import (
    STEADY_AFTER,
    bubble_fraction,
    first_stage,
    pipeline_bound,
    stage_layers,
    stage_order,
    timeline,
)
from simulator.memory.peak import step_memory
from simulator.step.simulate import simulate_step
from simulator.step.step_config import StepConfig

H100 = load_hardware("dgx-h100")
L7B = load_model("llama-7b")  # 32 layers


@pytest.mark.parametrize("p,m,v", [(2, 4, 1), (4, 8, 1), (4, 16, 1), (8, 8, 1), (4, 8, 2),
                                   (4, 16, 4), (8, 16, 2), (2, 6, 3)])
def test_equal_stages_match_the_closed_form(p, m, v):
    """(m + p - 1)(f + b) for 1F1B; m(f + b) + (p - 1)(f + b)/v interleaved; the bubble over
    the ideal time is (p - 1)/(v m) (Narayanan et al. 2021, sections 2.2.1-2.2.2)."""
    f, b = 1.0, 2.0
    ops = timeline(p, m, lambda s, c: f / v, lambda s, c: b / v, 0.0, v)
    end = max(o.end for o in ops)
    assert end == pytest.approx(m * (f + b) + (p - 1) * (f + b) / v, rel=1e-12)
    ideal = m * (f + b)
    assert (end - ideal) / ideal == pytest.approx((p - 1) / (v * m), rel=1e-12)
    assert bubble_fraction(ops) == pytest.approx(1 - ideal / end, rel=1e-12)
    assert len(ops) == 2 * p * m * v  # every micro-batch through every chunk, both ways


def test_every_op_waits_for_its_input_and_its_stage():
    p, m, v, send = 4, 8, 2, 0.25
    ops = timeline(p, m, lambda s, c: 1.0, lambda s, c: 2.0, send, v)
    by_key = {(o.kind, o.stage, o.micro_batch, o.chunk): o for o in ops}
    for o in ops:
        if o.kind == "F" and o.stage > 0:
            assert o.start >= by_key[("F", o.stage - 1, o.micro_batch, o.chunk)].end + send
        if o.kind == "B" and o.stage < p - 1:
            assert o.start >= by_key[("B", o.stage + 1, o.micro_batch, o.chunk)].end + send
    for s in range(p):
        mine = sorted((o for o in ops if o.stage == s), key=lambda o: o.start)
        assert all(a.end <= b.start + 1e-12 for a, b in itertools.pairwise(mine))


def test_one_f_one_b_order_and_in_flight_bound():
    """Stage s runs p - s - 1 warm-up forwards, so at most p - s micro-batches are in flight."""
    p, m = 4, 8
    for s in range(p):
        order = stage_order(s, p, m)
        assert [k for k, _, _ in order[: p - s - 1]] == ["F"] * (p - s - 1)
        live = peak = 0
        for kind, _, _ in order:
            live += 1 if kind == "F" else -1
            peak = max(peak, live)
        assert peak == p - s


def test_sends_lengthen_the_step_between_fill_drain_and_every_op():
    """The first forward reaches the last stage after p - 1 sends and its gradient comes back
    after p - 1 more, so 2(p - 1) sends are on the critical path at least; in the steady state
    the p micro-batches in flight also wait on the round trip, but no op waits on more than
    one send."""
    p, m, send = 4, 8, 0.1
    end = max(o.end for o in timeline(p, m, lambda s, c: 1.0, lambda s, c: 2.0, send))
    ideal = (m + p - 1) * 3.0
    assert ideal + 2 * (p - 1) * send < end <= ideal + 2 * (m + p - 1) * send


def test_uneven_layers_go_to_the_chunks_after_the_first():
    assert stage_layers(126, 16) == [[7]] + [[8]] * 14 + [[7]]  # Llama 3 405B's 126 layers
    split = stage_layers(10, 2, 2)  # model chunks 0..3 = stage 0 c0, stage 1 c0, s0 c1, s1 c1
    assert split == [[2, 3], [3, 2]] and sum(map(sum, split)) == 10


def test_embedding_and_loss_chunks_may_hold_no_layer():
    """Llama 3 405B as Meta split it (paper section 3.3.2): 126 layers on 16 ranks x 8 chunks,
    one layer a chunk, the first chunk only the embedding and the last only the loss
    (Megatron-Core's --account-for-embedding/loss-in-pipeline-split); 127 layers leave only
    the first chunk empty; 125 cannot fill 128 chunks."""
    split = stage_layers(126, 16, 8)
    assert split[0] == [0] + [1] * 7 and split[-1] == [1] * 7 + [0]
    assert all(row == [1] * 8 for row in split[1:-1]) and sum(map(sum, split)) == 126
    split = stage_layers(127, 16, 8)
    assert split[0][0] == 0 and split[-1][-1] == 1 and sum(map(sum, split)) == 127
    with pytest.raises(UserError, match="125 layers cannot fill 16 stages x 8 chunks"):
        stage_layers(125, 16, 8)


@pytest.mark.parametrize("p,m,v,send", [(4, 40, 1, 0.1), (4, 64, 2, 0.05), (8, 72, 1, 0.0),
                                        (8, 96, 3, 0.2), (3, 31, 1, 0.3), (16, 128, 2, 0.01)])
def test_steady_state_extension_matches_the_full_timeline(p, m, v, send):
    """A lighter first stage, a heavier last with the output layer, sends: the extension from
    the steady state gives the full timeline's makespan and last op."""
    def fwd(s, c):
        return 0.9 if s == 0 else (1.3 if s == p - 1 and c == v - 1 else 1.0)

    def bwd(s, c):
        return 2 * fwd(s, c) + 0.1 * c

    f = tuple(tuple(fwd(s, c) for c in range(v)) for s in range(p))
    b = tuple(tuple(bwd(s, c) for c in range(v)) for s in range(p))
    ops = timeline(p, m, fwd, bwd, send, v)
    mine = sorted((o for o in ops if o.stage == 0), key=lambda o: o.start)
    got = first_stage(p, m, v, f, b, send)
    assert m > STEADY_AFTER * p  # the extension is what is under test
    assert got.makespan == pytest.approx(max(o.end for o in ops), rel=1e-9)
    assert got.last[3] == pytest.approx(mine[-1].start, rel=1e-9)
    assert got.last[:3] == (mine[-1].kind, mine[-1].micro_batch, mine[-1].chunk)
    assert got.count == len(mine) and got.second_start == pytest.approx(mine[1].start)


def test_steady_state_extension_on_random_uneven_pipelines_stays_close():
    """The bound the docstring of first_stage states: uneven layer splits (down to one layer
    per chunk), an output layer, sends up to twice a layer: the makespan within 2%."""
    rng = random.Random(0)
    worst = 0.0
    for _ in range(60):
        p, v = rng.choice([2, 3, 4, 6, 8, 16]), rng.choice([1, 1, 2, 3])
        n_layers = rng.randint(p * v, 4 * p * v)
        m = p * rng.randint(STEADY_AFTER + 1, 3 * STEADY_AFTER + 6)
        layers = stage_layers(n_layers, p, v)
        x, send, head = rng.uniform(0.5, 2), rng.choice([0, 0.01, 0.3, 2.0]), rng.uniform(0, 3)
        y = rng.uniform(1.5, 3.5) * x
        out = [[float(s == p - 1 and c == v - 1) for c in range(v)] for s in range(p)]
        f = tuple(tuple(layers[s][c] * x + out[s][c] * head for c in range(v)) for s in range(p))
        b = tuple(tuple(layers[s][c] * y + out[s][c] * 2 * head for c in range(v))
                  for s in range(p))
        got = first_stage(p, m, v, f, b, send)
        full = max(o.end for o in timeline(p, m, lambda s, c, f=f: f[s][c],
                                           lambda s, c, b=b: b[s][c], send, v))
        worst = max(worst, abs(got.makespan / full - 1))
    assert worst < 0.02


def _random_pipeline(rng, p, v, n_layers):
    """Stage times of an uneven layer split with an output layer on the last chunk."""
    layers = stage_layers(n_layers, p, v)
    x, send, head = rng.uniform(0.5, 2), rng.choice([0, 0.01, 0.3, 2.0]), rng.uniform(0, 3)
    y = rng.uniform(1.5, 3.5) * x
    out = [[float(s == p - 1 and c == v - 1) for c in range(v)] for s in range(p)]
    f = tuple(tuple(layers[s][c] * x + out[s][c] * head for c in range(v)) for s in range(p))
    b = tuple(tuple(layers[s][c] * y + out[s][c] * 2 * head for c in range(v)) for s in range(p))
    return f, b, send


def test_long_steps_extend_at_the_slowest_stages_pace():
    """Many micro-batches and a first stage lighter than a later one: the extension must not
    run at the first stage's pace while the slowest stage's warm-up slack lasts (DeepSeek-V3,
    61 layers interleaved over 4 stages x 2 chunks, 1,920 micro-batches, came out 3.9% short
    before the pace check)."""
    f = ((0.0434, 0.0496), (0.0496, 0.0496), (0.0496, 0.0434), (0.0496, 0.0452))
    b = ((0.0565, 0.0646), (0.0646, 0.0646), (0.0646, 0.0565), (0.0646, 0.0600))
    got = first_stage(4, 1920, 2, f, b, 0.00017)
    full = max(o.end for o in timeline(4, 1920, lambda s, c: f[s][c], lambda s, c: b[s][c],
                                       0.00017, 2))
    assert got.makespan == pytest.approx(full, rel=1e-9)
    rng = random.Random(7)
    for _ in range(12):
        p, v = rng.choice([2, 4, 8]), rng.choice([1, 2])
        fr, br, send = _random_pipeline(rng, p, v, rng.randint(p * v, 3 * p * v))
        m = p * rng.randint(40, 120)
        full = max(o.end for o in timeline(p, m, lambda s, c, f=fr: f[s][c],
                                           lambda s, c, b=br: b[s][c], send, v))
        assert first_stage(p, m, v, fr, br, send).makespan == pytest.approx(full, rel=0.011)


def test_pipeline_bound_never_exceeds_the_first_stages_last_backward():
    """pipeline_bound is a bound the planner prunes by: on random uneven pipelines, 1F1B and
    interleaved, it never exceeds the full timeline's end of the first stage's last op, and it
    is close to it on long steps (median within 2%, the worst within 15%)."""
    rng = random.Random(3)
    tight = []
    for _ in range(80):
        p, v = rng.choice([2, 3, 4, 8, 16]), rng.choice([1, 1, 2, 4])
        f, b, send = _random_pipeline(rng, p, v, rng.randint(p * v, 4 * p * v))
        m = p * rng.randint(1, 30)
        ops = timeline(p, m, lambda s, c, f=f: f[s][c], lambda s, c, b=b: b[s][c], send, v)
        end = max(o.end for o in ops if o.stage == 0)
        bound = pipeline_bound(p, m, v, f, b, send)
        assert bound <= end * (1 + 1e-9), (p, m, v)
        if m >= 20 * p:
            tight.append(bound / end)
    tight.sort()  # 27 long steps: the worst 0.88 (sends of twice a layer), the median 0.995
    assert len(tight) > 10 and tight[len(tight) // 2] > 0.98 and tight[0] > 0.85


def test_interleaved_needs_micro_batches_a_multiple_of_stages():
    with pytest.raises(UserError, match="multiple of the pipeline stages"):
        timeline(4, 6, lambda s, c: 1.0, lambda s, c: 1.0, 0.0, 2)


def _cfg(**kw):
    base = dict(micro_batch=1, global_batch=64, tp=8)
    base.update(kw)
    return StepConfig(L7B, H100, kw.pop("gpus", 64), make_config("dense-adams"),
                      **{k: v for k, v in base.items() if k != "gpus"})


def test_step_with_pipeline_stages_pays_the_bubble():
    flat = simulate_step(_cfg(gpus=64))
    piped = simulate_step(_cfg(gpus=64, pp=4))
    assert piped.pipeline_bubble_s > 0 and flat.pipeline_bubble_s == 0
    # each GPU computes a quarter of the layers for 4x the micro-batches: the same work
    assert piped.compute_s == pytest.approx(flat.compute_s, rel=0.05)
    inter = simulate_step(_cfg(gpus=64, pp=4, pp_schedule="interleaved", virtual_stages=4))
    assert inter.pipeline_bubble_s < piped.pipeline_bubble_s  # (p - 1)/(v m) < (p - 1)/m


def test_ranks_sharing_a_host_pay_the_bubble_at_their_own_pace():
    """On a CPU testbed whose ranks share one host (a measured profile's slowdown), every
    stage computes slowed; the timeline the first stage waits on must be slowed alike, or the
    other stages look faster than they run and the bubble vanishes (it read 0 at 8 and 16
    micro-batches). 1F1B over 2 stages: the first stage waits at least one micro-batch's
    forward and backward of the second."""
    hw = load_hardware("measured/netbed-1gbit")
    for accum in (2, 8, 16):
        r = simulate_step(StepConfig(load_model("tiny-gpt"), hw, 2, make_config("dense-adamw"),
                                     micro_batch=1, global_batch=accum, pp=2))
        assert r.pipeline_bubble_s >= 0.9 * r.compute_s / accum, accum


def test_pipeline_memory_holds_a_stage_and_interleaving_costs_activations():
    flat = step_memory(_cfg(gpus=64).validate())
    piped = step_memory(_cfg(gpus=64, pp=4).validate())
    inter = step_memory(_cfg(gpus=64, pp=4, pp_schedule="interleaved", virtual_stages=2)
                        .validate())
    assert piped.weights < flat.weights / 3  # 8 of 32 layers and the embedding
    assert inter.activations > piped.activations  # x (1 + (p - 1)/(p v)) in flight


@pytest.mark.parametrize("kw,msg", [
    (dict(gpus=64, pp=3), "multiple of --tp x --pp"),
    (dict(gpus=512, pp=64), "cannot fill"),
    (dict(gpus=64, pp=2, virtual_stages=2), "needs --pp-schedule interleaved"),
    (dict(gpus=64, pp=1, pp_schedule="interleaved"), "needs --pp >= 2"),
    (dict(gpus=64, pp=2, pp_schedule="zigzag"), "--pp-schedule must be one of"),
])
def test_bad_pipeline_layouts_are_refused(kw, msg):
    with pytest.raises(UserError, match=msg):
        _cfg(**kw).validate()


def test_zero2_and_zero3_shard_memory_and_zero3_gathers_every_micro_batch():
    """ZeRO-2 keeps the gradient as a shard; ZeRO-3 the parameters too, gathering them for
    every micro-batch's forward and backward and reduce-scattering each micro-batch."""
    base = dict(micro_batch=1, tp=1)

    def with_scheme(name, global_batch):
        return StepConfig(L7B, H100, 8, make_config(name), global_batch=global_batch, **base)

    zero1, zero2, zero3 = (step_memory(with_scheme(n, 8).validate())
                           for n in ("dense-adams", "dense-zero2", "dense-zero3"))
    assert zero2.grads < zero1.grads / 4 and zero2.weights == zero1.weights
    assert zero3.weights < zero1.weights / 4 and zero3.optimizer == zero1.optimizer
    r1, r2 = (simulate_step(with_scheme("dense-zero3", gb)) for gb in (8, 16))
    n = sum(size for size, _ in L7B.tensors())
    ring = 7 / 8  # (p - 1)/p of the bytes, each of the three collectives
    dt = Dtypes()  # the step's: StepConfig's default (fp32 gradients, bf16 parameters)
    # two parameter all-gathers (forward, backward) and one gradient reduce-scatter
    per_elem = 2 * dt.param_bytes + dt.grad_bytes
    assert r1.bytes_per_gpu == pytest.approx(ring * per_elem * n, rel=1e-9)
    assert r2.bytes_per_gpu == pytest.approx(2 * r1.bytes_per_gpu, rel=1e-9)
    with pytest.raises(UserError, match=r"dense-zero3 \(FSDP\) with pipeline"):
        StepConfig(L7B, H100, 64, make_config("dense-zero3"), micro_batch=1, global_batch=64,
                   tp=8, pp=2).validate()


def test_forwards_after_the_first_backward_count_the_order():
    """pipeline_bound counts the first stage's forwards after its first backward without
    walking stage_order; the count is the walk's."""
    from simulator.layout.pipeline import forwards_after_first_backward, stage_order

    for p in (2, 3, 4, 8):
        for v in (1, 2, 3):
            for m in ((1, 2, p, 2 * p, 5 * p + 1) if v == 1 else (p, 2 * p, 3 * p)):
                order = stage_order(0, p, m, v)
                first_b = next(i for i, op in enumerate(order) if op[0] == "B")
                walked = [sum(1 for kind, _, c in order[first_b:] if kind == "F" and c == chunk)
                          for chunk in range(v)]
                assert forwards_after_first_backward(p, m, v) == walked, (p, m, v)
