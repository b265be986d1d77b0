"""nccl-tests logs as published (issue 41): their text read row by row, and a cluster's link
fitted on them with the physics `scape calibrate collectives` fits (simulator/network/fit.py
`fit_tier`: one latency per ring step, one bandwidth per collective and rank count, on the
simulator's own algorithms), so `scape collective --hardware measured/NAME` then predicts any
size, op and rank count from them.

What is read (nccl-tests' `src/common.cu` output, both layouts: before about v2.11 an `error`
column and no `root`; since then `root` and `#wrong`):
- the header: `# nThread T nGpus G ...`, the ranks (`#  Rank  r ... on HOST device d [bus] NAME`),
  `# nccl-tests version` and `# Collective test starting: OP_perf` where printed;
- the size table: size (B, the whole buffer), count, type, redop and root where present, and
  out-of-place and in-place time (us), algbw and busbw (GB/s) and their check;
- the footer (`# Avg bus bandwidth`): a log without it was cut short, and is read as far as it
  is valid, said so;
- NCCL's own lines where the run printed them (NCCL_DEBUG=VERSION or INFO, anywhere in the
  file): `NCCL version X.Y.Z`, the channels (`N coll channels, ...`, `Channel i/N :`), the
  network (`Using network IB`), variables `set by environment` (NCCL_ALGO, NCCL_PROTO, ...) and,
  with NCCL_DEBUG_SUBSYS=TUNING, each call's choice (`AllReduce: 4194304 Bytes -> Algo Ring
  proto LL128 ...` in NCCL 2.19 and later, `Algo 1 proto 2 time ...` before: src/enqueue.cc);
  the nccl-tests header's `nccl-library=22403` gives the version where no line does.
  Launcher output before the header (ssh warnings, banners, OpenMPI help text: a line is a row
  only with a row's shape) is skipped, said so; a prefix a launcher puts before every line it
  relays (srun --label, mpirun --tag-output, Ray) is read off the header's first line and taken
  off every line, lines without it skipped. MPI builds name their binaries `*_perf_mpi`.
  A log pasted with the `#` of its first lines lost is read (GPUs per process then from the
  rank lines' pids); a rank list cut short (`...`) is refused, with the GPU count nccl-tests'
  bus-bandwidth factor implies.
A log of a failed run (a `#wrong` that is not 0 or N/A, an `error` above nccl-tests' own
tolerance for the type, an "Out of bounds values : N FAILED" footer, an "out of memory" or
NCCL/CUDA failure line) is refused with its file and line. Several runs writing one file
(each rank process of a multi-node job prints, or two jobs share a path) repeat rows: the first
of each size is kept.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from pathlib import Path

from profiles import UserError
from vocabulary.gpu_names import family, same_family_or_refuse, stated_gb
from vocabulary.suggest import did_you_mean

# the op a log measures, from nccl-tests' binary names
BINARIES = {"all_reduce_perf": "all_reduce", "all_gather_perf": "all_gather",
            "reduce_scatter_perf": "reduce_scatter", "alltoall_perf": "all_to_all",
            "broadcast_perf": "broadcast", "sendrecv_perf": "sendrecv",
            "reduce_perf": "reduce"}
FAILURE = re.compile(r"out of memory|NCCL failure|CUDA failure|Test failure|test FAILED|"
                     r"Out of bounds values\s*:\s*[1-9]", re.IGNORECASE)
RANK_LINE = re.compile(r"^#?\s*Rank\s+(\d+)\s.*?\bPid\s+(\d+)\s+on\s+(\S+)\s+device\s+(\d+)\s+"
                       r"\[[^\]]*\]\s+(.+?)\s*$")
THREADS = re.compile(r"^#?\s*nThread\s+(\d+)\s+nGpus\s+(\d+)")
# the header's first line, after whatever a launcher puts before every line it relays (srun
# --label "0: ", Ray "(head, rank=0, pid=N)")
PREFIXED = re.compile(r"^(.*?)#\s*(?:nThread\s+\d+\s+nGpus|Rank\s+\d+\s|Using devices|"
                      r"size\s+count|nccl-tests version)")
# mpirun's tag (--tag-output: "[1,0]<stdout>:", OpenMPI's job and rank), with the time
# --timestamp-output puts before it ("Tue Mar  5 12:00:01 2024"): anywhere in a line, since a
# rank's output relayed in pieces puts one in the middle of a row; taken off wherever found
MPI_TAG = re.compile(r"(?:[A-Z][a-z]{2} [A-Z][a-z]{2} +\d{1,2} \d{2}:\d{2}:\d{2} \d{4})?"
                     r"(\[\d+,\d+\]<std(?:out|err)>:)")
# a launcher's rank label left inside a row where a line was relayed in two pieces (srun
# --label "3:"); no nccl-tests cell ends with a colon
LABEL_CELL = re.compile(r"^\d+:$")
# the NICs NCCL's network plugin says a node has: InfiniBand/RoCE verbs list them ("NET/IB :
# Using [0]mlx5_0:1/IB [1]mlx5_3:1/IB ; OOB ..."), aws-ofi-nccl counts them ("Selected
# Provider is efa (found 32 nics)", cxi on Slingshot)
IB_NICS = re.compile(r"^NET/IB ?: Using ((?:\[\d+\]\S+\s*)+)")
OFI_NICS = re.compile(r"\(found (\d+) nics\)")
# the largest |error| the `error` column of nccl-tests before about v2.11 allows per type
# (src/common.cu DeltaMaxValue: half 5e-2, float 1e-5, double 1e-12, integers exact); that
# column prints the largest deviation found, not a count of wrong values (`#wrong`, later)
DELTA_MAX = {"half": 5e-2, "float16": 5e-2, "bfloat16": 5e-2, "float": 1e-5, "float32": 1e-5,
             "double": 1e-12, "float64": 1e-12}
TYPES = {"int8", "uint8", "int32", "uint32", "int64", "uint64", "half", "float16", "float",
         "float32", "double", "float64", "bfloat16", "char", "int", "fp8_e4m3", "fp8_e5m2",
         "f8e4m3", "f8e5m2"}
# NCCL's own debug output (src/debug.cc: "host:pid:tid [dev] NCCL INFO ..."), any position
NCCL_LINE = re.compile(r"\bNCCL (?:INFO|WARN|TRACE)\b ?(.*)$")
NCCL_VERSION = re.compile(r"\bNCCL version (\d+\.\d+\.\d+)")
LIBRARY = re.compile(r"nccl-library=(\d+)")  # nccl-tests' header: NCCL_VERSION_CODE
COLL_CHANNELS = re.compile(r"^(\d+) coll channels")
CHANNEL = re.compile(r"^Channel \d+/(\d+) :")
NETWORK = re.compile(r"^Using network (.+?)\s*$")
ENV_SET = re.compile(r"^(NCCL_[A-Z0-9_]+) set by environment to (.+?)\s*\.?$")
TUNING = re.compile(r"^(?:(\w+): )?(\d+) Bytes -> Algo (\w+) proto (\w+)")
# ncclFuncToString and the enums' order (src/include/nccl_common.h: NCCL_ALGO_TREE 0, RING 1,
# COLLNET_DIRECT 2, COLLNET_CHAIN 3, NVLS 4, NVLS_TREE 5, PAT 6; NCCL_PROTO_LL 0, LL128 1,
# SIMPLE 2) and names (ncclAlgoStr, ncclProtoStr)
NCCL_FUNCS = {"AllReduce": "all_reduce", "AllGather": "all_gather",
              "ReduceScatter": "reduce_scatter", "Broadcast": "broadcast", "Reduce": "reduce"}
ALGO_IDS = ("tree", "ring", "collnet_direct", "collnet_chain", "nvls", "nvls_tree", "pat")
ALGO_NAMES = {"tree": "tree", "ring": "ring", "collnetdirect": "collnet_direct",
              "collnetchain": "collnet_chain", "nvls": "nvls", "nvlstree": "nvls_tree",
              "pat": "pat"}
PROTO_IDS = ("ll", "ll128", "simple")


def _enum(value: str, ids: tuple[str, ...], names: dict[str, str]) -> str | None:
    """An algorithm or protocol as NCCL printed it: its number or its name."""
    if value.isdigit():
        return ids[int(value)] if int(value) < len(ids) else None
    return names.get(value.lower().replace("_", ""))


@dataclass
class NcclInfo:
    """What NCCL itself printed in a log (NCCL_DEBUG), where it did."""

    version: str | None = None
    channels: int | None = None
    network: str | None = None
    env: dict[str, str] = field(default_factory=dict)
    # (op, bytes as printed, algorithm, protocol): one per distinct call shape
    choices: list[tuple[str, int, str, str]] = field(default_factory=list)
    lines: int = 0
    nics: int | None = None  # the NICs a node has, as the network plugin listed them

    def read(self, text: str) -> None:
        self.lines += 1
        if (m := IB_NICS.match(text)) is not None:
            self.nics = self.nics or len(re.findall(r"\[\d+\]", m[1]))
        elif (m := OFI_NICS.search(text)) is not None:
            self.nics = self.nics or int(m[1])
        elif (m := NCCL_VERSION.search(text)) is not None:
            self.version = self.version or m[1]
        elif (m := COLL_CHANNELS.match(text)) is not None:
            self.channels = int(m[1])
        elif (m := CHANNEL.match(text)) is not None:
            self.channels = self.channels or int(m[1])
        elif (m := NETWORK.match(text)) is not None:
            self.network = self.network or m[1]
        elif (m := ENV_SET.match(text)) is not None:
            self.env.setdefault(m[1], m[2])
        elif (m := TUNING.match(text)) is not None:
            op = NCCL_FUNCS.get(m[1]) if m[1] else None
            algo, proto = _enum(m[3], ALGO_IDS, ALGO_NAMES), _enum(m[4], PROTO_IDS, {
                p: p for p in PROTO_IDS})
            if algo and proto:
                choice = (op or "", int(m[2]), algo, proto)
                if choice not in self.choices:
                    self.choices.append(choice)


@dataclass(frozen=True)
class Row:
    size_bytes: int
    time_us: float  # out-of-place
    algbw_GBps: float
    busbw_GBps: float
    in_place_us: float | None
    line: int


@dataclass
class NcclTestsLog:
    path: str
    op: str
    rows: list[Row]
    ranks: int  # in one run: the highest rank + 1
    hosts: tuple[str, ...]
    devices: tuple[str, ...]
    gpus_per_process: int | None
    version: str | None
    complete: bool  # the footer was found
    repeated: int = 0  # rows dropped as repeats of a size already read
    spans_hosts: bool = False  # one run's ranks on several hosts (not several runs in a file)
    notes: list[str] = field(default_factory=list)
    nccl: NcclInfo = field(default_factory=NcclInfo)
    section: int | None = None  # a file of several collectives: the line this one starts at
    host_ranks: tuple[int, ...] = ()  # the ranks each host of `hosts` ran, in its order
    old_layout: bool = False  # nccl-tests before about 2.11: an `error` column, no `#wrong`

    def rank_share(self) -> bool | None:
        """Whether the run's NCCL sized all-gather and reduce-scatter by one rank's share
        (before 2.22.3; [nccl] rank_share_sizes): from the NCCL version it printed, else true
        for nccl-tests' old layout (2021 and before, long before NCCL 2.22); None where the log
        does not tell."""
        if self.nccl.version is not None:
            got = tuple(int(x) for x in re.findall(r"\d+", self.nccl.version)[:3])
            return got < (2, 22, 3)
        return True if self.old_layout else None

    def ranks_per_node(self) -> int | None:
        """The GPUs each host ran where every host ran as many (the node shape the rank
        lines tell), else None."""
        counts = set(self.host_ranks)
        return counts.pop() if len(counts) == 1 else None

    def choices(self) -> list[tuple[int, str, str]]:
        """NCCL's printed choices for this log's op: (size in nccl-tests terms, the whole
        buffer; algorithm; protocol). NCCL before 2.22.3 prints count x type size, a rank's
        share for all-gather and reduce-scatter (src/collectives.cc: sendcount, recvcount);
        from 2.22.3 the whole (ncclFuncMaxSendRecvCount)."""
        per_rank = self.op in ("all_gather", "reduce_scatter") and self.rank_share() is not False
        return [(b * self.ranks if per_rank else b, a, p)
                for op, b, a, p in self.nccl.choices if op in ("", self.op)]


def gpu_notes(devices: set[str], base) -> list[str]:
    """The logs' GPU against the --gpu-from profile's, which the profile written keeps (its
    [gpu], [memory], [compute] and [roofline] tables: nccl-tests times the network only).
    Another GPU family is refused (vocabulary/gpu_names.py). The same family named with less
    memory than the profile's (an A100-SXM4-40GB under dgx-a100's 80 GB) is said: plans on the
    profile then count the profile's memory and bandwidth. Logs that name no device are not
    checked; a name without a family ("NVIDIA Graphics Device") is not checked, said so."""
    notes = []
    for device in sorted(devices):
        if family(device) is None:
            notes.append(f"the logs' GPU name {device!r} names no GPU family this reads "
                         f"(vocabulary/gpu_names.py): not checked against --gpu-from "
                         f"{base.name}'s {base.gpu.model}, whose tables the profile written "
                         "keeps")
            continue
        same_family_or_refuse(device, f"--gpu-from {base.name}", base.gpu.model, "the logs")
        named = stated_gb(device)
        if (family(device) is not None and named is not None
                and named < 0.9 * base.gpu.memory_GB):
            notes.append(f"the logs ran on {device} ({named:g} GB) and the profile written "
                         f"keeps {base.name}'s {base.gpu.model} ({base.gpu.memory_GB:g} GB, "
                         f"HBM {base.gpu.hbm_bw_GBps:g} GB/s): plans on it count that GPU's "
                         "memory and bandwidth; use it for collectives, or give --gpu-from a "
                         "profile of the smaller GPU")
    return notes


def coverage(fitted: list[dict], logs: list[NcclTestsLog]) -> dict:
    """What the rows fitted measured, as the profile's [measured] logs_* keys: the ops, the
    GPU and node counts of the runs, the smallest and largest size (`scape collective` says
    where a request goes beyond them)."""
    ops = {r["op"] for r in fitted}
    runs = [log for log in logs if log.op in ops]
    return {"logs_ops": ",".join(sorted(ops)),
            "logs_gpus": ",".join(str(g) for g in sorted({int(r["world"]) for r in fitted})),
            "logs_nodes": ",".join(str(n) for n in sorted(
                {len(log.hosts) if log.spans_hosts else 1 for log in runs})),
            "logs_min_bytes": min(int(r["size_bytes"]) for r in fitted),
            "logs_max_bytes": max(int(r["size_bytes"]) for r in fitted)}


STARTING = re.compile(r"Collective test starting:\s*(\w+)")


def _binary(text: str) -> str | None:
    """The nccl-tests binary a log says it ran ('Collective test starting' line), without the
    `_mpi` that builds with MPI=1 add to its name (since 2.18), or None."""
    started = STARTING.search(text)
    return started[1].removesuffix("_mpi") if started else None


def _op_of(path: Path, text: str, op: str | None) -> str:
    # the file's name, as people spell the op in it (all_reduce, allreduce, all-reduce): the
    # longest op name first, so "allreduce" is not read as reduce
    squashed = re.sub(r"[_\-.]", "", path.name.lower())
    named = next((o for o in sorted(BINARIES.values(), key=len, reverse=True)
                  if o.replace("_", "") in squashed), None)
    binary = _binary(text)
    if binary is not None and binary not in BINARIES:
        raise UserError(f"{path}: the log measures {binary} ('Collective test starting' "
                        f"line), which this reads no table of (nccl-tests' "
                        f"{', '.join(BINARIES)})")
    found = BINARIES[binary] if binary is not None else named
    if op is not None:
        if found is not None and found != op:
            raise UserError(f"{path}: the log measures {found}, not --op {op}")
        return op
    if found is None:
        raise UserError(f"{path}: the log does not say which collective it measures (no "
                        "'Collective test starting' line, no op in the file name): give --op")
    return found


def _number(text: str, path: Path, line: int, what: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise UserError(f"{path}: line {line}: {what} {text!r} is not a number") from None


def _row_shaped(cells: list[str]) -> bool:
    """Whether a line has a size row's shape (size, count, type, ..., at least 11 cells), as
    opposed to a launcher's line that happens to start with a digit ("1st MCA variable")."""
    return (len(cells) >= 11 and cells[0].isdigit() and cells[1].isdigit()
            and cells[2].lower() in TYPES)


