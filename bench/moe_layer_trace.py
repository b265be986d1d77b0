"""Host and GPU time of one Megatron-Core MoE layer pass, measured on a real GPU.

Why: the MoE steps run without CUDA graphs on fast GPUs are slower than the model says
(docs/research/moe-host-bound.md), and the model's host term (simulator/step/roofline.py
`host_launch_s`: kernels a pass x the profile's launch cost) rests on counts from shapes and a
C-loop launch cost. This bench reads both off a real pass instead of off the rows they would be
checked on: it builds Megatron-Core's own MoELayer (megatron/core/transformer/moe/moe_layer.py,
the alltoall token dispatcher, the router with DeepSeek-V3's sigmoid scores and expert bias,
SequentialMLP experts: the local spec, no Transformer Engine), runs forward and backward on one
GPU, and records per pass

- the wall time, and the time until the host has queued the whole pass (`enqueue_ms`);
- from a PyTorch profiler (Kineto) trace: kernels launched, the GPU's busy time (the union of
  kernel and copy intervals), the host-to-device syncs and how long the host sat in them;
- the host's time per launch: at a reduced width the GPU runs each kernel faster than the host
  launches it, so wall / kernels is the host's cost per kernel with PyTorch and Megatron on top;
- the CPU time of one torch.nn.Linear forward (BF16, 8192 x 2048 x 2048), the benchmark of
  NVIDIA/TransformerEngine issue #2053 (13.48 us on a DGX H100's Xeon 8480C), so the host measured
  here can be scaled to the hosts of the published rows;
- BF16 GEMM times at the expert shapes (tokens x 7168 x 4096, tokens x 2048 x 7168) and squares.

Run on a GPU machine with megatron-core importable (`pip install megatron-core`, no extras):
    python bench/moe_layer_trace.py --out DIR
It writes DIR/moe_layer_trace.json (every figure, the versions and the device) and one Kineto
trace of a DeepSeek-V3-width pass (DIR/moe_pass_trace.json.gz). On a CPU (`--device cpu`, gloo)
it runs the same code at toy sizes, which checks the script, not the figures.
"""
from __future__ import annotations

import argparse
import gzip
import json
import os
import platform
import statistics
import sys
import time


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True, help="folder for the JSON and the trace")
    p.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    p.add_argument("--passes", type=int, default=10, help="timed passes a configuration")
    p.add_argument("--name", default="moe_layer_trace", help="the JSON file's stem")
    return p.parse_args(argv)


# The configurations: (name, hidden, moe_ffn, shared_ffn, local experts, top-k, score function,
# heads). DeepSeek-V3 (hidden 7168, expert width 2048, one shared expert of 2048, top-8 of 256,
# sigmoid scores; deepseek-ai/DeepSeek-V3 config.json) at EP 32 holds 8 experts a GPU, at EP 16
# 16, at EP 8 32; gpt-oss-120b (hidden 2880, expert width 2880, top-4 of 128, softmax; openai
# gpt-oss config.json) at EP 8 holds 16. The "narrow" rows keep every count and shrink the widths
# so the GPU's part is small and the pass shows the host's.
CONFIGS = [
    ("dsv3-e8", 7168, 2048, 2048, 8, 8, "sigmoid", 56),
    ("dsv3-e16", 7168, 2048, 2048, 16, 8, "sigmoid", 56),
    ("dsv3-e32", 7168, 2048, 2048, 32, 8, "sigmoid", 56),
    ("narrow-e8", 1024, 256, 256, 8, 8, "sigmoid", 8),
    ("narrow-e16", 1024, 256, 256, 16, 8, "sigmoid", 8),
    ("narrow-e32", 1024, 256, 256, 32, 8, "sigmoid", 8),
    ("gptoss-e16", 2880, 2880, 0, 16, 4, "softmax", 64),
    ("narrow-gptoss-e16", 1024, 256, 0, 16, 4, "softmax", 8),
]
# Dense layers for comparison: Llama-3-70B's width (hidden 8192, FFN 28672, 64 heads, 8 KV
# groups; meta-llama config.json) and the same narrowed; experts None.
DENSE = [
    ("dense-llama70b", 8192, 28672, 0, None, None, None, 64),
    ("narrow-dense", 1024, 3584, 0, None, None, None, 8),
]
TOKENS = 4096  # one micro-batch of one 4,096-token sequence (the published rows' seq_len)


