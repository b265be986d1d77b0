"""The forward and backward of the real GPT on real batches on this device, and how much
slower they get when several ranks of a CPU testbed share this host's cores
(`scape calibrate compute --model M`; calibration/compute.py puts them in a profile)."""

from __future__ import annotations

import multiprocessing as mp
import queue
import statistics
import time
import traceback
from contextlib import AbstractContextManager, nullcontext

import torch

from calibration.timing import default_device, flush_cache, synchronize
from profiles import load_model
from scape.train.data import batch
from scape.train.model import GPT
from simulator.step.compute import forward_flops_per_token


def _autocast(device: torch.device) -> AbstractContextManager:
    """bf16 autocast on CUDA, as the SCAPE authors train (Megatron --bf16) and as `scape train
    --autocast bf16` runs; the CPU runtime trains in fp32 (its matmul peak is fp32 too)."""
    return torch.autocast("cuda", dtype=torch.bfloat16) if device.type == "cuda" else nullcontext()


def _fwd_bwd_samples(model: GPT, seq: int, micro_batch: int, device: torch.device,
                     repeats: int, warmup: int, rank: int = 0,
                     barrier=None) -> list[tuple[float, float]]:
    """(forward s, backward s) of `repeats` steps after `warmup`, on the batches step t of
    `rank` trains on (scape.train.loop.train's timed region: model(x, y), loss.backward()),
    in bf16 autocast on CUDA (`_autocast`). With a barrier, every step starts when all ranks
    sharing it reach it."""
    samples = []
    for t in range(1, warmup + repeats + 1):
        x, y = (b.to(device) for b in batch("train", t, rank, micro_batch, seq))
        flush_cache(device)  # the optimizer step ran in between, in training
        if barrier is not None:
            barrier.wait()
        synchronize(device)
        t0 = time.perf_counter()
        with _autocast(device):
            loss = model(x, y)  # [] fp32
        synchronize(device)
        t1 = time.perf_counter()
        loss.backward()
        synchronize(device)
        t2 = time.perf_counter()
        model.zero_grad(set_to_none=True)  # as the training loop does after each step
        if t > warmup:
            samples.append((t1 - t0, t2 - t1))
    return samples


def _build_model(model_name: str, device: torch.device) -> tuple[GPT, int]:
    profile = load_model(model_name)
    torch.manual_seed(0)
    model = GPT(profile).to(device)
    return model, profile.arch.seq_len


def step_flops(profile, micro_batch: int, seq: int) -> float:
    """Forward + backward FLOPs of one micro-batch: 3 x forward (the simulator's formula,
    simulator.step.compute.forward_flops_per_token)."""
    return float(3 * forward_flops_per_token(profile, seq) * micro_batch * seq)


def measure_fwd_bwd(model_name: str, micro_batch: int, seq_len: int | None = None,
                    device: torch.device | str = "cpu", threads: int = 1,
                    repeats: int = 10) -> dict:
    """Forward and backward of the real GPT (scape.train.model) on real batches
    (scape.train.data.batch), the region scape.train.loop.train times as fwd_bwd_s: medians of
    `repeats` steps after 2 warm-ups, gradients set to None between steps as the loop does;
    bf16 autocast on CUDA, fp32 on CPU.
    total_s is the median of the per-step sums. flops = 3 x forward FLOPs (the simulator's
    formula, simulator.step.compute.forward_flops_per_token)."""
    device = torch.device(device)
    torch.set_num_threads(threads)
    profile = load_model(model_name)
    seq = profile.arch.seq_len if seq_len is None else seq_len
    with default_device(device):  # GPT.forward makes its positions on the default device
        model, _ = _build_model(model_name, device)
        samples = _fwd_bwd_samples(model, seq, micro_batch, device, repeats, warmup=2)
    tokens = micro_batch * seq
    return {
        "model": model_name, "micro_batch": micro_batch, "seq_len": seq,
        "fwd_s": statistics.median(f for f, _ in samples),
        "bwd_s": statistics.median(b for _, b in samples),
        "total_s": statistics.median(f + b for f, b in samples),
        "flops": step_flops(profile, micro_batch, seq),
        "tokens": tokens, "device": str(device), "threads": threads, "repeats": repeats,
    }