def _untagged(line: str) -> str:
    """A line with mpirun's tags as one prefix: the first tag kept (the line's relay prefix,
    read off like any launcher's), its timestamp dropped (it changes from line to line), and
    every later tag taken out (a piece of the same rank's line relayed apart)."""
    found = list(MPI_TAG.finditer(line))
    if not found:
        return line
    first = found[0]
    rest = MPI_TAG.sub(" ", line[first.end():])
    return line[:first.start()] + first[1] + rest


def _world_from_bw(op: str, rows: list[Row]) -> int | None:
    """The GPU count nccl-tests' own bus-bandwidth factor implies at the largest size (busbw /
    algbw = 2(n-1)/n for all-reduce, (n-1)/n for all-gather, reduce-scatter and all-to-all;
    1 for the others, which tell nothing), or None."""
    r = max(rows, key=lambda r: r.algbw_GBps)
    if op not in ("all_reduce", "all_gather", "reduce_scatter", "all_to_all") or r.algbw_GBps <= 0:
        return None
    ratio = r.busbw_GBps / r.algbw_GBps / (2 if op == "all_reduce" else 1)
    return round(1 / (1 - ratio)) if 0 < ratio < 1 else None


def _check_passed(cell: str, dtype: str, columns: list[str]) -> bool:
    """A row's result check as nccl-tests printed it: `#wrong` counts wrong values (0 passes);
    the older `error` column prints the largest deviation, which passes up to the type's
    tolerance (DELTA_MAX); N/A where the check was off (-c 0)."""
    if cell == "N/A":
        return True
    try:
        value = float(cell)
    except ValueError:
        return False
    if "error" in columns:
        return abs(value) <= DELTA_MAX.get(dtype.lower(), 0.0)
    return value == 0


