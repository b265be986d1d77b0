"""Launch `scape train` ranks with torchrun on this machine, or run in place when already
started by torchrun (multi-node use: run `scape train` under torchrun on every node)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

from profiles import UserError
from scape.train.devices import backend_env
from scape.train.loop import TrainConfig
from scape.train.parent import die_with_parent
from vocabulary.atomic import write_text_atomic
from vocabulary.units import format_duration


def under_torchrun() -> bool:
    """Whether torchrun started this process as one of its ranks. RANK and WORLD_SIZE alone
    do not say so (a job script may export them for its own launcher); torchrun's agent also
    sets TORCHELASTIC_RUN_ID for every worker it starts."""
    return all(k in os.environ for k in ("RANK", "WORLD_SIZE", "TORCHELASTIC_RUN_ID"))


# Host memory of one CPU rank, measured with /usr/bin/time (max RSS) on 2026-11-25, torch
# 2.13.0+cpu: tiny-gpt at micro-batch 16 398 MB (the base: Python, torch, gloo), at 512 2.68 GB
# (36 KB per token of autograd state: about (10 d + d_ff + heads x seq) fp32 values per layer
# plus the logits' three copies); gpt-345m at micro-batch 1 x 256 tokens 10.5 GB (27 B per
# parameter: fp32 weights, gradients, m, v, flat buffers), 32 B allowed for the schemes' state.
RANK_BASE_BYTES = 0.4e9
RANK_BYTES_PER_PARAM = 32


def rank_host_bytes(cfg: TrainConfig) -> float:
    """About how much host memory one CPU rank of `cfg` takes at its peak (bytes)."""
    return model_host_bytes(cfg.model, cfg.micro_batch, cfg.seq_len)


def model_host_bytes(model: str, micro_batch: int, seq_len: int | None = None) -> float:
    """About how much host memory one CPU process training `model` at `micro_batch` takes."""
    from profiles import load_model

    profile = load_model(model)
    a = profile.arch
    seq = a.seq_len if seq_len is None else seq_len
    tokens = micro_batch * seq
    activations = tokens * a.n_layers * (10 * a.d_model + a.d_ff + a.n_heads * seq) * 4
    logits = tokens * a.vocab_size * 4 * 3
    return RANK_BASE_BYTES + RANK_BYTES_PER_PARAM * profile.n_params + activations + logits


def available_host_bytes() -> float | None:
    """MemAvailable of /proc/meminfo (bytes), None where there is none."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return float(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def check_host_memory(cfg: TrainConfig, nprocs: int) -> None:
    """Refuse a CPU run whose ranks would not fit in this host's memory (a 70B model, a huge
    micro-batch, thousands of ranks), before any rank starts: it would swap or be killed."""
    refuse_beyond_host(f"{nprocs} rank(s) of {cfg.model} at micro-batch {cfg.micro_batch}",
                       nprocs * rank_host_bytes(cfg),
                       "fewer ranks, a smaller micro-batch or --seq-len, or a smaller model")


def refuse_beyond_host(what: str, need: float, instead: str) -> None:
    """Refuse, before it starts, work that needs more memory than this host has available."""
    have = available_host_bytes()
    if have is not None and need > have:
        raise UserError(f"{what} need about {need / 1e9:,.1f} GB of memory; this host has "
                        f"{have / 1e9:.1f} GB available: {instead}")


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def check_backend(backend: str, nprocs: int, netbed=None, share_gpu: bool = False) -> None:
    """Refuse, before any rank starts, a backend this machine cannot run `nprocs` ranks on;
    `share_gpu`: NCCL ranks may outnumber the GPUs and share them (scape/train/devices.py)."""
    if nprocs < 1:
        raise UserError(f"nprocs must be at least 1, got {nprocs}")
    if backend not in ("gloo", "nccl"):
        raise UserError(f"backend must be gloo or nccl, got {backend!r}")
    if share_gpu and backend != "nccl":
        raise UserError("--share-gpu puts NCCL ranks on shared GPUs; gloo ranks run on the "
                        "CPU: give --backend nccl, or leave --share-gpu out")
    if netbed is not None and backend == "nccl" and not share_gpu:
        # each namespace is a one-rank node (LOCAL_RANK 0): every rank would take GPU 0
        raise UserError("--netbed with --backend nccl: every rank is a node of its own on this "
                        "machine's first GPU; give --share-gpu (each rank its own NCCL host, "
                        "over its namespace's veth)")
    if backend == "nccl":
        import torch
        import torch.distributed as dist

        if not dist.is_nccl_available():
            raise UserError(f"--backend nccl: this torch ({torch.__version__}) is built "
                            "without NCCL; use --backend gloo")
        gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if gpus == 0:
            raise UserError("--backend nccl: no GPU found on this machine; use --backend gloo")
        if gpus < nprocs and not share_gpu:
            raise UserError(f"--backend nccl needs one GPU per rank: {nprocs} asked, "
                            f"{gpus} found; --share-gpu runs them on the {gpus} over NCCL's "
                            "socket transport (each rank its own NCCL host)")


