"""What would make a refused step fit (issue 58: Llama 3.1 405B with Meta's layout was refused at
87.6 GB and the hints never named dense-zero2, the sharding Meta ran). Each change is tried
alone on the step's memory (simulator/memory/peak.py step_memory, no simulation), and those
that fit are named with the GB they need, in the order they cost step time: sharding more
state first (ZeRO-2 adds no traffic over ZeRO-1; ZeRO-3 / FSDP gathers the weights again in the
backward), then more expert parallelism, more pipeline stages, more tensor parallelism, a
smaller micro-batch, and recomputation (a third more compute at full); where no change fits
alone, pairs of them in the same order."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import replace

from vocabulary.errors import UserError
from vocabulary.recompute import RECIPE_MODULES, for_model

# the dense sharding ladder: a scheme -> the stages past it (dense-adams runs dense-zero1)
SHARDING = {"dense-ddp": ("dense-zero1", "dense-zero2", "dense-zero3"),
            "dense-zero1": ("dense-zero2", "dense-zero3"), "dense-zero2": ("dense-zero3",)}
RECOMPUTE_LADDER = ("selective", "selective-op", "full")


def _changes(cfg) -> Iterator[tuple[str, dict]]:
    """(the flags a user would type, the StepConfig fields they change), cheapest first."""
    for scheme in SHARDING.get(cfg.scheme.scheme, ()):
        yield f"-s {scheme}", {"scheme": replace(cfg.scheme, scheme=scheme)}
    moe = cfg.model.moe
    for ep in (cfg.ep * 2, cfg.ep * 4):
        if moe is not None and moe.n_experts % ep == 0:
            yield f"--ep {ep}", {"ep": ep}
    for pp in (cfg.pp * 2, cfg.pp * 4):  # the step's own rules judge the split (validate)
        if cfg.gpus % (pp * cfg.tp * cfg.cp) == 0:
            yield f"--pp {pp}", {"pp": pp}
    tp = cfg.tp * 2
    if cfg.gpus % (tp * cfg.pp * cfg.cp) == 0:
        # as simulate runs --tp: sequence parallelism on where the user could not have
        # turned it off (a step without a TP group has none)
        yield f"--tp {tp}", {"tp": tp, "sequence_parallel": cfg.tp == 1 or cfg.sequence_parallel}
    if cfg.micro_batch > 1:
        yield f"--micro-batch {cfg.micro_batch // 2}", {"micro_batch": cfg.micro_batch // 2}
    start = (RECOMPUTE_LADDER.index(cfg.recompute) + 1 if cfg.recompute in RECOMPUTE_LADDER
             else 0)
    for recompute in RECOMPUTE_LADDER[start:]:
        if recompute == "full" and (cfg.model.moe is not None or cfg.model.mla is not None):
            # what MoE recipes recompute before the whole layer (RECIPE_MODULES)
            modules = for_model(cfg.model, RECIPE_MODULES)
            if modules != cfg.recompute:
                yield (f"--recompute-modules {modules.split(':', 1)[1]}",
                       {"recompute": modules})
        yield f"--recompute {recompute}", {"recompute": recompute}


def fitting_changes(cfg, memory: Callable[[object], float], usable: Callable[[object], float],
                    most: int = 5) -> list[str]:
    """Up to `most` changes to `cfg` under which one GPU holds the step, each with the GB it
    needs ("-s dense-zero2 (71.2 GB)"): single changes, or where none fits alone, pairs of
    changes to different options; a change the step's own rules refuse (heads that do not
    divide, stages past the layers) is left out. `memory`: a step's peak bytes on one GPU
    (simulator/memory/peak.py step_memory's total); `usable`: the bytes one GPU has for a step
    (a layout with more process groups keeps more NCCL buffers: peak.py usable_bytes)."""
    single = list(_changes(cfg))
    pairs = [(f"{a} {b}", {**ka, **kb}) for i, (a, ka) in enumerate(single)
             for b, kb in single[i + 1:] if not set(ka) & set(kb)]
    for tries in (single, pairs):
        out = []
        for flags, fields in tries:
            try:
                changed = replace(cfg, **fields).validate()
                need = memory(changed)
            except (UserError, ValueError, ZeroDivisionError):
                continue
            if need <= usable(changed):
                out.append(f"{flags} ({need / 1e9:.1f} GB)")
            if len(out) == most:
                break
        if out:
            return out
    return []