def _sections(lines: list[str]) -> list[int]:
    """Where each collective of a file starts (0-based line indices): nccl-tests binaries run
    one after another into one file print one header each (`# nccl-tests version` and
    `# Collective test starting: OP_perf`); a file of one collective is one section. A binary
    that starts again right after itself (A, A) starts no new section; one that comes back
    after another (A, B, A) does, read as a log of its own."""
    starts, binary = [], None
    for i, ln in enumerate(lines):
        if (m := STARTING.search(ln)) is not None and m[1] != binary:
            # the same binary again is the same collective run twice into the file (two
            # nodes' processes printing): one log, its repeated rows dropped (`_parse`)
            starts.append(i)
            binary = m[1]
    if len(starts) < 2:
        return [0]
    # a section opens at its version line where one comes just before its starting line
    out = [i - 1 if i > 0 and "nccl-tests version" in lines[i - 1] else i for i in starts]
    return [0, *out[1:]]


def _read(path: str | Path) -> tuple[Path, str]:
    p = Path(path)
    try:
        return p, p.read_text(errors="replace")
    except OSError as exc:
        raise UserError(f"{path}: cannot read it ({exc.strerror or exc})") from None


def parse_logs(path: str | Path, op: str | None = None) -> list[NcclTestsLog]:
    """Every collective of one nccl-tests output file (several binaries run into one file, as
    cluster benchmark scripts do, are read one by one, each section's lines numbered as in the
    file); `op`: only its sections (refused where none measures it)."""
    p, text = _read(path)
    lines = text.splitlines()
    starts = _sections(lines)
    if len(starts) == 1:
        return [_parse(p, text, op, 0)]
    bounds = [*starts[1:], len(lines)]
    found = []
    for start, end in zip(starts, bounds, strict=True):
        chunk = "\n".join(lines[start:end])
        if op is not None and BINARIES.get(_binary(chunk)) != op:
            continue
        found.append(replace(_parse(p, chunk, op, start), section=start + 1))
    if not found:
        held = [str(_binary("\n".join(lines[s:e]))) for s, e in zip(starts, bounds,
                                                                      strict=True)]
        raise UserError(f"{path}: it holds {len(starts)} collectives ({', '.join(held)}), none "
                        f"of them --op {op}")
    return found


