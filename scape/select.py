"""O(n) selection of the k largest scores, never a full sort (DESIGN section 5).

Exact: a threshold from `kthvalue` (on CUDA from `torch.topk`, far faster there). Sampled
(the default for large n): estimate from a fixed-size sample where the k-th largest score
lies, then finish exactly on the few scores near it. On the CPU one looser threshold keeps
25% more candidates than k and the exact path runs on those; on CUDA two thresholds bracket
the k-th largest (`top_k_banded`): everything above the upper one is kept outright and the
exact path runs only on the narrow band between them, so no call of torch.topk sees more
than the band (sampling thresholds as in Deep Gradient Compression, Lin et al., ICLR 2018,
section 3.1, made exact here by the band). Whenever a sample misjudged, the exact path runs
instead. All paths return the same indices: what they keep outright is in the true top k,
what they drop is not, and ties are broken by position everywhere. The sample comes from a
private generator, so selection never touches the global random state (a resumed run stays
identical).
"""

from __future__ import annotations

import math

import torch

SAMPLE = 1 << 16  # sampled scores for the threshold estimate
SLACK = 1.25  # keep 25% more candidates than needed
MIN_SAMPLED_K = 256  # below this the sampled quantile is too noisy to bother
# standard errors of the sampled rank on either side of the band: a sample this far off (odds
# below 1e-8) costs one exact selection, never a wrong index
BAND_SIGMAS = 6.0


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


def _sample(score: torch.Tensor, k: int) -> torch.Tensor:
    """SAMPLE scores drawn with replacement by a private generator seeded from (n, k)."""
    n = score.numel()
    gen = torch.Generator().manual_seed(n * 31 + k)
    return score[torch.randint(0, n, (SAMPLE,), generator=gen, device="cpu").to(score.device)]


def top_k_banded(score: torch.Tensor, k: int) -> torch.Tensor:
    """`top_k_exact`'s indices from a band around the k-th largest score; where the sample
    missed it, from `top_k_exact` on the whole of `score`. The sample's upper and lower
    quantiles sit BAND_SIGMAS binomial standard errors either side of rank k; every score
    above the upper one is in the top k (there are at most k of them, checked), every score
    below the lower one is out (at least k are at or above it, checked), and the exact path
    picks the rest from the band. Passes over `score`: two comparisons, then over byte masks
    an and, a not and three index extractions (one to count), all at memory speed, with two
    masks of n bytes at most alive; the exact selection sees the band only."""
    n = score.numel()
    sample = _sample(score, k)  # [SAMPLE]
    p = k / n
    spread = BAND_SIGMAS * math.sqrt(p * (1 - p) / SAMPLE)
    over_hi = int(SAMPLE * (p - spread))  # sampled scores expected above the upper threshold
    over_lo = math.ceil(SAMPLE * (p + spread))  # ... above the lower one
    if over_hi < 1 or over_lo >= SAMPLE:  # k too close to 0 or n for the sample to bracket it
        return top_k_exact(score, k)
    t_hi = torch.kthvalue(sample, SAMPLE - over_hi).values
    t_lo = torch.kthvalue(sample, SAMPLE - over_lo).values
    keep = score <= t_hi  # [n] bool, for now: at or below the band's top
    in_band = score >= t_lo  # [n] bool
    in_band &= keep
    keep.logical_not_()  # above the band; a NaN (false in every comparison) ranks above all
    # counted by compaction (int64 per kept score): a bool tensor's sum() first copies it to
    # int64, 8 bytes per score (+4 GB at 5e8 scores on this CPU, 2026-11-26), which is what
    # kept SCAPE partitioned's whole Llama-1.8B step at d = 0.1 out of an H100's 80 GB
    need = k - torch.nonzero(keep).shape[0]
    band = torch.nonzero(in_band).squeeze(1)  # [m] int64 ascending
    del in_band  # two [n] masks at most at any time
    if need < 0 or band.numel() < need:  # the sample misjudged rank k
        del keep, band
        return top_k_exact(score, k)
    keep[band[top_k_exact(score[band], need)]] = True
    return torch.nonzero(keep).squeeze(1)


def top_k_indices(score: torch.Tensor, k: int) -> torch.Tensor:
    """Indices (int64, ascending) of exactly k largest entries of a 1-D `score`."""
    n = score.numel()
    if k < MIN_SAMPLED_K or n <= 4 * SAMPLE or k * SLACK >= n / 2:
        return top_k_exact(score, k)
    if score.is_cuda:
        return top_k_banded(score, k)
    sample = _sample(score, k)
    keep = min(SAMPLE - 1, int(SAMPLE * SLACK * k / n) + 1)  # sample ranks above the estimate
    estimate = torch.kthvalue(sample, SAMPLE - keep).values
    candidates = torch.nonzero(score > estimate).squeeze(1)  # ascending
    if candidates.numel() < k:
        return top_k_exact(score, k)
    return candidates[top_k_exact(score[candidates], k)]
