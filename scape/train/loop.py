"""The training loop used by `scape train` and `validate`: per-step timings of forward and
backward, the scheme's kernels, each collective and the waits; JSONL logs; checkpoints of
model, optimizer and scheme state from which a resumed run continues exactly."""

from __future__ import annotations

import json
import math
import os
import re
import statistics
import time
import zlib
from dataclasses import asdict, dataclass, field
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist

from profiles import load_model
from scape.adams import Hyper
from scape.comm import Comm
from scape.plan import WIRE_FACTOR, SchemeConfig
from scape.schemes import make_scheme
from scape.train.data import batch
from scape.train.devices import launched_as, nccl_device
from scape.train.model import GPT
from vocabulary.atomic import write_text_atomic


@dataclass(frozen=True)
class TrainConfig:
    model: str = "tiny-gpt"
    corpus: str = "python-stdlib"  # scape.train.data.CORPORA
    scheme: SchemeConfig = field(default_factory=lambda: SchemeConfig("dense-zero1"))
    steps: int = 100
    # a resumed run that stops before `steps` on the schedule they set (cli train); None: at them
    stop_at: int | None = None
    micro_batch: int = 16
    seq_len: int | None = None
    lr: float = 1e-3
    warmup_steps: int = 20
    min_lr_ratio: float = 0.1
    hyper: Hyper = field(default_factory=Hyper)
    seed: int = 0  # initial weights and training batches
    # validation batches: fixed apart from `seed`, so runs of different seeds are scored on the
    # same held-out sample and their spread is the training's alone
    val_seed: int = 0
    eval_every: int = 50
    eval_batches: int = 8
    # a second, larger evaluation at the last step (logged as final_val_loss; the curve's
    # val_loss stays on eval_batches); None: none
    final_eval_batches: int | None = None
    out: str | None = None  # logs, checkpoints and summary
    checkpoint_every: int = 0  # 0: only at the end
    resume: bool = False
    timeout_s: float = 60.0
    threads: int = 1  # torch threads per rank
    # "bf16": forward and loss under torch.autocast in bfloat16 (mixed precision, as the SCAPE
    # authors' --bf16 runs; parameters, gradients and optimizer state stay fp32); None: fp32
    autocast: str | None = None
    checksum: bool = False  # record a CRC of the parameters after every step (tests)

    @property
    def last_step(self) -> int:
        """The step this run ends at: `steps`, or `stop_at` where a resume stops earlier."""
        return self.steps if self.stop_at is None else min(self.steps, self.stop_at)

    def validate(self) -> TrainConfig:
        """Everything the ranks would trip over, refused before any rank starts."""
        from profiles import UserError
        from scape.schemes import runtime_class, runtime_config
        from scape.schemes.quantized import LEVELS, Quantized

        profile = load_model(self.model)
        # scape/train/model.py builds dense transformers with full attention: a model with
        # experts, latent attention or a sliding window would train as another model
        layers = [what for what, has in (
            ("routed experts ([moe])", profile.moe is not None),
            ("latent attention ([mla])", profile.mla is not None),
            ("a sliding attention window ([arch] sliding_window)",
             profile.arch.sliding_window is not None)) if has]
        if layers:
            raise UserError(f"scape train builds dense transformers with full attention; "
                            f"{self.model} has {' and '.join(layers)}, which it would leave "
                            "out and train another model: train a dense model (scape profiles "
                            "list), or price this one with simulate, compare or plan")
        for name, value in (("--steps", self.steps), ("--micro-batch", self.micro_batch),
                            ("threads", self.threads), ("eval_batches", self.eval_batches),
                            ("final_eval_batches", 1 if self.final_eval_batches is None
                             else self.final_eval_batches)):
            if value < 1:
                raise UserError(f"{name} must be at least 1, got {value}")
        for name, value in (("--warmup-steps", self.warmup_steps),
                            ("--eval-every", self.eval_every),
                            ("--checkpoint-every", self.checkpoint_every)):
            if value < 0:
                raise UserError(f"{name} must be >= 0, got {value}")
        if self.seq_len is not None and not 1 <= self.seq_len <= profile.arch.seq_len:
            raise UserError(f"--seq-len must be between 1 and {self.model}'s context "
                            f"{profile.arch.seq_len}, got {self.seq_len}")
        if not 0 <= self.seed < 2**63:  # torch.manual_seed takes a signed 64-bit integer
            raise UserError(f"--seed must be between 0 and 2**63 - 1, got {self.seed}")
        for name, value in (("--lr", self.lr), ("--timeout", self.timeout_s)):
            if not (math.isfinite(value) and value > 0):
                raise UserError(f"{name} must be a positive number, got {value}")
        # far above any run on this host: a typo is refused before the ranks start
        for name, value, most in (("--lr", self.lr, 10.0), ("--timeout", self.timeout_s, 1e6),
                                  ("--steps", self.steps, 10**9)):
            if value > most:
                raise UserError(f"{name} must be at most {most:g}, got {value:g}")
        schedule = (self.scheme.density_warmup_steps or 0) + (self.scheme.density_dense_steps
                                                               or 0)
        if schedule > self.steps:
            raise UserError(f"--steps {self.steps} ends before the density schedule does "
                            f"({schedule} steps of dense steps and warm-up): the run would "
                            "never send at the sparsity asked for")
        from scape.train.data import CORPORA, shakespeare_archive

        if self.corpus not in CORPORA:
            raise UserError(f"--corpus must be one of {', '.join(CORPORA)}, got {self.corpus!r}")
        if self.corpus == "shakespeare":
            shakespeare_archive()  # fetched here, once, before any rank reads it
        if self.autocast not in (None, "bf16"):
            raise UserError(f"autocast must be bf16 or not given, got {self.autocast!r}")
        if not 0 <= self.min_lr_ratio <= 1:
            raise UserError(f"min_lr_ratio must be in [0, 1], got {self.min_lr_ratio}")
        if self.resume and not self.out:
            raise UserError("--resume needs --out (the folder holding the checkpoint)")
        scheme = runtime_config(self.scheme.validate())
        if runtime_class(scheme) is Quantized and scheme.bits not in (1, *LEVELS):
            raise UserError(f"the quantized runtime sends 1, 4 or 8 bits (32: dense), got "
                            f"--bits {scheme.bits}")
        return self

    def lr_at(self, t: int) -> float:
        """Linear warmup, then cosine decay to min_lr_ratio * lr (steps are 1-based)."""
        if t <= self.warmup_steps:
            return self.lr * t / max(1, self.warmup_steps)
        frac = (t - self.warmup_steps) / max(1, self.steps - self.warmup_steps)
        cos = 0.5 * (1 + math.cos(math.pi * min(1.0, frac)))
        return self.lr * (self.min_lr_ratio + (1 - self.min_lr_ratio) * cos)


