"""Warnings for a hand-written hardware profile whose figures no product's datasheet has (issue
58: `profiles check` passed an H100 at 1,979 TFLOP/s dense BF16, the 2:4 sparse figure, and a
3,200 Gb/s NIC, a DGX node's eight NICs added up). The ranges, per-architecture caps and the
products they come from are in profiles/external/datasheet-ranges.toml, each with its source
(docs/research/datasheet-ranges.md); its header states the rules this module applies.

Warnings, not errors: a new part may outrun the file, and a user may mean it. Measured profiles
(a [measured] table) are exempt: their figures are fitted, not read off a datasheet.
"""

from __future__ import annotations

import tomllib
from functools import cache
from pathlib import Path

from profiles.hardware import HardwareProfile

RANGES = Path(__file__).resolve().parent / "external" / "datasheet-ranges.toml"

# the ranges file's table -> the profile's value (None: the profile does not give it)
FIELDS = {
    "gpu.peak_bf16_tflops": lambda hw: hw.gpu.peak_bf16_tflops,
    "gpu.peak_fp8_tflops": lambda hw: hw.gpu.peak_fp8_tflops,
    "gpu.peak_fp4_tflops": lambda hw: hw.gpu.peak_fp4_tflops,
    "gpu.memory_GB": lambda hw: hw.gpu.memory_GB,
    "gpu.hbm_bw_GBps": lambda hw: hw.gpu.hbm_bw_GBps,
    "gpu.host_bw_GBps": lambda hw: hw.gpu.host_bw_GBps,
    "nic.bw_Gbps": lambda hw: hw.nic.bw_Gbps,
    "intra_node.bw_GBps": lambda hw: hw.intra_node.bw_GBps,
}
NEAR = 0.03  # a value within 3% of a product's figure x n reads as that figure x n
AGGREGATES = (4, 8, 16, 32)  # NICs (ports) a node or instance adds up


@cache
def _ranges() -> dict:
    with RANGES.open("rb") as f:
        return tomllib.load(f)


def _table(ranges: dict, key: str) -> dict | None:
    node = ranges
    for part in key.split("."):
        node = node.get(part) if isinstance(node, dict) else None
    return node if isinstance(node, dict) and "max" in node else None


def arch_of(hw: HardwareProfile) -> str | None:
    """[nccl] arch, else the architecture the GPU's model name names (longest pattern first);
    None for a GPU the file does not place (the overall maximum applies)."""
    if hw.nccl is not None:
        return hw.nccl.arch
    patterns = _ranges().get("model_arch", {})
    for pattern in sorted(patterns, key=len, reverse=True):
        if pattern in hw.gpu.model:
            return patterns[pattern]
    return None


def _figures(t: dict) -> list[float]:
    """Every product and per-architecture figure of a table: what a suspect value is read as
    a multiple of."""
    return [v for part in ("products", "by_arch", "by_kind", "next")
            for v in t.get(part, {}).values() if isinstance(v, int | float) and v > 0]


def _near(value: float, figures: list[float], n: int) -> float | None:
    return next((f for f in figures if abs(value / n - f) <= NEAR * f), None)


def _why(key: str, value: float, t: dict) -> str:
    figures = _figures(t)
    if key == "nic.bw_Gbps":
        sums = [f"{n} x {f:,g}" for n in AGGREGATES if (f := _near(value, figures, n))]
        return (f"it reads as NICs added up ({', '.join(sums)} Gb/s): bw_Gbps is one NIC "
                "port's rate and nics_per_node counts the ports") if sums else ""
    if (f := _near(value, figures, 2)) is not None:
        if key.startswith("gpu.peak_"):
            return (f"it is twice {f:,g}: datasheets quote 2:4 sparse tensor rates; the dense "
                    "rate is half")
        return (f"it is twice {f:,g}: vendors quote both directions added up; the profile "
                "takes one direction")
    return ""


def datasheet_warnings(hw: HardwareProfile) -> list[str]:
    """One line per figure of `hw` above its architecture's datasheet cap (or the largest
    product's) x the file's tolerance, or below the least plausible figure."""
    if hw.measured:
        return []
    ranges, arch = _ranges(), arch_of(hw)
    tolerance = ranges.get("meta", {}).get("tolerance", 1.05)
    out = []
    for key, get in FIELDS.items():
        value, t = get(hw), _table(ranges, key)
        if value is None or t is None or (value == 0 and key == "intra_node.bw_GBps"):
            continue
        caps = {"any product": t["max"]}
        if arch in t.get("by_arch", {}):
            caps = {f"{arch} GPUs": t["by_arch"][arch]}
        if key == "intra_node.bw_GBps" and hw.intra_node.kind in t.get("by_kind", {}):
            caps[f"{hw.intra_node.kind} links"] = t["by_kind"][hw.intra_node.kind]
        whose, cap = min(caps.items(), key=lambda kv: kv[1])
        table, _, field = key.partition(".")
        unit = t.get("unit", "").split(",")[0]
        if value > cap * t.get("tolerance", tolerance):
            why = _why(key, value, t)
            out.append(f"{hw.path}: [{table}] {field} = {value:,g} is above the datasheet "
                       f"figures of {whose} (at most {cap:,g} {unit})" + (f"; {why}" if why else "")
                       + " (profiles/external/datasheet-ranges.toml)")
        elif "min" in t and value < t["min"]:
            out.append(f"{hw.path}: [{table}] {field} = {value:,g} is below any training "
                       f"GPU's ({t['min']:,g} {unit}): a unit slip? "
                       "(profiles/external/datasheet-ranges.toml)")
    return out
