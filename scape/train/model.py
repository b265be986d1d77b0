"""A small decoder-only transformer shaped by a model profile.

family "gpt": learned positions, LayerNorm with bias, GELU MLP (GPT-2); family "llama":
RMSNorm, SwiGLU MLP, rotary positions, no biases, grouped-query attention (Llama 2).
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from profiles import ModelProfile


class RMSNorm(nn.Module):
    def __init__(self, d: int, eps: float = 1e-5):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))
        self.eps = eps

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rotary(x: torch.Tensor) -> torch.Tensor:
    """Rotary position embedding (Su et al. 2021) over the last dim of [b, heads, s, d]."""
    s, d = x.shape[-2], x.shape[-1]
    # on x's device: a rank that sets no default device (calibrate's interference check) too
    ar = dict(dtype=torch.float32, device=x.device)
    freqs = 1.0 / (10000 ** (torch.arange(0, d, 2, **ar) / d))  # [d/2]
    angles = torch.outer(torch.arange(s, **ar), freqs)  # [s, d/2]
    cos, sin = angles.cos(), angles.sin()
    x1, x2 = x[..., 0::2], x[..., 1::2]
    return torch.stack([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1).flatten(-2)


class Block(nn.Module):
    def __init__(self, m: ModelProfile):
        super().__init__()
        a, llama = m.arch, m.family == "llama"
        h, kv = a.d_model, a.n_kv_heads * a.head_dim
        self.heads, self.kv_heads, self.llama = a.n_heads, a.n_kv_heads, llama
        norm = (lambda: RMSNorm(h)) if llama else (lambda: nn.LayerNorm(h))
        self.norm1, self.norm2 = norm(), norm()
        self.qkv = nn.Linear(h, h + 2 * kv, bias=not llama)
        self.proj = nn.Linear(h, h, bias=not llama)
        if llama:
            self.gate_up = nn.Linear(h, 2 * a.d_ff, bias=False)
        else:
            self.up = nn.Linear(h, a.d_ff)
        self.down = nn.Linear(a.d_ff, h, bias=not llama)

    def forward(self, x):
        b, s, h = x.shape
        hd = h // self.heads
        q, k, v = self.qkv(self.norm1(x)).split([h, self.kv_heads * hd, self.kv_heads * hd], -1)
        q = q.view(b, s, self.heads, hd).transpose(1, 2)  # [b, heads, s, hd]
        k = k.view(b, s, self.kv_heads, hd).transpose(1, 2)
        v = v.view(b, s, self.kv_heads, hd).transpose(1, 2)
        if self.llama:
            q, k = rotary(q), rotary(k)
        att = F.scaled_dot_product_attention(q, k, v, is_causal=True,
                                             enable_gqa=self.kv_heads != self.heads)
        x = x + self.proj(att.transpose(1, 2).reshape(b, s, h))
        y = self.norm2(x)
        if self.llama:
            gate, up = self.gate_up(y).chunk(2, dim=-1)
            return x + self.down(F.silu(gate) * up)
        return x + self.down(F.gelu(self.up(y)))


class GPT(nn.Module):
    def __init__(self, m: ModelProfile):
        super().__init__()
        a = m.arch
        self.embed = nn.Embedding(a.vocab_size, a.d_model)
        self.pos = nn.Embedding(a.seq_len, a.d_model) if m.family == "gpt" else None
        self.blocks = nn.ModuleList(Block(m) for _ in range(a.n_layers))
        self.norm = RMSNorm(a.d_model) if m.family == "llama" else nn.LayerNorm(a.d_model)
        self.head = None if a.tied_embeddings else nn.Linear(a.d_model, a.vocab_size, bias=False)
        self.apply(self._init)

    @staticmethod
    def _init(mod):
        if isinstance(mod, nn.Linear | nn.Embedding):
            nn.init.normal_(mod.weight, std=0.02)
            if getattr(mod, "bias", None) is not None:
                nn.init.zeros_(mod.bias)

    def forward(self, idx: torch.Tensor, targets: torch.Tensor | None = None):
        x = self.embed(idx)  # [b, s, h]
        if self.pos is not None:
            x = x + self.pos(torch.arange(idx.shape[1], device=idx.device))
        for block in self.blocks:
            x = block(x)
        x = self.norm(x)
        logits = self.head(x) if self.head is not None else x @ self.embed.weight.T  # [b, s, V]
        if targets is None:
            return logits
        return F.cross_entropy(logits.flatten(0, 1), targets.flatten())