def launch(cfg: TrainConfig, nprocs: int, backend: str = "gloo", netbed=None,
           progress: bool = False, share_gpu: bool = False) -> dict:
    """Run training on `nprocs` local ranks; returns rank 0's summary or raises UserError.

    With `netbed` (a scape.netbed.NetbedSpec), every rank runs in its own network namespace
    behind a shaped link, as its own node (env rendezvous, gloo bound to the veth). With
    `progress`, the step rank 0 has logged and an ETA go to stderr as the run goes."""
    check_backend(backend, nprocs, netbed, share_gpu)
    if cfg.steps < 1:
        raise UserError(f"steps must be at least 1, got {cfg.steps}")
    if backend == "gloo":
        check_host_memory(cfg, nprocs)
    out = Path(cfg.out or tempfile.mkdtemp(prefix="scape-train-"))
    if cfg.out is None and progress:  # say where the run's files go (they stay)
        print(f"train: no --out given: the run's files (log, checkpoints) go to {out}",
              file=sys.stderr)
    out.mkdir(parents=True, exist_ok=True)
    cfg_dict = {**asdict(cfg), "out": str(out)}
    config_file = out / "config.json"
    write_text_atomic(config_file, json.dumps(cfg_dict, indent=2))
    for stale in [*out.glob("error_rank*.txt"), out / "summary.json"]:
        stale.unlink(missing_ok=True)
    env = {**os.environ, "OMP_NUM_THREADS": str(cfg.threads),
           **backend_env(backend, share_gpu, netbed)}
    t0 = time.perf_counter()
    meter = StepMeter(out / "log.jsonl", cfg.last_step) if progress else None
    # the absolute path: `scape train --cleanup OUT` knows the run's processes by it
    returncode = run_ranks(["scape.train.worker", str(config_file.resolve())], nprocs, netbed,
                           env, out / "launcher.log", cfg.timeout_s * 2 + 60 + 60 * cfg.steps,
                           meter)
    if meter is not None:
        meter.done()
    if returncode != 0 or not (out / "summary.json").exists():
        error = rank_error(out)
        if error:
            raise UserError(f"training failed after {time.perf_counter() - t0:.1f} s: {error}")
        raise UserError(f"training failed (exit code {returncode}): a rank ended without "
                        f"a report (crashed?); see {out / 'launcher.log'}")
    return json.loads((out / "summary.json").read_text())


def describe_failure(exc: BaseException, timeout_s: float) -> str:
    """One line for a rank's failure; a timeout or a lost connection says what it means."""
    text = f"{type(exc).__name__}: {exc}".splitlines()[0]
    lowered = text.lower()
    if "timed out" in lowered or "timeout" in lowered:
        return f"a peer did not arrive or answer within {timeout_s:g} s ({text[:160]})"
    if "connection" in lowered or "closed" in lowered or "reset" in lowered:
        return f"a peer went away ({text[:160]})"
    return text[:200]


def write_rank_error(out: str | Path, rank: int, exc: BaseException, timeout_s: float) -> str:
    """Record this rank's failure as one line in OUT/error_rank<r>.txt (read by rank_error)."""
    message = describe_failure(exc, timeout_s)
    Path(out, f"error_rank{rank}.txt").write_text(message + "\n")
    return message


def rank_error(out: Path) -> str | None:
    """The lowest failed rank's one-line error as "rankN: message", if any rank wrote one."""
    errors = sorted(Path(out).glob("error_rank*.txt"))
    if not errors:
        return None
    return f"{errors[0].stem.removeprefix('error_')}: {errors[0].read_text().strip()}"


class StepMeter:
    """Progress of a run from rank 0's JSONL log (one line per step, flushed as it goes):
    the step reached, seconds per step and the time left, redrawn on one line of stderr when it
    is a terminal; quiet otherwise, as the other progress bars (logs and scripts read stderr's
    one-line errors)."""

    def __init__(self, log: Path, total: int, stream=None):
        self.log, self.total, self.stream = log, total, stream or sys.stderr
        self.start, self.first, self.t0 = None, None, time.monotonic()
        self.offset, self.step = 0, 0
        self.tty = hasattr(self.stream, "isatty") and self.stream.isatty()

    def poll(self) -> None:
        """Read what rank 0 logged since the last call. Best effort: a log that was cut back
        (a resumed run keeps only the steps before its checkpoint) is read again from the
        start, and a line it cannot read is skipped; progress never stops a run."""
        try:
            if not self.log.exists():
                return
            if self.log.stat().st_size < self.offset:
                self.offset = 0
            with open(self.log, "rb") as fh:
                fh.seek(self.offset)
                chunk = fh.read()
            end = chunk.rfind(b"\n")
            if end < 0:
                return
            self.offset += end + 1
            lines = [ln for ln in chunk[:end].split(b"\n") if ln.strip()]
            if not lines:
                return
            self.step = int(json.loads(lines[-1])["step"])
        except (OSError, ValueError, KeyError, TypeError):
            return
        now = time.monotonic()
        if self.first is None:  # rates from the first logged step on: startup excluded
            self.first, self.start = self.step, now
        self._show(now)

    def _show(self, now: float) -> None:
        done = self.step - self.first
        rate = (now - self.start) / done if done > 0 else None
        eta = "" if rate is None else (f", {rate:.2f} s/step, about "
                                       f"{format_duration(rate * (self.total - self.step))} left")
        if self.tty:
            text = f"train: step {self.step}/{self.total}{eta}"
            print("\r" + text.ljust(70), end="", file=self.stream, flush=True)

    def done(self) -> None:
        if self.tty and self.first is not None:
            print(file=self.stream, flush=True)


