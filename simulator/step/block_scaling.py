"""How much slower Hopper runs an FP8 GEMM whose operands carry block scales (Megatron-LM's
--fp8-recipe blockwise: Transformer Engine's Float8BlockScaling, DeepSeek-V3's 1 x 128 tiles)
than one with a scale per tensor, read off Transformer Engine's own GEMM benchmark on an H200
(profiles/external/te-gemm-recipes-h200.csv) rather than off the step times it is checked
against.

Per-tensor scales are applied once, in the GEMM's epilogue; block scales run inside the main
loop, one per 128 values of the reduction axis (NVIDIA/cutlass PR #1932, "Blockwise Scaling for
FP8": "it must be applied during the mainloop, impacting performance"). The benchmark times the
same 12 GEMM shapes of a layer three ways in FP8 (a te.Linear forward under each recipe, its
casts included) and once with operands quantized beforehand (the GEMM kernel alone, per-tensor
scales). With

- G: the per-tensor GEMMs alone (tensorwise, pre-quantized);
- C: the delayed recipe's casts (delayed, autocast, less G: the same per-tensor GEMM kernels);
- each recipe's casts = C x its bytes an element over the delayed recipe's
  (simulator/layout/shapes.py FP8_RECIPES: read 16-bit, write two 8-bit copies on Hopper, plus
  the recipe's own reads and scales),

the block-scaled GEMMs take (blockwise, autocast - its casts) / G times the per-tensor ones.
The same arithmetic predicts the tensorwise recipe's autocast time from G and C alone
(`tensorwise_check`): a check of the cast model the slowdown leans on, not an input to it.
On Blackwell Transformer Engine runs block scaling through MXFP8 GEMMs (its PR #2157; the same
document: "FP8 Block is emulated via MXFP8"), which this tool prices at the FP8 rate: no
slowdown there.
"""

from __future__ import annotations

import csv
from functools import lru_cache
from pathlib import Path

from simulator.layout.shapes import fp8_cast_bytes, fp8_copies

TABLE = (Path(__file__).resolve().parents[2] / "profiles" / "external"
         / "te-gemm-recipes-h200.csv")
# the architectures ([nccl] arch) whose FP8 GEMMs apply block scales in the main loop
BLOCK_SCALED_ARCHS = ("hopper",)


def _cast_bytes(recipe: str) -> float:
    """Bytes one element's FP8 cast moves on Hopper under `recipe` (shapes.fp8_cast_bytes)."""
    return fp8_cast_bytes(recipe, fp8_copies("hopper", recipe))


@lru_cache(maxsize=1)
def _table(path: Path = TABLE) -> dict[tuple[str, str], float]:
    """Per-layer total milliseconds by (recipe, mode)."""
    with path.open() as f:
        rows = csv.DictReader(line for line in f if not line.startswith("#"))
        return {(r["recipe"], r["mode"]): float(r["total_ms"]) for r in rows}


def _gemm_and_casts() -> tuple[float, float]:
    """(G, C) of the module docstring, in ms."""
    t = _table()
    gemm = t[("tensorwise", "prequantized")]
    return gemm, t[("delayed", "autocast")] - gemm


@lru_cache(maxsize=1)
def block_slowdown() -> float:
    """Times a block-scaled FP8 GEMM takes over a per-tensor one on Hopper (module docstring)."""
    gemm, casts = _gemm_and_casts()
    block_casts = casts * _cast_bytes("blockwise") / _cast_bytes("delayed")
    return (_table()[("blockwise", "autocast")] - block_casts) / gemm


def tensorwise_check() -> tuple[float, float]:
    """(predicted, measured) ms of the tensorwise recipe under autocast: G + C x its cast
    bytes over the delayed recipe's."""
    gemm, casts = _gemm_and_casts()
    predicted = gemm + casts * _cast_bytes("tensorwise") / _cast_bytes("delayed")
    return predicted, _table()[("tensorwise", "autocast")]


def gemm_slowdown(arch: str | None, recipe: str | None) -> float:
    """The factor an FP8 GEMM's time takes on a GPU of `arch` ([nccl] arch) under `recipe`:
    `block_slowdown` for blockwise on Hopper, else 1."""
    return block_slowdown() if recipe == "blockwise" and arch in BLOCK_SCALED_ARCHS else 1.0
