"""Every scheme side by side on one model and cluster, with speedup over a baseline."""

from __future__ import annotations

import re
from dataclasses import replace

from profiles import UserError
from scape.plan import (
    AUTHORS_OPTIONS,
    BITS_SCHEMES,
    OPTION_SCHEMES,
    PARTITIONED_OPTIONS,
    SPARSE_SCHEMES,
    SchemeConfig,
    flag,
    foreign_options,
    make_config,
)
from simulator.memory.peak import memory_columns
from simulator.network.engine import PhaseCache
from simulator.network.topology import build_topology
from simulator.step.schedule import run_mean
from simulator.step.simulate import simulate_step
from simulator.step.step_config import StepConfig
from vocabulary.names import ALIASES

# The default line-up: the paper's baselines, the other families at their usual settings.
DEFAULT_SCHEMES = (
    "dense-adamw", "dense-adams", "dense-ddp", "quantized:8", "topk:0.99", "scalecom:0.99",
    "scape:0.9", "scape:0.99", "scape-partitioned:0.99",
)
DEFAULT_SPARSITY = 0.99  # the SCAPE paper's headline setting, when none is given


def resolved_scheme(cfg: SchemeConfig) -> dict:
    """The options a scheme ran with, for every output: its family, sparsity, bits, optimizer,
    overlap and buckets, and its variant's options."""
    # an overlap flag the scheme does not read is None: nothing of it overlaps either way
    out = {"scheme_name": cfg.scheme, "sparsity": cfg.sparsity, "optimizer": cfg.optimizer,
           **{o: getattr(cfg, o) if cfg.scheme in OPTION_SCHEMES[o] else None
              for o in ("overlap_grad_reduce", "overlap_param_gather")},
           "bucket_MB": None if cfg.bucket_bytes is None else cfg.bucket_bytes / 1e6}
    if cfg.scheme in BITS_SCHEMES:
        out["bits"] = cfg.bits
    if cfg.scheme == "scape-partitioned":
        out.update({name: getattr(cfg, name) for name in PARTITIONED_OPTIONS})
    if cfg.extra:
        out["scheme_options"] = dict(cfg.extra)
    if cfg.density_warmup_steps or cfg.density_dense_steps:
        out.update(density_warmup_steps=cfg.density_warmup_steps,
                   density_dense_steps=cfg.density_dense_steps,
                   density_shape=cfg.density_shape)
    if cfg.clip_grad is not None:
        out["clip_grad"] = cfg.clip_grad
    if cfg.grad_all_reduce:  # DeepSpeed's BF16_Optimizer (--stack deepspeed)
        out["grad_all_reduce"] = True
    return out


def refuse_foreign(name: str, foreign: list[str]) -> None:
    """A UserError naming the typed options `name` does not read and the schemes that do."""
    if foreign:
        where = "; ".join(f"{flag(o)} applies to {', '.join(OPTION_SCHEMES[o])}"
                          for o in foreign)
        raise UserError(f"{', '.join(flag(o) for o in foreign)}: not an option of {name} "
                        f"({where})")


def refuse_unread(specs: list[str], typed) -> None:
    """A line-up shares one set of flags, each scheme reading its own: refuse a typed option
    that no scheme of the line-up reads."""
    schemes = {make_config(s.strip().partition(":")[0]).scheme for s in specs}
    unread = [o for o in typed if all(foreign_options(s, [o]) for s in schemes)]
    refuse_foreign(" or ".join(dict.fromkeys(s.strip() for s in specs)), unread)


