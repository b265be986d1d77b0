"""Runtime schemes, one file each, registered in a plain dict (DESIGN section 4)."""

from __future__ import annotations

from dataclasses import replace

import torch

from scape.adams import Hyper
from scape.comm import Comm
from scape.plan import SchemeConfig
from scape.schemes.base import RUNTIME_DTYPES, Scheme
from scape.schemes.dense import DenseDDP, DenseZeRO1
from scape.schemes.quantized import Quantized
from scape.schemes.scalecom import ScaleCom
from scape.schemes.scape import Scape
from scape.schemes.scape_authors import ScapeAuthors
from scape.schemes.topk import TopK

RUNTIME: dict[str, type[Scheme]] = {
    "dense-ddp": DenseDDP,
    "dense-zero1": DenseZeRO1,
    "quantized": Quantized,
    "topk": TopK,
    "scalecom": ScaleCom,
    "scape": ScapeAuthors,
    "scape-partitioned": Scape,
}


def runtime_class(cfg: SchemeConfig) -> type[Scheme]:
    """The class that executes cfg's plan: with compression off the plan is the dense one."""
    off = (cfg.scheme in ("topk", "scalecom") and cfg.sparsity == 0) or (
        cfg.scheme == "quantized" and cfg.bits >= 8 * RUNTIME_DTYPES.grad_bytes)
    return DenseDDP if off else RUNTIME[cfg.scheme]


def runtime_config(cfg: SchemeConfig) -> SchemeConfig:
    """The options this runtime actually runs `cfg` with, so that its plan says what it does:
    it communicates after backward and gathers parameters after the update (no overlap), and
    ZeRO-1 and SCAPE reduce-scatter in one bucket."""
    one_bucket = cfg.scheme in ("dense-zero1", "scape-partitioned")
    bucket = float("inf") if one_bucket else cfg.bucket_bytes
    return replace(cfg, overlap_grad_reduce=False, overlap_param_gather=False,
                   bucket_bytes=bucket)


def make_scheme(cfg: SchemeConfig, params: list[torch.nn.Parameter], comm: Comm,
                hyper: Hyper) -> Scheme:
    cfg = runtime_config(cfg.validate())
    return runtime_class(cfg)(cfg, params, comm, hyper)


__all__ = ["RUNTIME", "Scheme", "make_scheme", "runtime_class", "runtime_config"]
