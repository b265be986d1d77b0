"""The real optimizer on NCCL against gloo (issue 15 item 3; marker `gpu`): two ranks sharing the
machine's GPU over NCCL's socket transport (scape/train/devices.py) run every scheme from the
same seed as two gloo ranks on the CPU, and their losses agree within float32/TF32 tolerance.
Run by bench/gpu_session.sh on a lent GPU; skipped where there is none (CI, this host)."""

from __future__ import annotations

import json

import pytest
import torch

from scape.plan import make_config

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]
SCHEMES = [("dense-adams", {}), ("dense-ddp", {}), ("quantized", {"bits": 8}),
           ("topk", {"sparsity": 0.99}), ("scalecom", {"sparsity": 0.99}),
           ("scape", {"sparsity": 0.99}), ("scape-partitioned", {"sparsity": 0.99})]
STEPS = 8
# fp32 on both; cuBLAS and the CPU sum in different orders (and may use TF32 for matmuls): a
# few steps of a tiny model stay within this share of the loss
TOLERANCE = 2e-3


@pytest.mark.parametrize(("name", "opts"), SCHEMES, ids=[n for n, _ in SCHEMES])
def test_nccl_losses_match_gloo(tmp_path, name, opts):
    from scape.train.launch import launch
    from scape.train.loop import TrainConfig

    def run(backend: str, share: bool) -> list[float]:
        cfg = TrainConfig(scheme=make_config(name, **opts), steps=STEPS, micro_batch=4,
                          seq_len=32, eval_every=0, timeout_s=60, seed=1,
                          out=str(tmp_path / backend))
        launch(cfg, 2, backend, share_gpu=share)
        log = (tmp_path / backend / "log.jsonl").read_text().splitlines()
        return [json.loads(line)["loss"] for line in log]  # rank 0's loss, step by step

    gloo, nccl = run("gloo", False), run("nccl", True)
    assert len(gloo) == len(nccl)
    for a, b in zip(gloo, nccl, strict=True):
        assert b == pytest.approx(a, rel=TOLERANCE), (name, gloo, nccl)


@pytest.mark.parametrize("density", [0.1, 0.01])
def test_selection_on_cuda_matches_the_cpu(density):
    """scape.select on CUDA (the sampled band, and its exact path: a threshold from
    torch.topk) keeps exactly the CPU's indices (kthvalue), ties by position included."""
    from scape.select import top_k_exact, top_k_indices

    score = torch.randn(1 << 20).abs()  # [n] fp32
    score[1000:1100] = score[999]  # a run of ties at one value
    k = round(density * score.numel())
    on_cpu = top_k_indices(score, k)
    assert torch.equal(top_k_indices(score.cuda(), k).cpu(), on_cpu)
    assert torch.equal(top_k_exact(score.cuda(), k).cpu(), on_cpu)