def parse_log(path: str | Path, op: str | None = None) -> NcclTestsLog:
    """One nccl-tests log, read as published; a UserError naming the file and line where it is
    not one, or where the run failed. A file of several collectives gives the one of `op`
    (`parse_logs` reads them all)."""
    logs = parse_logs(path, op)
    if len(logs) > 1:
        raise UserError(f"{path}: it holds {len(logs)} collectives "
                        f"({', '.join(log.op for log in logs)}): give --op for one")
    return logs[0]


def _parse(p: Path, text: str, op: str | None, offset: int) -> NcclTestsLog:
    """One collective's text (`offset`: the file's lines before it, for line numbers)."""
    path = p
    name = _op_of(p, text, op)
    ranks: dict[tuple[str, str], set[int]] = {}
    devices, hosts, rows, seen = [], [], [], set()
    threads = version = None
    complete, repeated, columns, cut = False, 0, None, None
    info, launcher, elided = NcclInfo(), 0, None
    first, others = None, set()
    lines = [_untagged(ln) for ln in text.splitlines()]
    last = max((i for i, ln in enumerate(lines, offset + 1) if ln.strip()), default=0)
    prefix = next((m[1] for ln in lines if (m := PREFIXED.match(ln.strip()))), "")
    held, joined = None, 0  # a row relayed in two lines: its first part, where it was
    last_size = 0.0  # the size of the row before: a table's sizes go up
    for i, raw in enumerate(lines, offset + 1):
        line = raw.strip()
        if not line:
            continue
        if FAILURE.search(line):
            raise UserError(f"{path}: line {i}: the run failed ({line[:80]!r}); nothing is "
                            "fitted on a failed run")
        if (m := NCCL_LINE.search(line)) is not None or line.startswith("NCCL version"):
            info.read(m[1] if m is not None else line)  # NCCL's own output, not a row
            continue
        if prefix:  # the launcher relays every line of the log behind the same prefix
            if line == prefix.strip():  # an empty line of the log
                continue
            if not line.startswith(prefix):
                launcher += 1  # another process's or the launcher's own line
                continue
            line = line[len(prefix):].strip()
            if not line:
                continue
            if columns is not None and prefix.strip() in line:
                # each write of a rank relayed with its own prefix (Intel MPI's -prepend-rank
                # "[0]" after "-1" and "0" inside a row): every one inside a row taken out
                line = line.replace(prefix.strip(), " ")
        if columns is None and line in ("...", "\u2026") and ranks:
            elided = elided or i  # a rank list cut short where the log was copied
            continue
        if line.startswith("#") or THREADS.match(line) or RANK_LINE.match(line):
            m = RANK_LINE.match(line)
            if m:
                ranks.setdefault((m[3], m[2]), set()).add(int(m[1]))
                hosts.append(m[3])
                devices.append(m[5])
            elif (t := THREADS.match(line)) is not None:
                threads = int(t[2])
            elif "nccl-tests version" in line:
                version = line.lstrip("# ").split(" nccl-headers")[0]
                if (lib := LIBRARY.search(line)) is not None and info.version is None:
                    code = int(lib[1])  # NCCL_VERSION_CODE: major x 10000 + minor x 100 + patch
                    info.version = f"{code // 10000}.{code // 100 % 100}.{code % 100}"
            elif line.startswith("# Avg bus bandwidth"):
                complete = True
            elif re.match(r"#\s+size\s+count", line):
                columns = line.lstrip("#").split()
            continue
        cells = [c for c in line.split() if not LABEL_CELL.match(c)]
        if columns is None:
            if not _row_shaped(cells):  # the launcher's output (ssh, mpirun), not a row
                launcher += 1
                continue
            raise UserError(f"{path}: line {i}: a row before the table's header (size, count, "
                            "...): not an nccl-tests log")
        if held is not None:  # the rest of a row relayed in two lines
            first_line, first_cells = held
            held = None
            if len(first_cells) + len(cells) == len(columns):
                cells, joined = first_cells + cells, joined + 1
            else:
                raise UserError(f"{path}: line {first_line}: {len(first_cells)} cells where the "
                                f"header has {len(columns)} ({' '.join(columns)}), and line {i} "
                                "does not complete them")
        elif (len(cells) < len(columns) and len(cells) >= 3 and cells[0].isdigit()
              and cells[2].lower() in TYPES and i != last):
            held = (i, cells)  # a row's first part; the next line may hold the rest
            continue
        # size count type [redop] [root] time algbw busbw check time algbw busbw check
        n_keys = len(cells) - 8
        if n_keys not in (3, 4, 5) or len(cells) != len(columns):
            if i == last:  # the file ends inside this row: cut short, read up to it
                cut = i
                break
            raise UserError(f"{path}: line {i}: {len(cells)} cells where the header has "
                            f"{len(columns)} ({' '.join(columns)})")
        size = _number(cells[0], p, i, "size")
        t, algbw, busbw, check = cells[n_keys:n_keys + 4]
        t_in, _, _, check_in = cells[n_keys + 4:]
        for c in (check, check_in):
            if not _check_passed(c, cells[2], columns):
                limit = ("0" if "error" not in columns else
                         f"{DELTA_MAX.get(cells[2].lower(), 0.0):g} for {cells[2]}")
                raise UserError(f"{path}: line {i}: the result check reads {c} (wrong values "
                                f"at this size; passing is at most {limit}): nothing is fitted "
                                "on a run that failed it")
        if size <= 0:  # nccl-tests' 0-byte rows time a launch, not a collective
            continue
        kind = tuple(cells[2:n_keys])  # type, and redop and root where printed
        first = first or kind
        if kind != first:  # -d all / -o all: every size timed for several types or ops
            others.add(" ".join(kind))
            continue
        if size in seen:
            repeated += 1
            last_size = size
            continue
        if size < last_size:  # a new size below the last: not one table of nccl-tests
            raise UserError(f"{path}: line {i}: size {int(size):,} B after {int(last_size):,} B: "
                            "nccl-tests times its sizes going up (-b to -e); a table whose "
                            "sizes go down to one not seen before is not one run's")
        seen.add(size)
        last_size = size
        times = (_number(t, p, i, "time"),
                 None if t_in == "N/A" else _number(t_in, p, i, "time"))
        if any(x is not None and not x > 0 for x in times):  # NaN, 0 or negative
            raise UserError(f"{path}: line {i}: a time of {t if not times[0] > 0 else t_in} us: "
                            "a collective's time is a positive number of microseconds")
        rows.append(Row(int(size), times[0], _number(algbw, p, i, "algbw"),
                        _number(busbw, p, i, "busbw"), times[1], i))
    if not rows:
        raise UserError(f"{path}: no size row with a positive size (is it an nccl-tests log?)")
    if len(set(devices)) > 1:
        kinds = ", ".join(sorted(set(devices)))
        raise UserError(f"{path}: its ranks ran on different devices ({kinds}): one system "
                        "per log")
    # each run numbers its ranks from 0 (two runs in one file: two lists 0..7)
    world = max((max(r) + 1 for r in ranks.values()), default=0)
    if elided:
        said = _world_from_bw(name, rows)
        raise UserError(f"{path}: line {elided}: the rank lines are cut short ('...'): the log "
                        f"does not say how many GPUs and hosts ran ({world} rank(s) printed"
                        + (f"; busbw / algbw says {said} GPUs" if said else "")
                        + "): give the log with its whole '#  Rank' list")
    notes = []
    if threads is None and ranks:
        # no '# nThread T nGpus G' line (lost where the log was copied): the GPUs one process
        # drove are the ranks its pid printed
        threads = max(len(r) for r in ranks.values())
        notes.append(f"{p.name}: no '# nThread ... nGpus G' line: {threads} GPU(s) per process "
                     "read from the rank lines' pids")
    if not complete:
        notes.append(f"{p.name}: no '# Avg bus bandwidth' footer: the log was cut short; its "
                     f"{len(rows)} complete rows are read"
                     + (f" (line {cut} ends inside a row and is left out)" if cut else ""))
    if held is not None:
        raise UserError(f"{path}: line {held[0]}: {len(held[1])} cells where the header has "
                        f"{len(columns)} ({' '.join(columns)})")
    if joined:
        notes.append(f"{p.name}: {joined} row(s) the launcher relayed in two lines are read "
                     "joined")
    if repeated:
        notes.append(f"{p.name}: {repeated} rows repeat a size already read (several runs or "
                     "processes wrote the file): the first of each size is kept")
    if launcher:
        where = (f"without the prefix {prefix!r} the launcher put before the log's lines"
                 if prefix else "before the table's header")
        notes.append(f"{p.name}: {launcher} line(s) {where} are not nccl-tests' (the "
                     "launcher's or other processes' output): skipped")
    if others:
        notes.append(f"{p.name}: the log times its sizes for several data types or reductions "
                     f"(nccl-tests -d all / -o all): the rows of {' '.join(first)} are read, "
                     f"those of {', '.join(sorted(others))} left out")
    if world < 2:
        said = _world_from_bw(name, rows)
        raise UserError(f"{path}: the log names {world} rank(s) ('#  Rank' lines): a "
                        "collective needs 2 or more"
                        + (f" (busbw / algbw says {said} GPUs: give the log with its '#  Rank' "
                           "lines, which say how many hosts ran)" if said and said > 1 else ""))
    # one run over several hosts: no process group holds all of its ranks (two runs of one
    # node each, written to one file, each hold 0..7)
    spans = len(set(hosts)) > 1 and max(len(r) for r in ranks.values()) < world
    on_host: dict[str, set[int]] = {}
    for (host, _), numbers in ranks.items():
        on_host.setdefault(host, set()).update(numbers)
    return NcclTestsLog(str(p), name, rows, world, tuple(dict.fromkeys(hosts)),
                        tuple(dict.fromkeys(devices)), threads, version, complete,
                        repeated=repeated, spans_hosts=spans, notes=notes, nccl=info,
                        host_ranks=tuple(len(on_host[h]) for h in dict.fromkeys(hosts)),
                        old_layout="error" in (columns or ()))


