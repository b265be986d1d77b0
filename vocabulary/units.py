"""Byte sizes as people write them: `1KiB`, `4MB`, `1e9`, and ranges `1KiB..8GiB`.

Binary prefixes (KiB, MiB, GiB, TiB) and the bare letters (K, M, G, T, as nccl-tests reads
them) are powers of 1024; decimal ones (KB, MB, GB, TB) are powers of 1000. A lower-case b
(1mb, 1Gb) could mean bits and is refused.
"""

from __future__ import annotations

import math
import re

from vocabulary.errors import UserError

_PREFIX = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
_DECIMAL = {"KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12}
_SIZE = re.compile(r"^\s*([-+]?[0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([A-Za-z]*)\s*$")


def parse_size(text: str) -> int:
    """Bytes in `text`; a positive whole number of bytes or a UserError naming the text."""
    match = _SIZE.match(text)
    if not match:
        raise UserError(f"cannot read size {text!r}: write a positive number with an optional "
                        "unit, e.g. 4096, 1KiB, 8MiB, 1GB")
    number, unit = float(match.group(1)), match.group(2)
    if unit.endswith("b"):  # 1b, 1mb, 1Gb: bits or bytes? refused rather than guessed
        raise UserError(f"cannot read size {text!r}: a lower-case b reads as bits; write B "
                        "for bytes (1B, 1MB, 1MiB)")
    u = unit.upper()
    if u in _DECIMAL and unit[-1] == "B" and not unit.endswith("iB"):
        factor = _DECIMAL[u]
    elif u.endswith("IB") and u[:-2] in _PREFIX and u[:-2]:
        factor = _PREFIX[u[:-2]]
    elif u.endswith("I") and u[:-1] in _PREFIX and u[:-1]:  # 2Mi, as Kubernetes writes
        factor = _PREFIX[u[:-1]]
    elif u in _PREFIX or u == "B":
        factor = _PREFIX.get(u, 1)
    else:
        raise UserError(f"cannot read size {text!r}: unknown unit {unit!r} "
                        "(use B, KiB, MiB, GiB, TiB, Ki, Mi, Gi, K, M, G, KB, MB, GB)")
    size = number * factor
    if size <= 0:
        raise UserError(f"size {text!r} must be positive")
    if not size <= MAX_BYTES:
        raise UserError(f"size {text!r} is beyond {MAX_BYTES >> 40} TiB: no collective moves "
                        "that much in one call")
    if size != int(size):
        raise UserError(f"size {text!r} must be a whole number of bytes")
    return int(size)


MAX_BYTES = 1 << 50  # 1 PiB: a sane bound for one collective

# token counts are spoken in powers of 1000 (Llama 3's "15T tokens", Chinchilla's "1.4T");
# B is a billion, as papers write it, and tokens are never bytes
_TOKENS = {"": 1, "K": 10**3, "M": 10**6, "B": 10**9, "G": 10**9, "T": 10**12, "P": 10**15}
# context lengths in powers of 1024 ("8k context" is 8,192 tokens, "128k" 131,072)
_LENGTH = {"": 1, "K": 1 << 10, "M": 1 << 20}
_COUNT = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([A-Za-z]*)\s*$")


def _count(text: str, flag: str, units: dict[str, int], example: str) -> float:
    # thousands separators only in groups of three (15,000,000): "1,2" is no number
    grouped = re.fullmatch(r"\s*\d{1,3}(,\d{3})+(\.\d+)?\s*[A-Za-z]*\s*", str(text))
    match = _COUNT.match(str(text).replace(",", "") if grouped else str(text))
    unit = match.group(2) if match else ""
    key = unit.upper()[:-1] if unit.upper().endswith("I") and units is _LENGTH else unit.upper()
    if not match or key not in units:
        known = ", ".join(k for k in units if k)
        raise UserError(f"{flag} {text!r}: cannot read it; write a number with an optional "
                        f"suffix ({known}), e.g. {example}")
    return float(match.group(1)) * units[key]


def _plain(text: str) -> float | None:
    """A number without a suffix (inf and nan included), left to the option's own checks."""
    try:
        return float(text)
    except ValueError:
        return None


def parse_tokens(text: str | float, flag: str = "--tokens") -> float:
    """Tokens as people write them: `1T`, `500B`, `2.5e12`, `15,000,000,000,000`. A plain
    number is returned as read (the request checks it is finite and positive)."""
    if isinstance(text, int | float):
        return float(text)
    plain = _plain(text)
    return plain if plain is not None else _count(text, flag, _TOKENS, "1T, 500B, 1e12")


def parse_length(text: str | int, flag: str = "--seq-len") -> int:
    """A sequence length: `8k` (8,192), `128K` (131,072), `4096`; a whole plain number is
    returned as read (the step checks it is at least 1)."""
    if isinstance(text, int):
        return text
    plain = _plain(text)
    value = plain if plain is not None else _count(text, flag, _LENGTH, "4096, 8k (8,192), 128k")
    if not math.isfinite(value) or value != int(value):
        raise UserError(f"{flag} {text!r} reads as {value:g} tokens: give a whole number, "
                        "e.g. 4096 or 8k")
    return int(value)


def parse_sizes(text: str) -> list[int]:
    """`1KiB,1MiB,1GiB` (a list) or `1KiB..8GiB` (doubling from the first while not past the
    last, as nccl-tests' -f 2: `3..100` ends at 96)."""
    text = text.strip()
    if ".." in text:
        lo_text, _, hi_text = text.partition("..")
        for end, part in (("start", lo_text), ("end", hi_text)):
            if not part.strip():
                raise UserError(f"size range {text!r} has no {end}: write e.g. 1KiB..1GiB")
        lo, hi = parse_size(lo_text), parse_size(hi_text)
        if hi < lo:
            raise UserError(f"size range {text!r} ends below its start")
        sizes = [lo]
        while sizes[-1] * 2 <= hi:
            sizes.append(sizes[-1] * 2)
        return sizes
    parts = text.split(",")
    if not any(p.strip() for p in parts):
        raise UserError("no sizes given: write e.g. 1KiB,1MiB or 1KiB..1GiB")
    if not all(p.strip() for p in parts):
        raise UserError(f"sizes {text!r} have an empty item: write e.g. 1KiB,1MiB")
    sizes = [parse_size(p) for p in parts]
    seen: dict[int, str] = {}
    for size, part in zip(sizes, parts, strict=True):
        if size in seen:  # the same row twice would read as two measurements
            raise UserError(f"sizes {text!r} list {format_bytes(size)} twice ({seen[size]!r} "
                            f"and {part.strip()!r}): give each size once")
        seen[size] = part.strip()
    return sizes


def format_bytes(n: float) -> str:
    """Shortest exact binary form of at most four digits when there is one (`1GiB`,
    `1536KiB`), else bytes up to ten digits (`3145729B`), else four significant digits of the
    largest unit, marked approximate (`~931.3GiB` for 1e12 bytes, not `976562500KiB`)."""
    units = (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10))
    for unit, factor in units:
        if n >= factor and n % factor == 0 and n // factor < 10_000:
            return f"{int(n // factor)}{unit}"
    if n < 1e10:
        return f"{int(n)}B"
    unit, factor = next((u, f) for u, f in units if n >= f)
    return f"~{n / factor:.4g}{unit}"


