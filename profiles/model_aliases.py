"""Other names of shipped model profiles: names that denote exactly the file's architecture.

Llama 3.1 8B / 70B / 405B have Llama 3's layer shapes: meta-llama/llama-models
models/sku_list.py (commit 364ed4ec) gives "Llama 3 8b model" and "Llama 3.1 8b model" the same
arguments, and the same for 70b (each file's header says so; Llama 3.1's longer context is a
RoPE setting and a sequence length, which a step takes from --seq-len). Llama 3 405B was only
released as 3.1, which `llama3-405b` is. A name that is not exactly a shipped architecture is
not listed here: it is refused with the nearest names (`llama-3-70b` suggests `llama3-70b`).
"""

from __future__ import annotations

MODEL_ALIASES: dict[str, str] = {
    f"{prefix}{size}": f"llama3-{size}"
    for prefix in ("llama3.1-", "llama-3.1-")
    for size in ("8b", "70b", "405b")
}


def canonical_model(name: str) -> str:
    """The shipped profile's name for `name` (itself where it is no alias); case as typed."""
    return MODEL_ALIASES.get(name.lower(), name)