def with_repeat(held):
    """A held-out table with the log's own repeat beside each row: nccl-tests times every size
    twice, out of place and in place, the same call on other buffers, so their difference is
    how far the log repeats itself (`repeat_pct`: in-place / out-of-place - 1). `outside_pct`:
    how far the prediction lies outside the two measurements (0 between them; else its error
    against the nearer one), the error that the log's own spread does not explain. NaN where
    a log has no in-place column."""
    if held is None:
        return None
    import numpy as np

    oop = held["seconds"].to_numpy(float)
    ip = held["in_place_seconds"].astype(float).to_numpy() if "in_place_seconds" in held else (
        np.full(len(held), np.nan))
    pred = held["predicted_s"].to_numpy(float)
    lo, hi = np.fmin(oop, ip), np.fmax(oop, ip)
    outside = np.where(pred < lo, pred / lo - 1, np.where(pred > hi, pred / hi - 1, 0.0))
    return held.assign(repeat_pct=100 * (ip / oop - 1),
                       outside_pct=np.where(np.isnan(ip), np.nan, 100 * outside))


def fit_rows(logs: list[NcclTestsLog], min_bytes: int = 0) -> list[dict]:
    """The rows `fit_tier` takes: {op, size_bytes, world, seconds} (out-of-place times) of the
    ops the simulator models, from `min_bytes` up; each also keeps its in-place time, the same
    call measured again (`with_repeat`)."""
    from scape.plan import WIRE_FACTOR

    out = []
    for log in logs:
        if log.op not in WIRE_FACTOR:
            raise UserError(f"{log.path}: {log.op} is not a collective the simulator models "
                            f"({', '.join(WIRE_FACTOR)})")
        out += [{"op": log.op, "size_bytes": r.size_bytes, "world": log.ranks,
                 "seconds": r.time_us * 1e-6, "gpus_per_process": log.gpus_per_process,
                 "in_place_seconds": None if r.in_place_us is None else r.in_place_us * 1e-6,
                 "source": f"{Path(log.path).name}:{r.line}"}
                for r in log.rows if r.size_bytes >= min_bytes]
    return out


# what NCCL runs each collective of a log with, as the fit prices it: its ring (pairwise
# sends for all-to-all); the link's fit must not pick gloo's reduce-scatter through an
# all-reduce, which NCCL never runs (it made the link twice as fast as the rings say)
NCCL_RINGS = {"all_reduce": ("ring",), "all_gather": ("ring",), "reduce_scatter": ("ring",),
              "broadcast": ("ring",), "all_to_all": ("pairwise",)}
# what a profile of nccl-tests logs takes from the hardware profile of its GPU (--gpu-from):
# the logs say nothing of compute, and commands load a profile whole
GPU_TABLES = ("gpu", "compute", "roofline", "memory")