def init_dist(device: str):
    import torch
    import torch.distributed as dist
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29517")
    if device == "cuda":
        torch.cuda.set_device(0)
    dist.init_process_group("nccl" if device == "cuda" else "gloo", rank=0, world_size=1)
    from megatron.core import parallel_state
    parallel_state.initialize_model_parallel(1, 1, expert_model_parallel_size=1)
    if device == "cuda":
        from megatron.core.tensor_parallel.random import model_parallel_cuda_manual_seed
        model_parallel_cuda_manual_seed(1234)


def build(cfg, device: str, full_layer: bool = False):
    """Megatron-Core's MoELayer (or a whole TransformerLayer) for one configuration."""
    import torch
    import torch.nn.functional as F
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
    from megatron.core.transformer.transformer_config import TransformerConfig
    _name, hidden, ffn, shared, experts, topk, score, heads = cfg
    if experts is None:  # a dense layer: `ffn` is its MLP's width
        config = TransformerConfig(
            num_layers=1, hidden_size=hidden, num_attention_heads=heads,
            num_query_groups=8, ffn_hidden_size=ffn, gated_linear_unit=True,
            activation_func=F.silu, add_bias_linear=False, bf16=True,
            params_dtype=torch.bfloat16, use_cpu_initialization=(device == "cpu"),
            normalization="RMSNorm")
        from megatron.core.transformer.transformer_layer import TransformerLayer
        spec = get_gpt_layer_local_spec(normalization="RMSNorm")
        module = TransformerLayer(config, spec.submodules, layer_number=1)
        return module.to(device=device, dtype=torch.bfloat16)
    config = TransformerConfig(
        num_layers=1, hidden_size=hidden, num_attention_heads=heads,
        ffn_hidden_size=4 * hidden, num_moe_experts=experts, moe_router_topk=topk,
        moe_ffn_hidden_size=ffn,
        moe_shared_expert_intermediate_size=(shared or None),
        moe_router_score_function=score,
        moe_router_enable_expert_bias=(score == "sigmoid"),
        moe_router_load_balancing_type="seq_aux_loss" if score == "sigmoid" else "aux_loss",
        moe_aux_loss_coeff=1e-4, moe_router_dtype="fp32",
        moe_token_dispatcher_type="alltoall", moe_grouped_gemm=False,
        gated_linear_unit=True, activation_func=F.silu, add_bias_linear=False,
        bf16=True, params_dtype=torch.bfloat16, use_cpu_initialization=(device == "cpu"),
        normalization="RMSNorm")
    spec = get_gpt_layer_local_spec(num_experts=experts, moe_grouped_gemm=False,
                                    normalization="RMSNorm")
    if full_layer:
        from megatron.core.transformer.transformer_layer import TransformerLayer
        module = TransformerLayer(config, spec.submodules, layer_number=1)
    else:
        # the spec's mlp is a builder (functools.partial of MoELayer with its submodules)
        module = spec.submodules.mlp(config=config)
    return module.to(device=device, dtype=torch.bfloat16)


def sync(device: str):
    import torch
    if device == "cuda":
        torch.cuda.synchronize()


def one_pass(module, x, grad, full_layer: bool):
    """Forward and backward of one layer and micro-batch; returns when the host has queued it."""
    out = module(x, attention_mask=None)[0] if full_layer else module(x)[0]
    out.backward(grad)


def timed_passes(module, x, grad, device: str, passes: int, full_layer: bool):
    walls, enqueues = [], []
    for _ in range(3):  # warm-up: allocator, cuBLAS handles, autotuning
        one_pass(module, x, grad, full_layer)
    sync(device)
    for _ in range(passes):
        t0 = time.perf_counter()
        one_pass(module, x, grad, full_layer)
        t1 = time.perf_counter()
        sync(device)
        t2 = time.perf_counter()
        enqueues.append((t1 - t0) * 1e3)
        walls.append((t2 - t0) * 1e3)
    return walls, enqueues


def union_us(intervals):
    """Total length of the union of [start, end) intervals, in their unit."""
    total, end = 0.0, None
    for s, e in sorted(intervals):
        if end is None or s > end:
            total += e - s
            end = e
        elif e > end:
            total += e - end
            end = e
    return total


