"""A Kineto-shaped trace of GPU kernels for tests/test_trace.py: the fields the PyTorch
profiler writes (traceEvents of complete events with cat, name, ts, dur, pid, tid and args;
ProfilerStep#N annotations on the host; kernels on a device with args.device and stream),
with kernel names as cuBLAS, FlashAttention, PyTorch and NCCL give them, and each class's
busy time per step chosen by the test."""

from __future__ import annotations

import json
from pathlib import Path

NAMES = {
    "gemm": "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_cublas",
    "attention": "flash_fwd_kernel",
    "memory": "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add>",
    "optimizer": "void at::native::multi_tensor_apply_kernel<FusedAdamMathFunctor>",
    "communication": "ncclDevKernel_AllReduce_Sum_f32_RING_LL",
}


def kineto(seconds: dict[str, float], steps: int = 3, pieces: int = 4, devices: int = 1,
           gap_us: float = 50.0, train: bool = True) -> dict:
    """A trace of `steps` steps; each runs every class of `seconds` (busy seconds a step) as
    `pieces` kernels back to back on stream 7, then a host gap; `train`: with autograd's
    backward on the host (a training step; without it, a forward-only trace)."""
    events, t = [], 1000.0
    for n in range(steps):
        start = t
        for cls, s in seconds.items():
            for _ in range(pieces):
                dur = s * 1e6 / pieces
                for dev in range(devices):
                    events.append({"ph": "X", "cat": "kernel", "name": NAMES[cls], "pid": dev,
                                   "tid": 7, "ts": t, "dur": dur,
                                   "args": {"device": dev, "stream": 7, "correlation": 1}})
                t += dur
        t += gap_us
        events.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{n + 10}",
                       "pid": 100, "tid": 100, "ts": start, "dur": t - start})
        if train:  # autograd's engine running a backward node on the host, as a step does
            events.append({"ph": "X", "cat": "cpu_op", "pid": 100, "tid": 101, "ts": start,
                           "dur": 1.0,
                           "name": "autograd::engine::evaluate_function: MmBackward0"})
    return {"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "NVIDIA H100 80GB HBM3"}],
            "distributedInfo": {"backend": "nccl", "rank": 0, "world_size": 8},
            "traceEvents": events}


def write(path: Path, doc: dict) -> Path:
    path.write_text(json.dumps(doc, indent=1))
    return path