def init_distributed(timeout_s: float) -> torch.device:
    """Join the process group torchrun (or a test) described in the environment; returns the
    device this rank computes on (its GPU under nccl: every tensor the runtime makes goes
    there through torch's default device)."""
    backend = os.environ.get("SCAPE_BACKEND", "gloo")
    device = torch.device("cpu")
    if backend == "nccl":
        device = nccl_device()  # ranks sharing a GPU: each its own NCCL host, over sockets
        torch.set_default_device(device)
    if not dist.is_initialized() and int(os.environ.get("WORLD_SIZE", "1")) > 1:
        dist.init_process_group(backend, timeout=timedelta(seconds=timeout_s))
    return device


def _autocast(cfg: TrainConfig, device: torch.device):
    """Mixed precision when the config asks for it (a no-op context otherwise)."""
    return torch.autocast(device.type, dtype=torch.bfloat16, enabled=cfg.autocast == "bf16")


@torch.no_grad()
def evaluate(model: GPT, cfg: TrainConfig, seq: int, batches: int | None = None) -> float:
    """Mean loss over the first `batches` (default cfg.eval_batches) validation batches; every
    run draws the same ones, so runs compare on the same text."""
    model.eval()
    device = next(model.parameters()).device
    batches = cfg.eval_batches if batches is None else batches
    with _autocast(cfg, device):
        losses = [model(*(b.to(device) for b in batch("val", 10**6 + i, 0, cfg.micro_batch,
                                                        seq, cfg.val_seed, cfg.corpus))).item()
                  for i in range(batches)]
    model.train()
    return sum(losses) / len(losses)


# Checkpoints are written per rank and per step, and each rank keeps its newest two: a run
# stopped while its ranks write step t (some have, some have not) still holds step t - every
# on every rank, because no rank can pass the collectives of step t before the others have
# saved step t - every. Resuming takes the newest step every rank holds.
KEEP_CHECKPOINTS = 2
CHECKPOINT_NAME = re.compile(r"^rank(\d+)-step(\d+)\.pt$")


def _ckpt_path(out: Path, rank: int, step: int) -> Path:
    return out / "checkpoint" / f"rank{rank}-step{step}.pt"


def checkpoints(out: Path) -> dict[int, dict[int, Path]]:
    """rank -> {step: file} of the checkpoints under OUT/checkpoint."""
    found: dict[int, dict[int, Path]] = {}
    for path in Path(out, "checkpoint").glob("rank*-step*.pt"):
        m = CHECKPOINT_NAME.match(path.name)
        if m:
            found.setdefault(int(m[1]), {})[int(m[2])] = path
    return found


