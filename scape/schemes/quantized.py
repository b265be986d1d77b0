"""Two-phase block quantization with error feedback (1-bit Adam, Tang et al. 2021; ZeRO++ qgZ,
Wang et al. 2023): all-to-all of quantized shards, local average and requantization with a
second residual, all-gather of the quantized shards. int8 and int4 round to nearest with one
fp32 scale (max |x|) per block; 1-bit sends signs with one fp32 scale (mean |x|) per block."""

from __future__ import annotations

import torch

from scape.schemes.base import ResidualScheme

LEVELS = {8: 127, 4: 7}


def quantize(x: torch.Tensor, bits: int, block: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A 1-D fp32 tensor (length a multiple of `block`, and of 8) as uint8 payload
    [codes | fp32 scales as bytes] and its dequantized value."""
    blocks = x.view(-1, block)  # [n / block, block]
    if bits == 1:
        scale = blocks.abs().mean(dim=1, keepdim=True)  # [n / block, 1]
        sign = blocks >= 0
        deq = torch.where(sign, scale, -scale).reshape(-1)
        codes = _pack_bits(sign.reshape(-1))
    else:
        levels = LEVELS[bits]
        scale = blocks.abs().amax(dim=1, keepdim=True).clamp_min(1e-30) / levels
        q = torch.round(blocks / scale).clamp_(-levels, levels)  # [n / block, block]
        deq = (q * scale).reshape(-1)
        q = q.to(torch.int16).reshape(-1)
        codes = q.to(torch.int8).view(torch.uint8) if bits == 8 else _pack_nibbles(q + 8)
    return torch.cat([codes, scale.reshape(-1).contiguous().view(torch.uint8)]), deq


def dequantize(payload: torch.Tensor, n: int, bits: int, block: int) -> torch.Tensor:
    """Inverse of `quantize` for n values."""
    code_bytes = n * bits // 8
    codes, scale = payload[:code_bytes], payload[code_bytes:].view(torch.float32)
    scale = scale.reshape(-1, 1)  # [n / block, 1]
    if bits == 1:
        sign = _unpack_bits(codes).reshape(-1, block)
        return torch.where(sign, scale, -scale).reshape(-1)
    if bits == 8:
        q = codes.view(torch.int8).to(torch.float32)
    else:
        q = _unpack_nibbles(codes).to(torch.float32) - 8
    return (q.reshape(-1, block) * scale).reshape(-1)


def payload_bytes(n: int, bits: int, block: int) -> int:
    return n * bits // 8 + n // block * 4


def _shifts(device) -> torch.Tensor:
    return torch.arange(7, -1, -1, dtype=torch.uint8, device=device)  # MSB first


def _pack_bits(b: torch.Tensor) -> torch.Tensor:
    return (b.view(-1, 8).to(torch.uint8) << _shifts(b.device)).sum(dim=1, dtype=torch.uint8)


def _unpack_bits(codes: torch.Tensor) -> torch.Tensor:
    return ((codes.unsqueeze(1) >> _shifts(codes.device)) & 1).bool().reshape(-1)


def _pack_nibbles(q: torch.Tensor) -> torch.Tensor:
    q = q.to(torch.uint8).view(-1, 2)
    return (q[:, 0] << 4) | q[:, 1]


def _unpack_nibbles(codes: torch.Tensor) -> torch.Tensor:
    return torch.stack([codes >> 4, codes & 15], dim=1).reshape(-1)


class Quantized(ResidualScheme):
    def __init__(self, cfg, params, comm, hyper):
        self.multiple = cfg.quant_block  # every shard holds whole blocks
        super().__init__(cfg, params, comm, hyper)
        self.shard_residual = torch.zeros(self.flat.shard_size)  # [n / P] the same, reduced

    def _step(self, lr: float) -> None:
        bits, block = self.cfg.bits, self.cfg.quant_block
        p, shard = self.world, self.flat.shard_size
        g = self.pull_grads()
        with self.timed("quantize"):
            acc = g + self.residual
            parts = [quantize(chunk, bits, block) for chunk in acc.view(p, shard)]
            send = torch.cat([payload for payload, _ in parts])  # [P * shard payload] uint8
            self.residual = acc - torch.cat([deq for _, deq in parts])
        recv = torch.empty_like(send)
        self.comm.all_to_all("quantized all-to-all", recv, send)
        with self.timed("quantize"):
            mine = torch.stack([dequantize(c, shard, bits, block) for c in recv.view(p, -1)])
            reduced = mine.mean(dim=0) + self.shard_residual  # [n / P]
            payload, deq = quantize(reduced, bits, block)
            self.shard_residual = reduced - deq
        gathered = torch.empty(p * payload.numel(), dtype=torch.uint8)
        self.comm.all_gather("quantized all-gather", gathered, payload)
        with self.timed("quantize"):
            full = torch.cat([dequantize(c, shard, bits, block) for c in gathered.view(p, -1)])
        self.apply(full, lr)

    def _state(self) -> dict:
        return {**super()._state(), "shard_residual": self.shard_residual}

    def _load(self, state: dict) -> None:
        super()._load(state)
        self.shard_residual = state["shard_residual"].clone()