def launch_s(fit, world: int) -> float:
    """The fixed cost per call the fitted collectives share at `world` ranks (the median of
    their own, `simulator/network/fit.py` overheads_s): what launching one call costs the process
    that drives the GPUs (nccl-tests -g 8: one process launching on 8 GPUs), whatever the op, so a
    held-out op of the same runs pays it too."""
    import statistics

    own = [o for c in fit.collectives.values() for w, o in zip(c.ranks, c.overheads_s,
                                                                strict=True) if w == world]
    return statistics.median(own) if own else 0.0


MODELS = ("nccl", "link")


def _logs_algo(logs: list[NcclTestsLog], algo: str | None) -> tuple[str, list[str]]:
    """The NCCL_ALGO the logs ran with: `algo` as typed (refused where the logs say NCCL ran
    another), else the logs' own `NCCL_ALGO set by environment` line, else auto."""
    from simulator.network.nccl import TUNED_ALGOS

    said = {log.nccl.env["NCCL_ALGO"] for log in logs if "NCCL_ALGO" in log.nccl.env}
    if len(said) > 1:
        raise UserError(f"the logs ran with different NCCL_ALGO settings ({', '.join(sorted(said))}"
                        "): calibrate runs of one setting at a time")
    env = next(iter(said), None)
    mapped = None if env is None else ALGO_NAMES.get(env.lower().replace("_", ""))
    if mapped is not None and mapped not in TUNED_ALGOS:
        mapped = None
    if algo is not None:
        if env is not None and mapped != algo:
            raise UserError(f"--algo {algo}: the logs say NCCL ran with NCCL_ALGO={env} (set by "
                            "environment)" + (f"; give --algo {mapped} or leave it out"
                                              if mapped else ""))
        return algo, []
    if env is None:
        return "auto", []
    if mapped is None:
        raise UserError(f"the logs ran with NCCL_ALGO={env} (set by environment), which one "
                        f"--algo cannot express ({', '.join(TUNED_ALGOS)}): give --algo for "
                        "the algorithm their calls ran")
    return mapped, [f"--algo {mapped}: the logs' NCCL_ALGO={env} (set by environment)"]


def nccl_notes(logs: list[NcclTestsLog], hw, algo: str) -> list[str]:
    """What NCCL printed of itself in the logs, and how the profile's tuner compares with the
    choices it printed (NCCL_DEBUG_SUBSYS=TUNING): per call shape, the same algorithm and
    protocol or not."""
    from simulator.network import nccl

    notes = []
    for log in logs:
        got = log.nccl
        said = [f"NCCL {got.version}" if got.version else None,
                f"{got.channels} channels" if got.channels else None,
                f"network {got.network}" if got.network else None,
                *(f"{k}={v}" for k, v in got.env.items())]
        if any(said):
            notes.append(f"{Path(log.path).name}: " + ", ".join(x for x in said if x))
        choices = log.choices()
        if not choices:
            continue
        m = nccl.machine(hw, log.ranks, len(log.hosts) if log.spans_hosts else None)
        if m is None or log.op not in nccl.TUNED_OPS:
            notes.append(f"{Path(log.path).name}: NCCL printed its choice for {len(choices)} "
                         f"call shape(s); {hw.name} has no [nccl] tuner for {log.op} to compare")
            continue
        protos = (tuple(p.strip().lower() for p in log.nccl.env["NCCL_PROTO"].split(","))
                  if "NCCL_PROTO" in log.nccl.env else None)
        algos = None if algo == "auto" else (algo,)
        both = same_algo = 0
        differ = []
        for size, a, p in choices:
            ma, mp = nccl.choose(log.op, float(size), m, algos, protos)
            same_algo += ma == a
            both += (ma, mp) == (a, p)
            if (ma, mp) != (a, p):
                differ.append(f"{size:,} B: NCCL {a}/{p}, model {ma}/{mp}")
        notes.append(f"{Path(log.path).name}: NCCL printed its choice for {len(choices)} call "
                     f"shape(s) (NCCL_DEBUG_SUBSYS=TUNING); {hw.name}'s tuner picks the same "
                     f"algorithm and protocol for {both}, the same algorithm for {same_algo}"
                     + (f"; differs at {'; '.join(differ[:4])}"
                        + (f" and {len(differ) - 4} more" if len(differ) > 4 else "")
                        if differ else ""))
    return notes


