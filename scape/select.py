"""O(n) selection of the k largest scores, never a full sort (DESIGN section 5).

Exact: a threshold from `kthvalue` (on CUDA from `torch.topk`, far faster there). Fast (the
default for large n on the CPU): estimate the threshold from a fixed-size sample at a 25%
looser quantile, keep the candidates above it in one pass, and run the exact selection on
those few; if the estimate kept fewer than k, fall back to the exact path. Both return the
same indices: the candidates always contain the true top k, and ties are broken by position
in both. The sample comes from a private generator, so selection never
touches the global random state (a resumed run stays identical).
"""

from __future__ import annotations

import torch

SAMPLE = 1 << 16  # sampled scores for the threshold estimate
SLACK = 1.25  # keep 25% more candidates than needed
MIN_SAMPLED_K = 256  # below this the sampled quantile is too noisy to bother


def _kth_largest(score: torch.Tensor, k: int) -> torch.Tensor:
    """The k-th largest entry of a 1-D `score` (a 0-d tensor). On CUDA the minimum of
    torch.topk's values: its radix select took 2.3 ms at n = 1e8, k = 1e7 on an H100, where
    kthvalue took tens of ms (bench/gpu_compute.py, profiles/measured/h100-2026-11-26.toml);
    on the CPU kthvalue's quickselect, which never sorts."""
    if score.is_cuda:
        return torch.topk(score, k, sorted=False).values.min()
    return torch.kthvalue(score, score.numel() - k + 1).values


def top_k_exact(score: torch.Tensor, k: int) -> torch.Tensor:
    """Indices (int64, ascending) of exactly k largest entries; ties by lowest index. A NaN
    counts as larger than any number, as torch.topk ranks it, on every device."""
    n = score.numel()
    if k >= n:
        return torch.arange(n, device=score.device)
    if k <= 0:
        return torch.empty(0, dtype=torch.long, device=score.device)
    threshold = _kth_largest(score, k)
    above = torch.nonzero(score > threshold).squeeze(1)
    if above.numel() < k:
        ties = torch.nonzero(score == threshold).squeeze(1)[: k - above.numel()]
        above = torch.cat([above, ties]).sort().values
    if above.numel() != k:  # NaNs compare false with everything: rank them as +inf
        return top_k_exact(torch.nan_to_num(score, nan=float("inf")), k)
    return above


def top_k_indices(score: torch.Tensor, k: int) -> torch.Tensor:
    """Indices (int64, ascending) of exactly k largest entries of a 1-D `score`."""
    n = score.numel()
    if score.is_cuda or k < MIN_SAMPLED_K or n <= 4 * SAMPLE or k * SLACK >= n / 2:
        return top_k_exact(score, k)  # on CUDA the exact path is the fast one (_kth_largest)
    gen = torch.Generator().manual_seed(n * 31 + k)
    sample = score[torch.randint(0, n, (SAMPLE,), generator=gen, device="cpu").to(score.device)]
    keep = min(SAMPLE - 1, int(SAMPLE * SLACK * k / n) + 1)  # sample ranks above the estimate
    estimate = torch.kthvalue(sample, SAMPLE - keep).values
    candidates = torch.nonzero(score > estimate).squeeze(1)  # ascending
    if candidates.numel() < k:
        return top_k_exact(score, k)
    return candidates[top_k_exact(score[candidates], k)]