def trace_figures(events, passes: int) -> dict:
    """Per-pass counts and times from a Kineto trace's events (chrome trace format, us)."""
    kern = [e for e in events if e.get("cat") == "kernel"]
    copies = [e for e in events if e.get("cat") in ("gpu_memcpy", "gpu_memset")]
    runtime = [e for e in events if e.get("cat") in ("cuda_runtime", "cuda_driver")]
    launches = [e for e in runtime if "Launch" in e.get("name", "")]
    syncs = [e for e in runtime if e.get("name", "") in (
        "cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize")]
    d2h = [e for e in runtime if e.get("name", "") in ("cudaMemcpyAsync", "cudaMemcpy")]
    ops = [e for e in events if e.get("cat") == "cpu_op"]
    gpu = [(e["ts"], e["ts"] + e.get("dur", 0)) for e in kern + copies]
    return {
        "kernels": len(kern) / passes,
        "copies_and_memsets": len(copies) / passes,
        "launch_calls": len(launches) / passes,
        "launch_call_us_median": (statistics.median(e.get("dur", 0) for e in launches)
                                  if launches else None),
        "sync_calls": len(syncs) / passes,
        "memcpy_calls": len(d2h) / passes,
        "host_blocked_ms": sum(e.get("dur", 0) for e in syncs + d2h) / passes / 1e3,
        "cpu_ops": len(ops) / passes,
        "gpu_busy_ms": union_us(gpu) / passes / 1e3,
        "kernel_sum_ms": sum(e.get("dur", 0) for e in kern) / passes / 1e3,
    }


def forward_kernels(events, passes: int) -> float:
    """Kernels a pass that the forward launched: those whose launch (runtime or driver call,
    matched by correlation id) ran on the thread of the first launch; autograd runs the
    backward's on a thread of its own."""
    launches = [e for e in events if e.get("cat") in ("cuda_runtime", "cuda_driver")
                and "Launch" in e.get("name", "")]
    if not launches:
        return 0.0
    first = min(launches, key=lambda e: e["ts"])["tid"]
    thread = {e["args"]["correlation"]: e["tid"] for e in launches
              if "correlation" in e.get("args", {})}
    kernels = [e for e in events if e.get("cat") == "kernel"]
    return sum(thread.get(e.get("args", {}).get("correlation")) == first
               for e in kernels) / passes


def profile_passes(module, x, grad, device: str, full_layer: bool, trace_path: str | None,
                   passes: int = 2) -> dict:
    from torch.profiler import ProfilerActivity, profile
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    sync(device)
    with profile(activities=acts) as prof:
        for _ in range(passes):
            one_pass(module, x, grad, full_layer)
        sync(device)
    tmp = (trace_path or os.path.join(os.environ.get("TMPDIR", "/tmp"), "moe_pass_tmp.json"))
    raw = tmp[:-3] if tmp.endswith(".gz") else tmp
    prof.export_chrome_trace(raw)
    with open(raw) as f:
        events = json.load(f)["traceEvents"]
    if trace_path and trace_path.endswith(".gz"):
        with open(raw, "rb") as f, gzip.open(trace_path, "wb") as g:
            g.write(f.read())
    os.remove(raw)
    return {**trace_figures(events, passes), "forward_kernels": forward_kernels(events, passes)}


def measure_layer(cfg, device: str, passes: int, full_layer: bool = False,
                  trace_path: str | None = None) -> dict:
    import torch
    name, hidden = cfg[0], cfg[1]
    tokens = TOKENS if device == "cuda" else 64
    module = build(cfg, device, full_layer)
    # [seq, micro-batch, hidden], Megatron's layout
    x = torch.randn(tokens, 1, hidden, device=device, dtype=torch.bfloat16, requires_grad=True)
    grad = torch.randn(tokens, 1, hidden, device=device, dtype=torch.bfloat16)
    walls, enqueues = timed_passes(module, x, grad, device, passes, full_layer)
    fig = profile_passes(module, x, grad, device, full_layer, trace_path)
    wall = statistics.median(walls)
    row = {"config": name + ("-layer" if full_layer else ""), "hidden": hidden,
           "moe_ffn": cfg[2], "shared_ffn": cfg[3], "local_experts": cfg[4], "topk": cfg[5],
           "score": cfg[6], "tokens": tokens, "full_layer": full_layer,
           "wall_ms_median": wall, "wall_ms_min": min(walls), "wall_ms_max": max(walls),
           "enqueue_ms_median": statistics.median(enqueues), **fig}
    row["wall_us_per_kernel"] = wall * 1e3 / fig["kernels"] if fig["kernels"] else None
    del module, x, grad
    if device == "cuda":
        torch.cuda.empty_cache()
    return row


