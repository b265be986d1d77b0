"""Tokens to quality: how many tokens each scheme needs to reach dense AdamS's final validation
loss, relative to dense AdamS, as a convergence study measured it (bench/convergence_protocol.py
writes profiles/quality/<study>.toml). The planner prices a run by time to that quality with it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from profiles.files import ROOT, read_toml
from profiles.schema import Field, validate_table
from vocabulary.errors import ProfileError
from vocabulary.names import ALIASES, SCHEME_NAMES, scheme_names
from vocabulary.suggest import did_you_mean

STUDY_FIELDS = {
    "study": Field(str, nonempty=True), "command": Field(str, nonempty=True),
    "date": Field(str, nonempty=True), "model": Field(str, nonempty=True),
    "corpus": Field(str, nonempty=True), "tokens_per_step": Field(int, ge=1),
    "steps": Field(int, ge=1), "dense_adams_lr": Field(float, gt=0),
    "dense_adams_final_val_loss": Field(float, gt=0),
    "dense_adams_steps_to_quality": Field(float, gt=0),
}
SCHEME_FIELDS = {
    "scheme": Field(str, nonempty=True), "variant": Field(str, nonempty=True),
    "sparsity": Field(float, ge=0, le=1), "lr": Field(float, gt=0), "seeds": Field(int, ge=1),
    "final_val_loss": Field(float, gt=0), "gap_pct": Field(float),
    "mean_bytes_ratio": Field(float, gt=0),
    # absent: never reached; a scheme cannot need a millionth of dense AdamS's tokens
    "tokens_ratio": Field(float, gt=0, least=1e-6, required=False),
    "reached": Field(bool, required=False),
}


@dataclass(frozen=True)
class QualityEntry:
    scheme: str
    variant: str
    sparsity: float
    lr: float
    seeds: int
    final_val_loss: float
    gap_pct: float
    mean_bytes_ratio: float
    tokens_ratio: float | None  # None: dense AdamS's final loss was never reached


@dataclass(frozen=True)
class QualityStudy:
    study: str
    command: str
    date: str
    model: str
    corpus: str
    tokens_per_step: int
    steps: int
    dense_adams_lr: float
    dense_adams_final_val_loss: float
    dense_adams_steps_to_quality: float
    entries: tuple[QualityEntry, ...]
    path: str

    def lookup(self, scheme: str, sparsity: float) -> QualityEntry | None:
        """The study's entry for `scheme` at `sparsity` (the best of its variants), if any."""
        found = [e for e in self.entries
                 if e.scheme == scheme and abs(e.sparsity - sparsity) < 1e-9]
        return min(found, key=lambda e: e.final_val_loss) if found else None


def parse_quality(path: Path | str, doc: dict) -> QualityStudy:
    top = {k: v for k, v in doc.items() if k != "scheme"}
    values, _ = validate_table(path, "", top, STUDY_FIELDS)

    tables = doc.get("scheme", [])
    if not isinstance(tables, list):
        raise ProfileError(f"{path}: scheme: must be [[scheme]] tables, one per scheme, got "
                           f"{tables!r}")
    entries = []
    for i, table in enumerate(tables):
        e, _ = validate_table(path, f"scheme #{i + 1}", table, SCHEME_FIELDS)
        if e["scheme"] not in (*ALIASES, *SCHEME_NAMES):
            raise ProfileError(f"{path}: [scheme #{i + 1}] scheme: unknown scheme "
                               f"{e['scheme']!r} (known: {scheme_names()})")
        reached = e.pop("reached")
        if (e["tokens_ratio"] is None) == (reached is None or reached):
            raise ProfileError(f"{path}: [scheme #{i + 1}] gives tokens_ratio, or reached = "
                               "false when dense AdamS's loss was never reached; not both")
        # the ratios are over dense AdamS's own: its entry is 1 by definition (a study that
        # says otherwise would scale dense plans' hours by it)
        if (e["scheme"] == "dense-adams" and e["tokens_ratio"] is not None
                and abs(e["tokens_ratio"] - 1) > 1e-9):
            raise ProfileError(f"{path}: [scheme #{i + 1}] dense-adams: tokens_ratio must be 1 "
                               "(every ratio is over dense AdamS's tokens), got "
                               f"{e['tokens_ratio']!r}")
        entries.append(QualityEntry(**e))
    if not entries:
        raise ProfileError(f"{path}: no [[scheme]] entries")
    return QualityStudy(**values, entries=tuple(entries), path=str(path))


def load_quality(name: str) -> QualityStudy:
    """profiles/quality/NAME.toml, or a path to such a file (one with a / or .toml)."""
    if not name.strip():
        raise ProfileError("--quality: give a study name (e.g. convergence-protocol) or a path")
    if name.endswith(".toml") or "/" in name:
        path = Path(name)
    else:
        path = ROOT / "quality" / f"{name}.toml"
        if not path.exists():
            known = ", ".join(sorted(p.stem for p in (ROOT / "quality").glob("*.toml")))
            near = did_you_mean(name, known.split(", "))
            raise ProfileError(f"--quality {name}: no such study{near} (known: {known}; or give a "
                               "path)")
    return parse_quality(path, read_toml(path))