def calibrate_from_logs(name: str, paths: list[str], op: str | None = None,
                        holdout: str | None = None, min_bytes: int = 0,
                        gpu_from: str | None = None, model: str | None = None,
                        algo: str | None = None, nics: int | None = None,
                        force: bool = False, with_intervals: bool = True):
    """Fit the logs' rows (all ops, or all but `holdout`) and write measured/<name>.toml;
    with `holdout`, also predict that op's rows from the fit made without them. `model`:
    nccl (the --gpu-from profile's NCCL path with its NVLink efficiency and launch cost
    fitted on one node, its NICs' efficiency and GPUDirect RDMA on several,
    calibration/nccl_tests_fit.py; logs whose ranks fill whole nodes of a profile with [nccl])
    or link (one latency per hop and a bandwidth per op, as `scape calibrate collectives`
    writes, with the sweep beside it); default: nccl where it applies. `algo`: the NCCL_ALGO
    the logs ran with (nccl model; None: the logs' own NCCL_ALGO line, else auto).
    `gpu_from` None: the profile of the device lines' GPU (calibration/nccl_tests_shape.py),
    its node shape replaced by the logs' (GPUs per host; NICs from NCCL's lines or `nics`).
    An existing profile of that name is replaced only with `force`. `with_intervals`: the
    NCCL path's constants with their bootstrap intervals (calibration/fit_intervals.py).
    Returns (path, fit, sweep table, held-out table or None, notes)."""
    from datetime import UTC, datetime

    import pandas as pd

    from calibration.collectives import _save_rows, link_tables
    from calibration.nccl_tests_shape import (
        gpu_profile,
        node_shape,
        scratch_dir,
        shaped_profile,
    )
    from profiles import load_hardware, shipped
    from profiles.measured import merge, path_of
    from simulator.network.fit import coefficients, fit_tier

    target = path_of(name)  # a bad name fails before any reading
    if target.exists() and not force:
        raise UserError(f"--out {name}: {target} exists; give --force to replace it, or "
                        "another --out")
    if nics is not None and nics < 1:
        raise UserError(f"--nics-per-node must be 1 or more, got {nics}")
    from scape.plan import WIRE_FACTOR

    logs, skipped = [], []
    for p in paths:
        for log in parse_logs(p, op):
            if log.section is not None and log.op not in WIRE_FACTOR:
                skipped.append(f"{Path(p).name}: its {log.op} (line {log.section}) is not a "
                               "collective the simulator models: left out")
            else:
                logs.append(log)
    if not logs:
        raise UserError("none of the logs' collectives is one the simulator models: "
                        + "; ".join(skipped))
    devices = {d for log in logs for d in log.devices}
    if len(devices) > 1:
        raise UserError(f"the logs come from different systems ({', '.join(sorted(devices))}): "
                        "calibrate one system at a time")
    # the GPUs a node holds as the logs' runs over several hosts tell it; the most any host
    # ran, where none spans hosts
    per_node = node_shape(logs)
    most_per_host = max(max(log.host_ranks, default=0) for log in logs)
    gpu_from, picked = gpu_profile(devices, gpu_from, per_node or most_per_host)
    base = load_hardware(gpu_from)
    # the profile by its name where it is the one that name finds (a file given by path under
    # another profile's name is not): the cross-op bands `scape collective` quotes are keyed so
    gpu_name = base.name if shipped(base) else None
    gpu_said = picked + gpu_notes(devices, base)
    with scratch_dir() as scratch:
        base, doc, shape_said = shaped_profile(base, logs, per_node, nics, Path(scratch))
    gpu_said += shape_said
    rows = fit_rows(logs, min_bytes)
    if not rows:
        raise UserError(f"no row of the logs is at or above --min-size ({min_bytes:,} B): the "
                        "largest they measured is "
                        f"{max((r.size_bytes for log in logs for r in log.rows), default=0):,} B")
    ops = sorted({r["op"] for r in rows})
    if holdout is not None and holdout not in ops:
        raise UserError(f"--holdout {holdout}: no log measures it (the logs hold "
                        f"{', '.join(ops)})")
    fitted = [r for r in rows if r["op"] != holdout]
    if not fitted:
        raise UserError(f"--holdout {holdout}: it is the only op of the logs; nothing is left "
                        "to fit on")
    notes = skipped + [n for log in logs for n in log.notes] + gpu_said
    typed = algo is not None
    algo, said = _logs_algo(logs, algo)
    notes += said + nccl_notes(logs, base, algo)
    multi = [log for log in logs if log.spans_hosts]
    per_node = base.node.gpus_per_node
    spans = {len(log.hosts) if log.spans_hosts else 1 for log in logs}
    # the NCCL path prices whole nodes of the --gpu-from profile: one node, or every log's
    # ranks filling its hosts as that profile's nodes
    shaped = base.nccl is not None and len(spans) == 1 and all(
        log.ranks == len(log.hosts) * per_node if log.spans_hosts else log.ranks <= per_node
        for log in logs)
    if model is not None and model not in MODELS:
        raise UserError(f"--model {model!r}{did_you_mean(model, MODELS)}; choose one of: "
                        f"{', '.join(MODELS)}")
    if model == "nccl" and not shaped:
        raise UserError("--model nccl fits the NCCL path of whole nodes of the --gpu-from "
                        "profile: " + (f"{base.name} has no [nccl] table" if base.nccl is None
                                       else f"these logs' ranks do not fill {per_node}-GPU "
                                       "nodes, one set of hosts for every log")
                        + "; leave --model out (the link fit) or give --model link")
    # the NCCL path by default wherever it prices the logs' layout: on the one multi-node
    # system of several ops at hand (4 x 8 H100, bench/nccl_tests_holdout.py) it predicts a
    # held-out op far better than the link fit (1-64 MiB all_gather 15.8/23.2% against
    # 92.2/157.1%, broadcast 23.9/33.6% against 92.8/138.6%; all_reduce 32.5/40.0% against
    # 8.6/41.3%)
    if (model or ("nccl" if shaped else "link")) == "nccl":
        path, fit, sweep, held, notes = _from_logs_nccl(name, paths, logs, base, doc, rows,
                                                        fitted, holdout, algo, notes,
                                                        max(spans), with_intervals, gpu_name)
        return path, fit, sweep, with_repeat(held), notes
    if typed and algo != "auto":
        raise UserError(f"--algo {algo}: the link fit prices every op as NCCL's ring; --algo "
                        "is for --model nccl")
    if algo not in ("auto", "ring"):  # the logs ran another algorithm than the fit's ring
        raise UserError(f"the logs ran NCCL_ALGO={algo} (set by environment), and the link fit "
                        "prices every op as NCCL's ring: give logs of NCCL's own choice or of "
                        "rings, or --model nccl on one node")
    fit = fit_tier([{k: r[k] for k in ("op", "size_bytes", "world", "seconds")}
                    for r in fitted], algorithms=NCCL_RINGS)
    if any((log.ranks_per_node() or 0) > 1 for log in multi):
        notes.append("a run spans several hosts with several GPUs each: it is fitted as one "
                     "tier (its NVLink and NICs together); other layouts are extrapolations")
    held = None
    if holdout is not None:  # the fitted link: its latency and bandwidth, the op's algorithm
        out = []
        for r in (r for r in rows if r["op"] == holdout):
            a, c = coefficients(holdout, NCCL_RINGS[holdout][0], int(r["world"]),
                                float(r["size_bytes"]))  # all-to-all: pairwise sends
            predicted = (fit.latency_s * a + launch_s(fit, int(r["world"]))
                         + float(r["size_bytes"]) * c / fit.bandwidth_Bps)
            out.append({**r, "predicted_s": predicted,
                        "error_pct": 100 * (predicted / r["seconds"] - 1)})
        held = with_repeat(pd.DataFrame(out))
    when = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    logs_text = ", ".join(Path(p).name for p in paths)
    where = f"scape calibrate nccl-tests {logs_text}, {when}"
    tables = {
        **link_tables(fit, 0.0, f"fitted by {where}"),
        "node": {"gpus_per_node": 1, "source": "one rank per link: the fit's testbed "
                 "(simulator/network/fit.py), as scape calibrate collectives writes it"},
        "intra_node": {"kind": "none", "bw_GBps": 0.0, "efficiency": 1.0, "latency_us": 0.0,
                       "source": "one rank per link: no intra-node tier"},
        "fabric": {"topology": "fat-tree", "nodes_per_leaf": 250, "oversubscription": 1.0,
                   "switch_latency_us": 0.0, "source": "one switch (the fit's testbed)"},
    }
    for table in GPU_TABLES:
        if table in doc:
            tables[table] = {**doc[table], "source": f"copied from hardware profile "
                             f"{base.name} by --gpu-from ({doc[table].get('source', '')})"}
    versions = sorted({log.version + (f", NCCL {log.nccl.version}" if log.nccl.version else "")
                       for log in logs if log.version})
    tables["measured"] = {
        "network": f"nccl-tests logs ({logs_text}) of {len(logs)} run(s) on "
                   f"{', '.join(sorted(devices)) or 'an unnamed device'}",
        "network_date": when, "network_host": ", ".join(
            sorted({h for log in logs for h in log.hosts})) or "not in the logs",
        "network_device": ", ".join(sorted(devices)) or "not in the logs",
        "network_backend": "nccl", "network_netbed": "none (loopback)",
        "network_torch": "; ".join(versions) or "nccl-tests version not in the logs",
        "network_nprocs": ",".join(sorted({str(log.ranks) for log in logs})),
        # the link fit's testbed has a node per rank: the logs' hosts say nothing of its nodes;
        # where they ran several GPUs each, the profile says so (calibration_reach warns)
        **{k: v for k, v in coverage(fitted, logs).items() if k != "logs_nodes"},
        **({"logs_gpus_per_host": most_per_host} if most_per_host > 1 else {}),
        **tables["measured"]}
    path = merge(name, tables, f"Written by {where}. Rerun it to refresh; do not edit.",
                 drop=("network_refit",))
    sweep = _save_rows(path, pd.DataFrame([{k: r[k] for k in ("op", "size_bytes", "world",
                                                                "seconds")}
                                           for r in fitted]), fit)
    return path, fit, sweep, held, list(dict.fromkeys(notes))  # one note per logs alike