def linear_cpu_us(device: str) -> dict:
    """CPU time of one torch.nn.Linear forward, BF16, 8192 tokens x 2048 -> 2048: the benchmark
    of NVIDIA/TransformerEngine issue #2053 ('average time per Linear forward pass both on CPU
    and GPU'; 13.48 us on H100 DGX). Calls are queued after a sync, fewer than the launch queue
    holds, so the host never waits for the GPU."""
    import torch
    if device != "cuda":
        return {}
    tokens = 8192
    lin = torch.nn.Linear(2048, 2048, bias=False, device=device, dtype=torch.bfloat16)
    x = torch.randn(tokens, 2048, device=device, dtype=torch.bfloat16)
    out = {}
    for grad_mode in (True, False):
        cpu, gpu = [], []
        with torch.set_grad_enabled(grad_mode):
            for _ in range(10):
                lin(x)
            for _ in range(9):
                sync(device)
                t0 = time.perf_counter()
                for _ in range(100):
                    lin(x)
                t1 = time.perf_counter()
                sync(device)
                t2 = time.perf_counter()
                cpu.append((t1 - t0) * 1e4)  # us a call (100 calls)
                gpu.append((t2 - t0) * 1e4)
        key = "grad" if grad_mode else "no_grad"
        out[f"cpu_us_{key}"] = statistics.median(cpu)
        out[f"wall_us_{key}"] = statistics.median(gpu)
        out[f"cpu_us_{key}_spread"] = [min(cpu), max(cpu)]
    return out


def gemm_times(device: str) -> list[dict]:
    """BF16 GEMM time (CUDA events around 20 back-to-back GEMMs, median of 7 such after 5
    warm-ups) at the expert shapes and at
    squares: the measured side of profiles' [roofline] for this GPU."""
    import torch
    if device != "cuda":
        return []
    shapes = [(m, 7168, 4096) for m in (128, 256, 512, 1024, 2048, 4096, 8192)]
    shapes += [(m, 2048, 7168) for m in (128, 256, 512, 1024, 2048, 4096, 8192)]
    shapes += [(m, 2880, 5760) for m in (256, 1024, 4096)]
    shapes += [(n, n, n) for n in (256, 512, 1024, 2048, 4096, 8192)]
    rows = []
    for m, k, n in shapes:
        a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
        for _ in range(5):
            a @ b
        times = []
        for _ in range(7):
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            for _ in range(20):  # back to back: the GPU, not the host's launches, sets the pace
                a @ b
            e.record()
            e.synchronize()
            times.append(s.elapsed_time(e) * 1e3 / 20)  # us a GEMM
        t = statistics.median(times)
        rows.append({"m": m, "k": k, "n": n, "us_median": t, "us_min": min(times),
                     "tflops": 2 * m * k * n / (t * 1e-6) / 1e12})
    return rows


def environment(device: str) -> dict:
    import torch
    env = {"date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
           "python": platform.python_version(), "torch": torch.__version__,
           "cpu": platform.processor() or platform.machine(), "os_cpus": os.cpu_count()}
    try:
        import megatron.core
        env["megatron_core"] = getattr(megatron.core, "__version__", "unknown")
    except Exception as exc:  # recorded, not fatal
        env["megatron_core"] = f"not importable: {exc}"
    try:
        with open("/proc/cpuinfo") as f:
            names = [ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")]
        env["cpu_model"] = names[0] if names else None
    except OSError:
        env["cpu_model"] = None
    if device == "cuda":
        env["gpu"] = torch.cuda.get_device_name(0)
        env["cuda"] = torch.version.cuda
        env["nccl"] = ".".join(map(str, torch.cuda.nccl.version()))
    return env


def main(argv=None) -> int:
    args = parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    result = {"environment": environment(args.device), "tokens": TOKENS,
              "passes": args.passes, "layers": [], "errors": []}
    path = os.path.join(args.out, args.name + ".json")

    def save():
        with open(path, "w") as f:
            json.dump(result, f, indent=1)

    t0 = time.time()
    result["linear_2053"] = linear_cpu_us(args.device)
    print("linear", result["linear_2053"], flush=True)
    save()
    result["gemm"] = gemm_times(args.device)
    print("gemm rows", len(result["gemm"]), f"{time.time() - t0:.0f} s", flush=True)
    save()
    init_dist(args.device)
    runs = ([(c, False) for c in CONFIGS] + [(CONFIGS[0], True), (CONFIGS[3], True)]
            + [(c, True) for c in DENSE])
    for cfg, full in runs:
        trace = (os.path.join(args.out, "moe_pass_trace.json.gz")
                 if (cfg[0], full) == ("dsv3-e8", False) else None)
        try:
            row = measure_layer(cfg, args.device, args.passes, full, trace)
            result["layers"].append(row)
            print(json.dumps(row), f"{time.time() - t0:.0f} s", flush=True)
        except Exception as exc:  # one failing keeps the rest
            result["errors"].append({"config": cfg[0], "full_layer": full,
                                     "error": f"{type(exc).__name__}: {exc}"})
            print("FAILED", cfg[0], full, type(exc).__name__, exc, flush=True)
        save()
    return 0


if __name__ == "__main__":
    sys.exit(main())