def _concurrency_worker(index: int, model_name: str, micro_batch: int, device: str,
                        threads: int, repeats: int, everyone, rounds: list, results) -> None:
    """One rank: `repeats` times over, for c = 1..max_ranks, take one step in round c when
    index < c (the c ranks step together behind rounds[c - 1]); everyone meets at `everyone`
    between rounds, so idle workers block without using a core. Interleaving the rounds lets
    drift in the machine's speed hit every c alike."""
    try:
        dev = torch.device(device)
        torch.set_num_threads(threads)
        with default_device(dev):
            model, seq = _build_model(model_name, dev)
            _fwd_bwd_samples(model, seq, micro_batch, dev, 0, warmup=2, rank=index)
            times: dict[int, list[float]] = {c: [] for c in range(1, len(rounds) + 1)}
            for rep in range(repeats):
                for c, barrier in enumerate(rounds, start=1):
                    everyone.wait()
                    if index < c:
                        (f, b), = _fwd_bwd_samples(model, seq, micro_batch, dev, 1, warmup=0,
                                                   rank=index + 3 * rep, barrier=barrier)
                        times[c].append(f + b)
            for c, values in times.items():
                if index < c:
                    results.put(("ok", c, index, values))
    except Exception:
        results.put(("error", 0, index, traceback.format_exc()))


def measure_concurrency(model_name: str, micro_batch: int, max_ranks: int, threads: int = 1,
                        repeats: int = 10, device: torch.device | str = "cpu",
                        timeout_s: float = 600.0) -> tuple[list[float], float]:
    """Slowdown of the forward and backward when c = 1..max_ranks processes run it at once on
    this host (ranks of a CPU testbed sharing its cores), and the median seconds at c = 1:
    max_ranks "spawn" processes, rounds of c = 1..max_ranks interleaved `repeats` times;
    slowdown[c - 1] = median over steps of the slowest of the c workers' times / the median
    at c = 1 (so slowdown[0] = 1): data-parallel ranks wait for the slowest at every
    collective, so contention and the skew it causes both count. Steps start together behind
    a multiprocessing.Barrier, as ranks that synchronize every step do."""
    if max_ranks < 1:
        raise ValueError("max_ranks must be >= 1")
    ctx = mp.get_context("spawn")
    everyone = ctx.Barrier(max_ranks, timeout=timeout_s)
    rounds = [ctx.Barrier(c, timeout=timeout_s) for c in range(1, max_ranks + 1)]
    results = ctx.Queue()
    procs = [ctx.Process(target=_concurrency_worker, daemon=True,
                         args=(i, model_name, micro_batch, str(torch.device(device)), threads,
                               repeats, everyone, rounds, results))
             for i in range(max_ranks)]
    for p in procs:
        p.start()
    per_step: dict[int, list[list[float]]] = {c: [] for c in range(1, max_ranks + 1)}
    deadline = time.monotonic() + timeout_s
    try:
        for _ in range(max_ranks * (max_ranks + 1) // 2):  # c results for each c
            while True:
                try:
                    status, c, index, value = results.get(timeout=1.0)
                    break
                except queue.Empty:
                    # a worker that died before it could report (e.g. at import) would
                    # leave the others waiting at a barrier: fail now, not at the timeout
                    dead = [p.exitcode for p in procs if p.exitcode not in (None, 0)]
                    if dead or time.monotonic() > deadline:
                        raise RuntimeError(
                            f"measure_concurrency: workers exited with {dead}" if dead else
                            f"measure_concurrency: no result within {timeout_s:g} s") from None
            if status == "error":
                raise RuntimeError(f"measure_concurrency: worker {index} failed:\n{value}")
            per_step[c].append(value)
        for p in procs:
            p.join(timeout=timeout_s)
    finally:
        for p in procs:
            if p.is_alive():
                p.terminate()
                p.join()
    # Ranks in lockstep wait for the slowest: a step's time is the max over the c workers.
    slowest = {c: statistics.median(max(step) for step in zip(*lists, strict=True))
               for c, lists in per_step.items()}
    return [slowest[c] / slowest[1] for c in range(1, max_ranks + 1)], slowest[1]
