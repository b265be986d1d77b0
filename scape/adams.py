"""The AdamS update (arXiv 2505.16363) and a single-process `AdamS` optimizer.

AdamS drops Adam's second-moment state: the denominator is rebuilt each step from the previous
first moment and the current gradient,

    v_t = b2 * m_{t-1}^2 + (1 - b2) * g_t^2
    m_t = b1 * m_{t-1} + (1 - b1) * g_t
    w  <- w * (1 - lr * wd) - lr * m_t / (sqrt(v_t) + eps)

With `bias_correction` (the default) the step is corrected as Adam corrects it, which is what
the SCAPE authors' Megatron AdamS does (mz687/SCAPE_SC26, megatron/core/optimizer/AdamS.py,
read, not copied): m_t is divided by 1 - b1^t and sqrt(v_t) by sqrt(1 - b2^t), with v_t built
from the raw m_{t-1}. Without it the update is the plain form above. Defaults b1=0.9,
b2=0.95, eps=1e-8, wd=0.1 (DESIGN section 5). Weight decay is decoupled, as in AdamW.

(Until 2026-11-23 this project divided m_{t-1} inside v_t by 1 - b1^(t-1) and left v_t
uncorrected, a form the authors' code does not use; at step 1 it moved each
coordinate 1/sqrt(1 - b2) = 4.5 learning rates instead of one.)
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Hyper:
    lr: float = 3e-4
    beta1: float = 0.9
    beta2: float = 0.95
    eps: float = 1e-8
    weight_decay: float = 0.1
    bias_correction: bool = True


def adams_update_(p: torch.Tensor, g: torch.Tensor, m: torch.Tensor, step: int, h: Hyper,
                  lr: float | None = None) -> torch.Tensor:
    """One AdamS step in place on `p` and `m` (same shapes, fp32); `step` = t >= 1.

    Returns the denominator sqrt(v_t) + eps (callers that score by |m|/sqrt(v) reuse it).
    """
    lr = h.lr if lr is None else lr
    b1, b2 = h.beta1, h.beta2
    corr1 = 1 - b1**step if h.bias_correction else 1.0  # divides m_t
    corr2 = math.sqrt(1 - b2**step) if h.bias_correction else 1.0  # divides sqrt(v_t)
    # v_t from the previous (raw) first moment and this gradient
    denom = m.square().mul_(b2).addcmul_(g, g, value=1 - b2).sqrt_()
    if corr2 != 1.0:
        denom.div_(corr2)
    denom.add_(h.eps)
    m.mul_(b1).add_(g, alpha=1 - b1)
    p.mul_(1 - lr * h.weight_decay)
    p.addcdiv_(m, denom, value=-lr / corr1)
    return denom


class AdamS(torch.optim.Optimizer):
    """Single-process AdamS over parameter groups (no second-moment state)."""

    def __init__(self, params, lr: float = 3e-4, betas=(0.9, 0.95), eps: float = 1e-8,
                 weight_decay: float = 0.1, bias_correction: bool = True):
        if lr <= 0 or eps <= 0 or not (0 <= betas[0] < 1 and 0 <= betas[1] < 1):
            raise ValueError("AdamS: lr and eps must be positive and betas in [0, 1)")
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay,
                                      bias_correction=bias_correction))

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            h = Hyper(group["lr"], *group["betas"], group["eps"], group["weight_decay"],
                      group["bias_correction"])
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if not state:
                    state["step"] = 0
                    state["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                state["step"] += 1
                adams_update_(p, p.grad, state["exp_avg"], state["step"], h)
        return loss
