"""GPU names as nvidia-smi, nccl-tests' rank lines and PyTorch traces print them
("A100-SXM4-40GB", "NVIDIA H100 80GB HBM3", "Tesla V100-SXM2-32GB", "NVIDIA GH200 480GB")
and as hardware profiles write them ("A100 SXM4 80GB"): the GPU's family and the memory the
name states, so a measurement of one GPU is not fitted into a profile of another."""

from __future__ import annotations

import re

from vocabulary.errors import UserError

# a family: one or two capitals and the model number (A100, H100, GH200, L40S, V100, B200,
# T4, L4); the form factor (SXM4, HBM3: three capitals) and the vendor (NVIDIA, Tesla) do not
# match. Workstation and consumer boards name theirs after RTX ("GeForce RTX 4090", "RTX
# A6000", "RTX PRO 6000"): the family is RTX and the model, so an RTX 4090 is not an H100
_RTX = re.compile(r"\bRTX\s+(?:PRO\s+)?([A-Z]?\d{3,4}(?:\s?Ti|D)?)\b", re.IGNORECASE)
_FAMILY = re.compile(r"\b([A-Z]{1,2}\d{1,4}[A-Z]?)\b")
_GB = re.compile(r"(\d+)\s*GB\b", re.IGNORECASE)


def family(name: str) -> str | None:
    """The GPU family a name states, or None where it states none."""
    rtx = _RTX.search(name)
    if rtx:
        return "RTX " + rtx[1].replace(" ", "").upper().replace("TI", " Ti")
    found = _FAMILY.search(name)
    return found[1] if found else None


def stated_gb(name: str) -> float | None:
    """The memory a name states in GB ("40GB" in A100-SXM4-40GB), or None."""
    found = _GB.search(name)
    return float(found[1]) if found else None


def same_family_or_refuse(measured_on: str, profile: str, profile_gpu: str, what: str) -> None:
    """Refuse fitting a measurement of one GPU family into a profile of another (`what`: the
    measurement, e.g. "the logs"); names without a family are not checked."""
    got, want = family(measured_on), family(profile_gpu)
    if got is not None and want is not None and got != want:
        raise UserError(f"{what} ran on {measured_on}, and {profile} holds {profile_gpu}: give "
                        "the hardware profile of the GPU measured (the profile written keeps "
                        "its GPU's memory, HBM and kernel tables, which price every plan on it)")