def _log_rows(log: Path) -> list[tuple[str, int]]:
    """(line, step) of each row of a JSONL training log; a UserError naming the file and line
    where a row is not a JSON object with an integer step."""
    from profiles import UserError

    rows = []
    for i, line in enumerate(log.read_text(errors="replace").splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError:
            row = None
        step = row.get("step") if isinstance(row, dict) else None
        if not isinstance(step, int) or isinstance(step, bool):
            raise UserError(f"{log}: line {i} is not a step of the log (a JSON object with an "
                            f"integer 'step'): {line[:80]!r}; restore the log, or remove the "
                            "line to resume without it")
        rows.append((line, step))
    return rows


def log_steps(log: Path) -> list[int]:
    """The steps a JSONL training log holds (none where there is no log)."""
    return [step for _, step in _log_rows(log)] if log.exists() else []


def keep_log(log: Path, last_step: int) -> None:
    """Keep only the rows of steps <= last_step in the JSONL log (none: an empty log),
    rewritten whole or not at all."""
    if not log.exists():
        return
    kept = [line for line, step in _log_rows(log) if step <= last_step]
    write_text_atomic(log, "".join(line + "\n" for line in kept))


def checkpoint_step(out: Path, ranks: int) -> int:
    """The newest step every one of `ranks` ranks has a checkpoint of in OUT; a UserError when
    there is nothing to resume, it was written by another rank count, or the ranks share no
    step (the files were removed or mixed by hand)."""
    from profiles import UserError

    found = checkpoints(Path(out))
    if not found:
        raise UserError(f"--resume: no checkpoint in {out}/checkpoint (nothing to resume)")
    if set(found) != set(range(ranks)):
        raise UserError(f"--resume: {out}/checkpoint holds {len(found)} rank(s), this run has "
                        f"{ranks}: resume with --nprocs {len(found)}")
    common = set.intersection(*(set(steps) for steps in found.values()))
    if not common:
        held = "; ".join(f"rank {r}: steps {sorted(s)}" for r, s in sorted(found.items()))
        raise UserError(f"--resume: the ranks' checkpoints in {out}/checkpoint share no step "
                        f"({held}); cannot resume consistently")
    step = max(common)
    path = found[0][step]
    try:
        state = torch.load(path, weights_only=False, map_location="cpu")
    except Exception as exc:  # a truncated or foreign file
        raise UserError(f"--resume: cannot read {path}: {type(exc).__name__}") from None
    if int(state["t"]) != step:
        raise UserError(f"--resume: {path} holds step {state['t']}, its name says {step}")
    for rank in sorted(found)[1:]:  # the others whole, without loading them (a zip's index)
        other = found[rank][step]
        if not _whole_zip(other):
            raise UserError(f"--resume: cannot read {other}: not a whole checkpoint (cut short "
                            "or another file)")
    return step


def _whole_zip(path: Path) -> bool:
    """Whether `path` is a whole torch.save file (a zip archive whose central directory, at
    its end, is there): a truncated copy fails this without being loaded."""
    import zipfile

    try:
        with zipfile.ZipFile(path) as z:
            return bool(z.namelist())
    except (OSError, zipfile.BadZipFile):
        return False


def train(cfg: TrainConfig, steps_this_run: int | None = None) -> dict:
    """Run (or resume) training on this process's rank; returns rank 0's summary."""
    torch.set_num_threads(cfg.threads)
    device = init_distributed(cfg.timeout_s)
    comm = Comm(sync=device.type == "cuda")
    rank, world = comm.rank, comm.world
    profile = load_model(cfg.model)
    seq = profile.arch.seq_len if cfg.seq_len is None else cfg.seq_len
    torch.manual_seed(cfg.seed)  # identical initial weights on every rank
    # drawn from the CPU generator whatever the device: an NCCL run on GPUs starts from the
    # weights of the gloo run of the same seed (CUDA's generator draws other numbers)
    with torch.device("cpu"):
        model = GPT(profile)
    model.to(device)
    scheme = make_scheme(cfg.scheme, list(model.parameters()), comm, cfg.hyper)
    out = Path(cfg.out) if cfg.out else None
    if out:
        out.mkdir(parents=True, exist_ok=True)
    if cfg.resume and out:
        step = checkpoint_step(out, world)  # the newest step every rank holds
        scheme.load_state_dict(torch.load(_ckpt_path(out, rank, step), weights_only=False,
                                          map_location=device))
    if out and rank == 0:
        # a resumed run keeps the log up to its checkpoint (steps logged after it are redone);
        # a fresh one starts it anew
        keep_log(out / "log.jsonl", scheme.t)
    log_file = open(out / "log.jsonl", "a") if out and rank == 0 else None  # noqa: SIM115
    end = cfg.last_step
    rows, last = [], end if steps_this_run is None else min(end, scheme.t + steps_this_run)
    try:
        while scheme.t < last:
            t = scheme.t + 1
            x, y = (b.to(device) for b in batch("train", t, rank, cfg.micro_batch, seq,
                                                  cfg.seed, cfg.corpus))
            t0 = time.perf_counter()
            with _autocast(cfg, device):
                loss = model(x, y)
            loss.backward()
            if device.type == "cuda":
                torch.cuda.synchronize()  # GPU kernels are asynchronous: time them finished
            fwd_bwd = time.perf_counter() - t0
            kernels = scheme.step(cfg.lr_at(t))
            step_s = time.perf_counter() - t0
            model.zero_grad(set_to_none=True)
            records = comm.take()
            row = {
                "step": t, "loss": loss.item(), "lr": cfg.lr_at(t), "step_s": step_s,
                "fwd_bwd_s": fwd_bwd, **{f"{k}_s": v for k, v in kernels.items()},
                "comm_s": sum(r.seconds for r in records),
                "wait_s": sum(r.wait_seconds for r in records),
                "bytes": sum(r.size_bytes * WIRE_FACTOR[r.collective](world) for r in records),
                # name, collective, bytes (plan convention), seconds to issue/complete, wait
                "collectives": [(r.name, r.collective, r.size_bytes, r.seconds, r.wait_seconds)
                                for r in records],
            }
            if cfg.checksum:
                row["param_crc"] = zlib.crc32(scheme.flat.master.cpu().numpy().tobytes())
            if cfg.eval_every and (t % cfg.eval_every == 0 or t == end) and rank == 0:
                # the curve always on the same sample; the last step also on the larger one
                row["val_loss"] = evaluate(model, cfg, seq)
                if t == end and cfg.final_eval_batches is not None:
                    row["final_val_loss"] = evaluate(model, cfg, seq, cfg.final_eval_batches)
            rows.append(row)
            if log_file:
                log_file.write(json.dumps(row) + "\n")
                log_file.flush()  # an interrupted run's log is whole up to its last step
            if out and cfg.checkpoint_every and t % cfg.checkpoint_every == 0:
                save_checkpoint(scheme, out, rank)
        if out:
            save_checkpoint(scheme, out, rank)
    finally:
        if log_file:
            log_file.close()
    summary = summarize(rows, cfg, world, scheme, seq)
    if out and rank == 0:
        write_text_atomic(out / "summary.json", json.dumps(summary, indent=2))
    return {"summary": summary, "rows": rows, "scheme": scheme, "model": model}


def save_checkpoint(scheme, out: Path, rank: int) -> None:
    """Write this rank's state at step scheme.t (whole or not at all: written aside, then
    renamed) and drop all but its KEEP_CHECKPOINTS newest."""
    path = _ckpt_path(out, rank, scheme.t)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    torch.save(scheme.state_dict(), tmp)
    tmp.replace(path)
    mine = checkpoints(out).get(rank, {})
    for step in sorted(mine)[:-KEEP_CHECKPOINTS]:
        mine[step].unlink(missing_ok=True)


def summarize(rows: list[dict], cfg: TrainConfig, world: int, scheme,
              seq: int | None = None) -> dict:
    """Rank 0's summary of a run: `seq` is the sequence length it ran (cfg.seq_len, or the
    model's own where that is None); `bits` only where the scheme quantizes."""
    if not rows:
        return {}
    tail = rows[-min(10, len(rows)):]
    vals = [r.get("final_val_loss", r["val_loss"]) for r in rows if "val_loss" in r]
    keys = sorted({k for r in rows for k in r if k.endswith("_s") and k != "step_s"})
    return {
        "model": cfg.model, "scheme": cfg.scheme.scheme, "sparsity": cfg.scheme.sparsity,
        "bits": cfg.scheme.bits if cfg.scheme.scheme == "quantized" else None,
        "seq_len": cfg.seq_len if seq is None else seq, "world": world,
        "steps": rows[-1]["step"],
        "final_train_loss": sum(r["loss"] for r in tail) / len(tail),
        "final_val_loss": vals[-1] if vals else None,
        "median_step_s": statistics.median(r["step_s"] for r in rows),
        "breakdown_median_s": {k: statistics.median(r.get(k, 0.0) for r in rows) for k in keys},
        "bytes_per_step": statistics.median(r["bytes"] for r in rows),
        "mean_bytes_per_step": statistics.fmean(r["bytes"] for r in rows),
        "config": {**asdict(cfg), "scheme": asdict(cfg.scheme)},
        **launched_as(),  # backend, share_gpu, netbed: written once, here
    }