def reads_zero(text: str) -> bool:
    """Whether a formatted number (`0.0`, `-0`, `0.000`; separators allowed) reads as zero."""
    try:
        return float(text.replace(",", "")) == 0
    except ValueError:
        return False


def never_zero(text: str, value: float, least: float = 0.0) -> str:
    """`text` (`value` formatted), except where it reads as zero while `value` is positive and
    at least `least`: then two significant digits (a tiny model's hours, a cheap plan's cost;
    `least` leaves float residue at zero)."""
    return f"{value:.2g}" if value > 0 and value >= least and reads_zero(text) else text


def figure_text(value: float, decimals: int) -> str:
    """`value` with thousands separators and `decimals` places, never rounded to zero."""
    return never_zero(f"{value:,.{decimals}f}", value)


def span(low, high, spec: str = "") -> str:
    """'64-512', or '64' where the values are one (not '64-64')."""
    return format(low, spec) if low == high else f"{low:{spec}}-{high:{spec}}"


def format_duration(seconds: float) -> str:
    """H:MM:SS from an hour up, M:SS below (progress lines' time left)."""
    seconds = max(0, round(seconds))
    h, rest = divmod(seconds, 3600)
    return f"{h}:{rest // 60:02d}:{rest % 60:02d}" if h else f"{rest // 60}:{rest % 60:02d}"


def parse_names(text: str, flag: str) -> list[str]:
    """A comma-separated list the user typed: at least one name, none twice."""
    names = [n.strip() for n in text.split(",") if n.strip()]
    if not names:
        raise UserError(f"{flag}: give at least one name, got {text!r}")
    if len(names) != len(text.split(",")):
        raise UserError(f"{flag}: {text!r} has an empty item: separate the names by single commas")
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise UserError(f"{flag}: {', '.join(twice)} listed twice")
    return names


def parse_counts(text: str, flag: str, *, least: int, what: str, example: str) -> list[int]:
    """`2,3` (--nprocs) or `64,512,4096` (report --gpus): whole numbers of at least `least`,
    each once; an empty item, a word, a fraction or a smaller count is refused in one line
    naming `flag` and an example."""
    parts = [p.strip() for p in text.split(",")]
    if any(not p for p in parts):
        raise UserError(f"{flag} {text!r} has an empty item: give {what} like {example}")
    bad = next((p for p in parts if not p.isdigit() or int(p) < least), None)
    if bad is not None:
        raise UserError(f"{flag} {text!r}: {bad!r} is not a whole number of {what} of at least "
                        f"{least}; write e.g. {example}")
    counts = [int(p) for p in parts]
    twice = sorted({c for c in counts if counts.count(c) > 1})
    if twice:
        raise UserError(f"{flag} lists {', '.join(map(str, twice))} twice ({text!r}): give "
                        "each count once")
    return counts
