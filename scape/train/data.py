"""Byte-level text from a corpus every machine has offline: the Python standard library's
own source files. Files whose name hashes to 0 mod 10 are held out for validation."""

from __future__ import annotations

import sysconfig
import zlib
from functools import lru_cache
from pathlib import Path

import torch

MAX_BYTES = 32 * 2**20  # per split; the stdlib holds more than enough


@lru_cache(maxsize=2)
def corpus(split: str) -> torch.Tensor:
    """All bytes of the split as one uint8 tensor (deterministic file order)."""
    root = Path(sysconfig.get_paths()["stdlib"])
    files = sorted(p for p in root.rglob("*.py") if "site-packages" not in p.parts)
    chunks, total = [], 0
    for path in files:
        held_out = zlib.crc32(str(path.relative_to(root)).encode()) % 10 == 0
        if held_out != (split == "val"):
            continue
        data = path.read_bytes()
        chunks.append(data)
        total += len(data)
        if total >= MAX_BYTES:
            break
    if not chunks:
        raise RuntimeError(f"no Python sources found under {root}")
    return torch.frombuffer(bytearray(b"".join(chunks)), dtype=torch.uint8)


def batch(split: str, step: int, rank: int, micro_batch: int, seq_len: int, seed: int = 0):
    """(inputs, targets) [micro_batch, seq_len] int64 for this step and rank, reproducible:
    a resumed run draws exactly the batches the uninterrupted one would have."""
    data = corpus(split)
    key = zlib.crc32(f"{seed}:{split}:{step}:{rank}".encode())  # same in every process
    gen = torch.Generator().manual_seed(key)
    start = torch.randint(0, data.numel() - seq_len - 1, (micro_batch,), generator=gen,
                          device="cpu")
    rows = torch.stack([data[s : s + seq_len + 1] for s in start.tolist()]).long()
    return rows[:, :-1], rows[:, 1:]