def _from_logs_nccl(name: str, paths: list[str], logs, base, doc: dict, rows: list[dict],
                    fitted: list[dict], holdout: str | None, algo: str, notes: list[str],
                    nodes: int = 1, with_intervals: bool = True,
                    gpu_name: str | None = None):
    """calibrate_from_logs with the nccl model: the base profile's NCCL path, its NVLink
    efficiency (several nodes: its NICs' efficiency and GPUDirect RDMA) and launch cost
    fitted (calibration/nccl_tests_fit.py), written whole as measured/<name>.toml with the
    rows beside it (<name>.nccl-tests.csv); `gpu_name`: the --gpu-from profile's name, kept
    as [measured] gpu_profile where that name finds it."""
    from datetime import UTC, datetime

    import pandas as pd

    from calibration.nccl_tests_fit import fit_nccl, intervals, predict
    from profiles.loader import write_checked
    from profiles.measured import dumps, path_of
    from vocabulary.atomic import to_csv_atomic

    fit = fit_nccl(base, fitted, algo, nodes)
    if with_intervals:
        fit = replace(fit, intervals=tuple(intervals(base, fit, fitted, nodes)))
    if fit.at_bound:
        notes.append(f"the fit left {' and '.join(fit.at_bound)} at an end of its range "
                     "(calibration/nccl_tests_fit.py BOUNDS): the rows are far from anything "
                     f"{base.name}'s NCCL path prices (another GPU, transport or a broken run?);"
                     " check the rows' errors before planning on this profile")

    def table(which: list[dict]) -> pd.DataFrame:
        got = predict(fit.hardware, which, algo)
        return pd.DataFrame([{**r, "predicted_s": p, "error_pct": 100 * (p / r["seconds"] - 1)}
                             for r, p in zip(which, got, strict=True)])

    held = table([r for r in rows if r["op"] == holdout]) if holdout is not None else None
    sweep = table(fitted)
    when = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    logs_text = ", ".join(Path(p).name for p in paths)
    together = ("with the launch cost" if fit.tier == "intra_node" else
                "with the cost per network message, GPUDirect RDMA on and off")
    src = (f"fitted by scape calibrate nccl-tests {logs_text} (--algo {algo}), {when}: solved "
           f"{together} on the logs' rows through this profile's NCCL path "
           "(calibration/nccl_tests_fit.py)")
    if fit.tier == "transport" and "transport" not in doc:  # the NICs as ib-verbs sees them
        tr = fit.hardware.transport
        doc["transport"] = {"kind": tr.kind, "efficiency": tr.efficiency,
                            "latency_us": tr.latency_us, "call_us": tr.call_us,
                            "source": tr.source}
    doc[fit.tier] = {**doc[fit.tier], "efficiency": fit.efficiency, "efficiency_source": src}
    if fit.message_us is not None and not fit.untold:
        doc["transport"] = {**doc["transport"], "message_us": fit.message_us,
                            "message_us_source": src + ": what each network message costs "
                            "beyond NCCL's own per-step figure, paid at every network step of "
                            "a call's critical path"}
    # several nodes keep the base's launch (nccl_tests_fit.py); rows that do not tell the
    # launch or the cost per message keep the base's, its source with it
    if fit.tier == "intra_node" and not fit.untold:
        doc["nccl"] = {**doc["nccl"], "launch_us": fit.launch_us, "launch_us_source": src}
    if fit.gdr is False and base.nccl.gdr is not False:
        doc["nccl"] = {**doc["nccl"], "gdr": False, "gdr_source": src + ": LL128 off across "
                       "nodes fits the rows better than on (NCCL turns it off where the NICs "
                       "are not reached by GPUDirect RDMA)"}
    if fit.launch_adds is not None and fit.launch_adds != bool(base.nccl.launch_adds):
        doc["nccl"] = {**doc["nccl"], "launch_adds": fit.launch_adds,
                       "launch_adds_source": src + (": the GPU time following the process's "
                                                    "launches on its other GPUs fits the -g N "
                                                    "rows better than overlapping them"
                                                    if fit.launch_adds else
                                                    ": overlapping fits the -g N rows better")}
    path = path_of(name)
    doc["name"] = path.stem
    devices = sorted({d for log in logs for d in log.devices})
    doc["measured"] = {"network": f"nccl-tests logs ({logs_text}) of {len(logs)} run(s) on "
                                  f"{', '.join(devices) or 'an unnamed device'}",
                       "network_date": when, "network_backend": "nccl",
                       # the profile (`gpu_name`, as --gpu-from found it) whose NCCL path
                       # was fitted: the cross-op bands `scape collective` quotes are of its
                       # GPU (reports/fidelity.py)
                       **({"gpu_profile": gpu_name} if gpu_name is not None else {}),
                       **coverage(fitted, logs),
                       **({"fit_intervals": "; ".join(i.text() for i in fit.intervals)}
                          if fit.intervals else {})}
    fitted_text = ("NVLink efficiency and NCCL launch cost" if fit.tier == "intra_node" else
                   "transport's efficiency and cost per network message")
    doc["description"] = (f"{base.name} with its {fitted_text} fitted "
                          f"on nccl-tests logs of {', '.join(devices) or 'an unnamed device'} "
                          f"({logs_text})")
    path.parent.mkdir(parents=True, exist_ok=True)
    write_checked(path, f"# Written by scape calibrate nccl-tests {logs_text}, {when}. "
                  "Rerun it to refresh; do not edit.\n" + dumps(doc), "--out")
    to_csv_atomic(sweep, path.with_suffix(".nccl-tests.csv"), index=False)
    return path, fit, sweep, held, list(dict.fromkeys(notes))  # one note per logs alike