def parse_scheme(spec: str, base: SchemeConfig | None = None,
                 only_own: bool = False, given: frozenset[str] = frozenset()) -> SchemeConfig:
    """`scape:0.99` (sparsity), `quantized:4` (bits), `dense-adams`: a validated config.

    Options of `base` (overlap, buckets, SCAPE options) carry over; name and value replace.
    With `only_own` (a line-up of schemes sharing one set of flags), each SCAPE variant keeps
    only its own options: the partitioned variant's are reset for `scape`, the reducer's
    dropped for the others. `given` names the options of `base` the user typed: a typed
    option is used, never replaced by a default, and one that contradicts NAME:VALUE or an
    alias (quantized:8 --bits 4, dense-adams --optimizer adamw) is an error.
    """
    name, colon, value = spec.strip().partition(":")
    if colon and not value.strip():
        raise UserError(f"cannot read {spec!r}: a value follows the colon, e.g. scape:0.99, "
                        "quantized:4 (or give the name alone)")
    opts = {}
    if value:
        # a plain decimal number: float() would also take "0_9", "nan" and "infinity"
        if not re.fullmatch(r"\s*[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?\s*", value):
            raise UserError(f"cannot read {spec!r}: write NAME or NAME:VALUE, e.g. scape:0.99, "
                            "quantized:4")
        number = float(value) + 0.0  # -0 is 0
        key = "bits" if name in BITS_SCHEMES else "sparsity"
        if key == "sparsity" and make_config(name).scheme not in SPARSE_SCHEMES:
            raise UserError(f"{spec!r}: {name} takes no value (sparse schemes take their "
                            "sparsity, scape:0.99; quantized its bits, quantized:4)")
        if key == "bits" and number != int(number):
            raise UserError(f"cannot read {spec!r}: bits must be a whole number")
        if key == "sparsity" and 1 <= number < 100:  # 99 for 99%: refused with the reading
            raise UserError(f"cannot read {spec!r}: sparsity is a fraction in [0, 1); did you "
                            f"mean {name}:{number / 100:g} ({number:g}% of the gradient "
                            "left unsent)?")
        opts[key] = int(number) if key == "bits" else number
        if base is not None and key in given and getattr(base, key) != opts[key]:
            raise UserError(f"{spec!r} and --{key} {getattr(base, key):g} disagree: give one")
    cfg = make_config(name, **opts)
    if not only_own:
        refuse_foreign(name, foreign_options(cfg.scheme, given))
    if (name in ALIASES and base is not None and "optimizer" in given
            and base.optimizer != cfg.optimizer):
        raise UserError(f"{name} is {ALIASES[name]['scheme']} with {cfg.optimizer}; "
                        f"--optimizer {base.optimizer} contradicts it")
    base = base or cfg
    keep = {"scheme": cfg.scheme, **opts}
    if name in ALIASES:  # dense-adamw / dense-adams name their optimizer
        keep["optimizer"] = cfg.optimizer
    if (cfg.scheme in SPARSE_SCHEMES and "sparsity" not in opts and "sparsity" not in given
            and base.sparsity == 0):
        keep["sparsity"] = DEFAULT_SPARSITY
    if cfg.scheme not in SPARSE_SCHEMES:
        keep["sparsity"] = 0.0  # dense and quantized schemes send everything
    if only_own:
        authors = cfg.scheme == "scape"
        keep["extra"] = {k: v for k, v in base.extra.items() if (k in AUTHORS_OPTIONS) == authors}
        if authors:
            keep.update({k: getattr(cfg, k) for k in PARTITIONED_OPTIONS})
    return replace(base, **keep).validate()


def refuse_same(names: list[str], schemes: list[SchemeConfig]) -> None:
    """Two spellings of one configuration (scape and scape:0.99, dense-adams and dense-zero1
    with AdamS) would give the same row twice: refused, naming both."""
    for i, (name, scheme) in enumerate(zip(names, schemes, strict=True)):
        for other, earlier in zip(names[:i], schemes[:i], strict=True):
            if scheme == earlier:  # dataclass equality: every option alike
                raise UserError(f"{other} and {name} are the same scheme (the same options): "
                                "give it once")


def compare_records(base: StepConfig, specs: list[str], baseline: str,
                    run_steps: int | None = None) -> list[dict]:
    """One row per scheme: step time, breakdown, bytes per GPU, speedup over `baseline`.

    With `run_steps`, also the average over a run of that many steps (`run_mean_step_s`,
    `run_mean_bytes_per_gpu`, `run_speedup`): SCAPE's density warm-up (simulator/step/schedule.py)
    makes its early steps dearer than the steady one; other schemes' steps are all alike.
    Plain dicts, so `scape compare`'s table prints without importing pandas (issue 58)."""
    if not specs:
        raise UserError("no schemes to compare")
    names = [s.strip() for s in specs]
    schemes = [parse_scheme(spec, base.scheme, only_own=True) for spec in specs]
    refuse_same(names, schemes)
    baseline = baseline.strip()
    if baseline not in names:
        ref_scheme = parse_scheme(baseline, base.scheme, only_own=True)
        # another spelling of a listed scheme (scape:0.990 for scape:0.99) is that row
        same = [n for n, s in zip(names, schemes, strict=True) if s == ref_scheme]
        if same:
            baseline = same[0]
        else:
            names.append(baseline)
            schemes.append(ref_scheme)
    cache = PhaseCache(build_topology(base.hardware, base.gpus))
    rows = []
    for name, scheme in zip(names, schemes, strict=True):
        cfg = replace(base, scheme=scheme)
        result = simulate_step(cfg, cache=cache)
        resolved = resolved_scheme(scheme)
        options = resolved.pop("scheme_options", None)
        rows.append({"scheme": name, **resolved, "bits": resolved.get("bits"),
                     "options": options, **result.as_dict(), **memory_columns(cfg)})
        if run_steps:
            mean = run_mean(cfg, run_steps, cache)
            rows[-1].update(run_mean_step_s=mean.mean_step_s,
                            run_mean_bytes_per_gpu=mean.mean_bytes_per_gpu)
    # every row with every column (a scheme's own options are None on the others' rows), in
    # the order they first appear, as a table of them reads
    columns = dict.fromkeys(k for r in rows for k in r)
    rows = [{k: r.get(k) for k in columns} for r in rows]
    ref = next(r for r in rows if r["scheme"] == baseline)
    for r in rows:
        r["speedup"] = ref["step_time_s"] / r["step_time_s"]
    if run_steps:
        for r in rows:
            r["run_speedup"] = ref["run_mean_step_s"] / r["run_mean_step_s"]
    return rows

