"""Capacity planning: every plan respects every constraint; infeasible requests say what to
relax; bad inputs are one-line errors."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from profiles import UserError, load_hardware, load_model
from simulator.memory.peak import memory_use, nccl_communicators, usable_bytes
from simulator.planning.compare import parse_scheme
from simulator.planning.plan_request import PlanRequest
from simulator.planning.planner import best_dense, best_without, plan_training
from simulator.run.goodput import Reliability
from tests.test_cli import scape

H100, A100 = load_hardware("dgx-h100"), load_hardware("dgx-a100")


def request(**kw):
    base = dict(model=load_model("gpt-345m"), tokens=1e9, hardware=(H100, A100), max_gpus=16,
                workers=1, schemes=("dense-adams", "dense-ddp", "scape-partitioned:0.99"))
    base.update(kw)
    return PlanRequest(**base)


def test_plans_respect_every_constraint():
    req = request(deadline_hours=10.0)
    df = plan_training(req)
    assert not df.empty
    assert list(df["hours"]) == sorted(df["hours"])
    for row in df.itertuples():
        hw = {"dgx-h100": H100, "dgx-a100": A100}[row.hardware]
        g = hw.node.gpus_per_node
        assert row.gpus <= req.max_gpus and row.gpus % g == 0
        assert g % row.tp == 0 and req.model.arch.n_heads % row.tp == 0
        assert row.tp * row.pp * row.dp == row.gpus
        assert row.micro_batch * row.dp * row.grad_accum == req.batch
        if row.chunks > 1:  # Megatron's interleaved schedule: micro-batches a multiple of pp
            assert row.grad_accum % row.pp == 0
        use = memory_use(req.model, parse_scheme(row.scheme), row.dp, row.tp, row.micro_batch,
                         req.seq, req.dtypes, row.recompute, pp=row.pp, chunks=row.chunks,
                         micro_batches=row.grad_accum)
        assert use.total <= usable_bytes(hw, nccl_communicators(row.dp, row.tp, row.pp))
        assert row.memory_GB == pytest.approx(use.total / 1e9)
        assert row.hours <= 10.0
        assert row.cost_usd == pytest.approx(row.hours * row.gpus * hw.price.usd_per_gpu_hour)
        steps = math.ceil(req.tokens / (req.batch * req.seq))  # whole steps
        assert row.hours == pytest.approx(steps * row.step_time_s / 3600)


def test_density_warmup_lengthens_scape_plans_only():
    """With SCAPE's density warm-up over the run, its early steps send more: its hours grow
    to the run-mean step (simulator/step/schedule.py); dense plans do not change."""
    key = ["hardware", "gpus", "scheme", "tp", "pp", "schedule", "micro_batch"]
    steady = plan_training(request()).set_index(key)
    warm = plan_training(request(density_warmup_frac=1.0)).set_index(key).loc[steady.index]
    is_scape = steady.index.get_level_values("scheme").str.startswith("scape-partitioned")
    assert is_scape.any() and (~is_scape).any()
    assert (warm["hours"][~is_scape] == steady["hours"][~is_scape]).all()
    assert (warm["hours"][is_scape] > steady["hours"][is_scape]).all()
    assert (warm["run_mean_step_s"] >= warm["step_time_s"]).all()
    with pytest.raises(UserError, match="density warm-up fraction"):
        request(density_warmup_frac=1.5).validate()


def test_budget_is_respected_and_price_override_applies():
    df = plan_training(request(budget_usd=50.0, price_per_gpu_hour=1.0))
    assert not df.empty and (df["cost_usd"] <= 50.0).all()
    assert df["cost_usd"].iloc[0] == pytest.approx(df["gpu_hours"].iloc[0] * 1.0)


def test_best_without_scape():
    df = plan_training(request())
    rest = best_without(df)
    assert rest is not None and not rest["scheme"].startswith("scape-partitioned")


@pytest.mark.parametrize(("kw", "message"), [
    ({"deadline_hours": 1e-4}, "relax --deadline-hours"),
    ({"budget_usd": 1e-3}, "relax --budget-usd"),
    ({"model": load_model("llama-70b"), "hardware": (load_hardware("commodity-100gbe"),),
      "max_gpus": 8}, "no configuration of llama-70b fits"),
    ({"tokens": 0}, "--tokens must be a finite positive number"),
    ({"deadline_hours": 5.0, "budget_usd": 5.0}, "either a deadline or a budget"),
])
def test_infeasible_requests_say_what_to_relax(kw, message):
    with pytest.raises(UserError, match=message):
        plan_training(request(**kw))


def test_plan_cli_and_errors(capsys):
    code, out, _ = scape(capsys, "plan", "-m", "gpt-345m", "--tokens", "1e9", "-H", "dgx-h100",
                         "--max-gpus", "8", "--schemes", "dense-adams,scape:0.99", "--format",
                         "json", "--top", "3")
    assert code == 0 and out.count('"scheme"') == 3
    for args, message in (
        (["plan", "-m", "gpt-345m", "--tokens", "0", "-H", "dgx-h100"], "tokens must be"),
        (["plan", "-m", "gpt-345m", "--tokens", "1e12", "-H", "dgx-h100", "--max-gpus", "8",
          "--schemes", "scape:0.99", "--deadline-hours", "0.001"], "relax --deadline-hours"),
        (["plan", "-m", "gpt-345m", "--tokens", "1e9", "-H", "dgx-z"], "unknown hardware"),
    ):
        code, _out, err = scape(capsys, *args)
        assert code == 2 and err.count("\n") == 1 and message in err


def _study(tmp_path):
    from profiles.quality import load_quality

    path = tmp_path / "study.toml"
    path.write_text(
        'study = "t"\ncommand = "c"\ndate = "d"\nmodel = "tiny-llama"\ncorpus = "shakespeare"\n'
        "tokens_per_step = 1024\nsteps = 3000\ndense_adams_lr = 2.5e-4\n"
        "dense_adams_final_val_loss = 1.58\ndense_adams_steps_to_quality = 3000.0\n"
        '[[scheme]]\nscheme = "scape-partitioned"\nvariant = "v"\nsparsity = 0.99\n'
        "lr = 2.5e-4\nseeds = 3\nfinal_val_loss = 1.6\ngap_pct = 1.3\nmean_bytes_ratio = 0.05\n"
        "tokens_ratio = 1.5\n"
        '[[scheme]]\nscheme = "scape"\nvariant = "w"\nsparsity = 0.99\n'
        "lr = 2.5e-4\nseeds = 3\nfinal_val_loss = 1.9\ngap_pct = 20.0\nmean_bytes_ratio = 0.09\n"
        "reached = false\n")
    return load_quality(str(path))


def test_rank_by_time_to_quality(tmp_path):
    """With a study, each plan's hours to dense AdamS's quality are its hours times the
    scheme's tokens ratio; ranking by them drops schemes without a reading or that never
    reached it, and may reorder the rest."""
    study = _study(tmp_path)
    schemes = ("dense-adams", "dense-ddp", "scape-partitioned:0.99", "scape:0.99")
    by_time = plan_training(request(schemes=schemes, quality=study))
    sp = by_time[by_time["scheme"] == "scape-partitioned:0.99"]
    assert list(sp["hours_to_quality"]) == pytest.approx(list(sp["hours"] * 1.5))
    dense = by_time[by_time["scheme"] == "dense-adams"]
    assert (dense["quality_tokens_ratio"] == 1.0).all()
    assert by_time[by_time["scheme"].isin(["dense-ddp", "scape:0.99"])][
        "hours_to_quality"].isna().all()  # no reading / never reached
    by_quality = plan_training(request(schemes=schemes, quality=study, rank="quality"))
    assert set(by_quality["scheme"]) == {"dense-adams", "scape-partitioned:0.99"}
    assert list(by_quality["hours_to_quality"]) == sorted(by_quality["hours_to_quality"])
    with pytest.raises(UserError, match="--rank quality needs --quality"):
        plan_training(request(rank="quality"))


def test_a_measured_profile_plans_only_the_rank_counts_it_measured(capsys):
    """netbed-1gbit measured collectives on 2 and 3 ranks: a plan up to 8 GPUs keeps 1, 2 and
    3 (one rank calls no collective; 3 is 3 pipeline stages of gpt-345m's 24 layers) and says
    it left 4, 6 and 8 out, instead of aborting on 4."""
    code, out, err = scape(capsys, "plan", "-m", "gpt-345m", "-t", "1e9", "-H",
                           "measured/netbed-1gbit", "--max-gpus", "8", "--price-per-gpu-hour",
                           "1", "--schemes", "dense-ddp", "--workers", "1", "--top", "1000")
    assert code == 0, err
    left = [line for line in out.splitlines() if line.startswith("# left out:")]
    assert [line.split(": ")[2] for line in left] == ["4 GPUs", "6 GPUs", "8 GPUs"]
    assert all("cover 1, 2, 3 ranks" in line for line in left)
    gpus = {int(line.split()[1]) for line in out.splitlines()
            if line.startswith("netbed-1gbit")}
    assert gpus and gpus <= {1, 2, 3}


_PLAN_KEY = ["hardware", "gpus", "scheme", "tp", "pp", "schedule", "micro_batch", "recompute"]


@pytest.mark.parametrize("kw", [
    {},
    {"rank": "cost"},
    {"deadline_hours": 30.0, "rank": "cost"},
    {"budget_usd": 3000.0},
    # in `make test-long` only (13 s; its request is the frontier test's 7b-lossy below)
    pytest.param({"model": load_model("llama-7b"), "max_gpus": 64, "tokens": 1e11,
                  "schemes": ("dense-adams", "topk:0.99", "scape:0.99", "quantized:4")},
                 marks=pytest.mark.slow),
    {"model": load_model("qwen3-30b-a3b"), "max_gpus": 32, "tokens": 1e11, "global_batch": 128,
     "hardware": (H100,), "schemes": ("dense-adams", "topk:0.99", "scape:0.99")},
    {"rank": "wall-time"},
    # failures often enough that goodput ranks the GPU counts apart
    {"rank": "wall-cost", "reliability": Reliability(5.0, 10, 0.15, 2000)},
    # the energy bound (evaluate.py least_energy_MWh) and a facility-power cap
    {"rank": "energy"},
    pytest.param({"model": load_model("llama-7b"), "max_gpus": 64, "tokens": 1e11,
                  "rank": "energy", "max_power_MW": 0.02,
                  "schemes": ("dense-adams", "topk:0.99", "scape:0.99")},
                 marks=pytest.mark.slow),  # `make test-long` only (7 s): CI's 6 minutes
    # spot capacity taken back: the goodput bound is the spot reliability's (aws-p5's tiers)
    {"hardware": (load_hardware("aws-p5"),), "rank": "wall-cost", "price_tier": "spot",
     "tokens": 1e10},
    # the torchtitan stack: its memory in the screening, its eager kernels in the bound's step
    {"model": load_model("llama3-8b"), "tokens": 1e10, "global_batch": 64, "max_gpus": 8,
     "hardware": (H100,), "schemes": ("dense-zero3", "dense-adamw"), "stack": "torchtitan"},
    # a profile with its cluster's own failure rate beside one failing every few minutes
    # (the top plans are then the other profile's), and asynchronous saves over each host link
    {"hardware": (H100, load_hardware("jean-zay-a100")), "rank": "wall-time",
     "reliability": Reliability(10.0, 10, 0.15, rate_from_profile=True, async_save=True)},
], ids=["time", "cost", "deadline-cost", "budget", "7b-lossy", "moe", "wall-time",
        "wall-cost", "energy", "7b-energy-capped", "spot-wall-cost", "torchtitan",
        "own-rate-async"])
def test_bounded_search_keeps_the_plans_every_simulation_gives(kw, tmp_path):
    """plan_training(keep=K) simulates only the plans whose lower bound could still make the
    top K (simulator/planning/planner.py evaluate_bounded): its top K, its best dense and its best
    non-SCAPE plan are those of simulating every feasible plan."""
    req = request(**kw)
    every = plan_training(req)
    for keep in (1, 5):
        bounded = plan_training(req, keep=keep)
        # the lazy search finds plans only where its bounds let it look
        # (every feasible plan simulated; a power cap leaves out those above it)
        assert bounded.attrs["feasible"] <= every.attrs["feasible"]
        assert len(every) <= every.attrs["feasible"]
        assert len(every) == every.attrs["feasible"] or req.max_power_MW is not None
        top_all, top = every.head(keep), bounded.head(keep)
        assert top[_PLAN_KEY].values.tolist() == top_all[_PLAN_KEY].values.tolist()
        assert list(top["hours"]) == pytest.approx(list(top_all["hours"]), rel=1e-12)
        for pick in (best_dense, best_without):
            a, b = pick(every), pick(bounded)
            assert (a is None) == (b is None)
            if a is not None:
                assert a[_PLAN_KEY].tolist() == b[_PLAN_KEY].tolist()
    # and it simulated fewer plans where the bounds allowed (never more than every one)
    assert bounded.attrs["simulated"] <= len(every)


@pytest.mark.parametrize("kw", [
    {},
    {"rank": "cost"},
    {"budget_usd": 3000.0},
    {"model": load_model("llama-7b"), "max_gpus": 64, "tokens": 1e11,
     "schemes": ("dense-adams", "topk:0.99", "scape:0.99", "quantized:4")},
], ids=["time", "cost", "budget", "7b-lossy"])
def test_bounded_frontier_is_the_frontier_every_simulation_gives(kw):
    """plan_training(frontier=True) skips only plans a simulated plan beats on both bounds
    (simulator/planning/planner.py evaluate_bounded): its time-cost frontier, best dense and best
    non-SCAPE plans are those of simulating every feasible plan, from fewer simulations."""
    req = request(**kw)
    every = plan_training(req)
    bounded = plan_training(req, keep=1, frontier=True)

    def front(df):
        return df[df["pareto"]].sort_values(["hours", "cost_usd"], kind="stable")

    assert front(bounded)[_PLAN_KEY].values.tolist() == front(every)[_PLAN_KEY].values.tolist()
    assert list(front(bounded)["hours"]) == pytest.approx(list(front(every)["hours"]),
                                                          rel=1e-12)
    for pick in (best_dense, best_without):
        a, b = pick(every), pick(bounded)
        assert (a is None) == (b is None)
        if a is not None:
            assert a[_PLAN_KEY].tolist() == b[_PLAN_KEY].tolist()
    assert len(front(every)) >= 2
    assert bounded.attrs["simulated"] < len(every)


def test_lower_bound_is_below_every_simulated_step():
    """simulator/step/simulate.py lower_bound_s never exceeds the simulated step (the search's
    premise), over every feasible plan of a small request, pipelines included."""
    from simulator.planning.planner import candidates
    from simulator.step.batch import simulate_cached
    from simulator.step.simulate import lower_bound_s

    req = request(model=load_model("llama-7b"), max_gpus=64, hardware=(H100,)).validate()
    cands, _ = candidates(req)
    assert any(c.pp > 1 for c in cands) and any(c.pp == 1 for c in cands)
    for c in cands[::7]:
        cfg = c.step_config(req)
        low = lower_bound_s(cfg)
        assert 0 < low <= simulate_cached(cfg).step_time_s * (1 + 1e-9)


def test_candidates_memory_is_their_steps_memory():
    """The planner prices memory without building each try's StepConfig: what it keeps is
    what step_memory gives the plan's own step."""
    from simulator.memory.peak import step_memory
    from simulator.planning.planner import candidates

    req = request(model=load_model("llama-7b"), max_gpus=64).validate()
    cands, _ = candidates(req)
    assert len(cands) > 50
    for c in cands[::5]:
        assert c.memory_GB == pytest.approx(step_memory(c.step_config(req)).total / 1e9,
                                            rel=1e-12)


def test_pareto_view_is_the_time_cost_frontier(capsys):
    """plan --pareto shows only plans no other plan beats on both hours and cost, fastest
    first: hours rise and cost falls down the table, and the frontier is the one every
    simulated plan gives."""
    import json

    code, out, err = scape(capsys, "plan", "-m", "gpt-345m", "-t", "1e9", "-H", "dgx-h100",
                           "--max-gpus", "32", "--workers", "1", "--pareto", "--top", "100",
                           "--format", "json")
    assert code == 0, err
    rows = json.loads(out)
    hours, cost = [r["hours"] for r in rows], [r["cost_usd"] for r in rows]
    assert len(rows) >= 2 and all(r["pareto"] for r in rows)
    # the quality column survives into JSON (the request's --quality is quality_study)
    assert {r["quality"] for r in rows} <= {"dense", "not measured at this scale"}
    assert all(r["quality"] for r in rows) and all(r["quality_study"] is None for r in rows)
    assert hours == sorted(hours) and cost == sorted(cost, reverse=True)
    every = plan_training(PlanRequest(load_model("gpt-345m"), 1e9, (H100,), max_gpus=32,
                                      workers=1))
    front = every[every["pareto"]].sort_values("hours")
    assert [r["scheme"] for r in rows] == list(front["scheme"])


def test_pipelines_interleave_over_the_most_chunks_that_leave_a_layer_each():
    """Besides 1F1B and 2 chunks, the most of 8 or 4 chunks per stage that a layer each fills:
    Llama-70B's 80 layers take 8 chunks on 8 stages, 4 on 16 (8 would leave chunks empty), 2
    on 40; published runs interleave that deep (NeMo's GPT-3 175B: 12 chunks per stage)."""
    from simulator.planning.planner import layouts

    req = PlanRequest(load_model("llama-70b"), 1e12, (load_hardware("dgx-h100"),),
                      max_gpus=4096).validate()
    shapes = {(pp, schedule, chunks)
              for tp, pp, schedule, chunks, _, _ in layouts(req, load_hardware("dgx-h100"), 4096)
              if tp == 8}
    assert {(8, "1f1b", 1), (8, "interleaved", 2), (8, "interleaved", 8)} <= shapes
    assert (8, "interleaved", 4) not in shapes  # 8 chunks fit there
    assert {(16, "interleaved", 2), (16, "interleaved", 4)} <= shapes
    assert (16, "interleaved", 8) not in shapes  # 16 x 8 > 80 layers
    assert not {(40, "interleaved", 4), (40, "interleaved", 8)} & shapes
    assert (1, "1f1b", 1) in shapes and not any(pp == 1 and c > 1 for pp, _, c in shapes)


@pytest.mark.parametrize("kw", [
    {"model": load_model("llama-7b"), "max_gpus": 64, "hardware": (H100,)},
    {"model": load_model("qwen3-30b-a3b"), "max_gpus": 32, "global_batch": 128,
     "hardware": (H100,)},
], ids=["dense", "moe"])
def test_search_floors_are_below_every_plans_bound(kw):
    """The lazy search (simulator/planning/search.py) opens a GPU count or a layout only when
    its floor is the lowest left: a count's floor is at most the floor of each of its
    layouts, which is at most each plan's lower_bound_s (so no plan a bounded answer needs is
    left unopened; pipelines, and for the MoE model every expert degree, included)."""
    from simulator.planning.planner import Try, candidates
    from simulator.planning.search import _Floors
    from simulator.step.simulate import lower_bound_s

    req = request(**kw).validate()
    cands, _ = candidates(req)
    floors = _Floors(req)
    assert any(c.pp > 1 for c in cands) and len({c.ep for c in cands}) >= (
        2 if req.model.moe else 1)
    for c in cands[::3]:
        t = Try(c.tp, c.pp, c.schedule, c.chunks, c.ep, c.micro_batch)
        low = lower_bound_s(c.step_config(req))
        per_try = floors.try_floor_s(c.hardware, c.gpus, t)
        assert floors.count_floor_s(c.hardware, c.gpus) <= per_try * (1 + 1e-9)
        assert 0 < per_try <= low * (1 + 1e-9), c


def test_the_search_hands_long_runs_to_a_pool_with_the_same_answer(monkeypatch):
    """Past POOL_AFTER simulations the lazy search (simulator/planning/search.py) runs its
    rounds on a pool of workers: the plans it keeps are the ones one process keeps."""
    from simulator.planning import search as search_module

    req = request(model=load_model("llama-7b"), max_gpus=64, tokens=1e11,
                  schemes=("dense-adams", "topk:0.99", "scape:0.99"))
    one = plan_training(req, keep=20)  # 28 simulations (2026-12-03)
    import concurrent.futures

    made = []

    class Counted(concurrent.futures.ProcessPoolExecutor):
        def __init__(self, *a, **k):
            made.append(a)
            super().__init__(*a, **k)

    monkeypatch.setattr(concurrent.futures, "ProcessPoolExecutor", Counted)
    monkeypatch.setattr(search_module, "POOL_AFTER", 8)
    pooled = plan_training(replace(req, workers=2), keep=20)
    assert made == [(2,)] and pooled.attrs["simulated"] > 16  # later rounds on the pool
    assert (pooled.head(20)[_PLAN_KEY].values.tolist()
            == one.head(20)[_PLAN_KEY].values.tolist())
    assert list(pooled.head(20)["hours"]) == pytest.approx(list(one.head(20)["hours"]),
                                                           rel=1e-12)


def test_plan_takes_the_sequence_length_it_is_given(capsys):
    """plan --seq-len (Megatron's --seq-length; 1k read as 1,024): every plan uses it, a
    step of twice the tokens is slower, and an unreadable or zero length, or one beyond the
    model's learned positions, is one error line."""
    import json

    base = ("plan", "-m", "gpt-345m", "--tokens", "1e9", "-H", "dgx-h100", "--max-gpus", "8",
            "--schemes", "dense-adams", "--top", "1", "--format", "json")
    rows = {}
    for seq in ("512", "1k"):
        code, out, err = scape(capsys, *base, "--seq-len", seq)
        assert code == 0, err
        (rows[seq],) = json.loads(out)
    assert rows["512"]["seq_len"] == 512 and rows["1k"]["seq_len"] == 1024
    assert rows["1k"]["step_time_s"] > rows["512"]["step_time_s"]
    for bad, words in (("0", "at least 1"), ("abc", "cannot read it"),
                       ("2k", "learned positions for 1024 tokens")):
        code, _, err = scape(capsys, *base, "--seq-len", bad)
        assert code == 2 and words in err, err