def run_ranks(module_args: list[str], nprocs: int, netbed, env: dict, log: Path,
              timeout_s: float, meter: StepMeter | None = None) -> int:
    """Run `python -m <module_args>` on `nprocs` ranks: under torchrun on this machine, or one
    rank per network namespace of a shaped testbed (`netbed`, a NetbedSpec). Returns the first
    non-zero exit code, or 0."""
    if netbed is not None:
        from scape.netbed import Netbed

        with Netbed(netbed, nprocs) as bed:
            codes = bed.run([sys.executable, "-m", *module_args], timeout_s=timeout_s, env=env,
                            log=log)
        return next((c for c in codes if c), 0)
    # torchrun's own log folder (else a /tmp/torchelastic_* it never removes), gone afterwards
    with tempfile.TemporaryDirectory(prefix="scape-torchrun-") as logs, open(log, "w") as out:
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1",
               "--nproc-per-node", str(nprocs), "--master-addr", "127.0.0.1",
               "--master-port", str(free_port()), "--max-restarts", "0", "--log-dir", logs,
               "-m", *module_args]
        # its own process group: on any way out, torchrun and every rank it started end with it
        proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True, preexec_fn=die_with_parent)
        try:
            return _watch(proc, log.parent, timeout_s, meter)
        except BaseException:
            end_group(proc)
            raise


FAILED_GRACE_S = 1.0  # after a rank reported its failure, how long the others get to end


def _watch(proc: subprocess.Popen, out: Path, timeout_s: float,
           meter: StepMeter | None = None) -> int:
    """Wait for torchrun; once a rank has written its error, end the rest after
    FAILED_GRACE_S (torchrun alone would wait for a hung or stopped peer far longer); past
    `timeout_s`, end everything. Returns torchrun's exit code, or 124 on the timeout."""
    deadline = time.monotonic() + timeout_s
    failed_at = None
    while True:
        try:
            return proc.wait(timeout=0.2)
        except subprocess.TimeoutExpired:
            pass
        if meter is not None:
            meter.poll()
        now = time.monotonic()
        if failed_at is None and any(out.glob("error_rank*.txt")):
            failed_at = now
        if failed_at is not None and now - failed_at > FAILED_GRACE_S:
            end_group(proc, grace_s=FAILED_GRACE_S)
            return proc.returncode or 1
        if now > deadline:
            end_group(proc)
            return 124


def descendants(*pids: int) -> list[int]:
    """Every live process below `pids` (from /proc: torchrun may start its ranks in process
    groups of their own)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:  # ended while we looked
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found, todo = [], list(pids)
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def _started(pid: int) -> str | None:
    """When `pid` started (/proc/PID/stat field 22, clock ticks since boot); None: gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def end_group(proc: subprocess.Popen, grace_s: float = 3.0) -> None:
    """SIGTERM torchrun's process group and every process below it, SIGKILL whatever of them
    is left after `grace_s` (a stopped rank does not act on SIGTERM), and reap `proc`."""
    import signal

    family: dict[int, str | None] = {}  # pid -> its start time, so a reused pid is spared

    def send(sig: int) -> bool:  # whether any of them was still there
        alive = False
        # ranks started while torchrun was still launching, and their children, join the
        # family as they appear (once torchrun is gone they hang below init, not below it)
        for pid in descendants(proc.pid, *family):
            family.setdefault(pid, _started(pid))
        ours = [pid for pid, started in family.items() if _started(pid) == started]
        for target in (-proc.pid, *ours):  # negative: the process group
            try:
                os.kill(target, sig)
                alive = True
            except ProcessLookupError:
                pass
        return alive

    send(signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        proc.poll()  # reap torchrun, so that only live processes answer
        if not send(0):
            break
        time.sleep(0.1)
    else:
        send(signal.SIGKILL)
    proc.wait()
