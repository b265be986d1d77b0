"""The AdamW update (Loshchilov & Hutter 2019), in the same in-place form as `adams_update_`,
so dense baselines and compressed schemes share one implementation of each optimizer."""

from __future__ import annotations

import torch

from scape.adams import Hyper


def adamw_update_(p: torch.Tensor, g: torch.Tensor, m: torch.Tensor, v: torch.Tensor,
                  step: int, h: Hyper, lr: float | None = None) -> None:
    """One AdamW step in place on p, m, v (bias-corrected as torch.optim.AdamW)."""
    lr = h.lr if lr is None else lr
    b1, b2 = h.beta1, h.beta2
    m.mul_(b1).add_(g, alpha=1 - b1)
    v.mul_(b2).addcmul_(g, g, value=1 - b2)
    corr1, corr2 = 1 - b1**step, 1 - b2**step
    denom = (v / corr2).sqrt_().add_(h.eps)
    p.mul_(1 - lr * h.weight_decay)
    p.addcdiv_(m, denom, value=-lr / corr1)
