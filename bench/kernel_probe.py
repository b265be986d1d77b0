"""Three questions the published steps cannot settle, measured on one lent GPU in about two
minutes (not a test: CI runs it only at toy sizes on the CPU, to check the script).

1. Attention kernels against sequence length (`attention`): PyTorch SDPA's FlashAttention-2,
   cuDNN and memory-efficient backends, causal, head dim 128 and 64, forward and backward
   TFLOP/s (FlashAttention's count: causal halves the s x s products) at 2k-32k tokens a
   sequence, a fixed number of tokens a call. The model prices one rate a kernel whatever the
   length (the profile's [roofline] attn_* fractions, measured at 8k or 16k); torchtitan's
   8B rows at 32K and 64K tokens (bench/torchtitan_steps.py) are 14-27% slower in the model.
2. The host's time a GEMM launch (`host`), where the GPU part is small enough that the host
   sets the pace: torch.mm, a Python loop of nn.Linear forward+backward over G experts (the
   SequentialMLP shape of the trace in profiles/measured/h200-megatron-moe-layer-2026-12-04.json)
   and, where this PyTorch has it, torch._grouped_mm over G groups; and Transformer Engine's
   GroupedLinear (multi-stream cuBLAS, the `moe_grouped_gemm` path of Megatron-Core's TE spec)
   where transformer_engine imports. The slope against G is the host time each local expert
   adds (simulator/step/host.py prices SequentialMLP's; whether TE's GroupedLinear costs the
   same is docs/research/moe-blackwell-steps.md's open question).
3. The machine (`env`): versions, GPU, and which of transformer_engine, megatron.core import.

Each figure is a median over timed repeats after warm-ups: GPU times from CUDA events, host
times from time.perf_counter around the enqueue (no synchronize inside it). Writes one JSON.
Usage: python bench/kernel_probe.py --out FILE.json [--quick] [--parts env,attention,host]
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import statistics
import sys
import time

import torch

PARTS = ("env", "attention", "host")
SEQS = (2048, 4096, 8192, 16384, 32768)
TOKENS = 32768  # tokens a call: batch = TOKENS / seq
EXPERTS = (1, 4, 8, 16, 32)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True, help="the JSON file to write")
    p.add_argument("--quick", action="store_true", help="toy sizes, few repeats (a CPU check)")
    p.add_argument("--parts", default=",".join(PARTS), help="which of " + ",".join(PARTS))
    p.add_argument("--repeats", type=int, default=None, help="timed repeats (default 5; 2 quick)")
    return p.parse_args(argv)


def _device() -> str:
    return "cuda" if torch.cuda.is_available() else "cpu"


def _sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def gpu_ms(fn, device: str, repeats: int, warmups: int = 2) -> float:
    """Median milliseconds of fn() on the device (CUDA events; wall time on a CPU)."""
    for _ in range(warmups):
        fn()
    _sync(device)
    times = []
    for _ in range(repeats):
        if device == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end))
        else:
            t0 = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def host_us(fn, device: str, repeats: int, calls: int, warmups: int = 3) -> float:
    """Median microseconds the host takes to enqueue one fn() (calls back to back, then one
    synchronize outside the timed span)."""
    for _ in range(warmups):
        fn()
    _sync(device)
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        times.append((time.perf_counter() - t0) * 1e6 / calls)
        _sync(device)
    return statistics.median(times)


def env() -> dict:
    out = {"python": platform.python_version(), "torch": torch.__version__,
           "cuda": torch.version.cuda, "device": _device(), "cpu": platform.processor(),
           "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    if torch.cuda.is_available():
        out["gpu"] = torch.cuda.get_device_name(0)
        out["cudnn"] = torch.backends.cudnn.version()
    for name in ("transformer_engine", "megatron.core"):
        try:
            module = __import__(name, fromlist=["__version__"])
            out[name] = getattr(module, "__version__", "importable")
        except Exception as e:  # any import failure: not here
            out[name] = f"absent ({type(e).__name__})"
    out["grouped_mm"] = hasattr(torch, "_grouped_mm")
    return out


def _sdpa_ms(q, k, v, grad, backend, device: str, repeats: int) -> tuple[float, float]:
    """(forward, forward + backward) milliseconds of causal SDPA on `backend`."""
    from torch.nn.attention import sdpa_kernel
    from torch.nn.functional import scaled_dot_product_attention as sdpa

    def fwd():
        return sdpa(q, k, v, is_causal=True)

    def both():
        torch.autograd.grad(fwd(), (q, k, v), grad)

    with sdpa_kernel(backend):
        return gpu_ms(fwd, device, repeats), gpu_ms(both, device, repeats)


def attention(device: str, quick: bool, repeats: int) -> list[dict]:
    """SDPA TFLOP/s per backend, head dim and sequence length (module docstring, item 1)."""
    from torch.nn.attention import SDPBackend

    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    seqs, tokens = ((128, 256), 512) if quick else (SEQS, TOKENS)
    # the math backend materialises the s x s scores (tens of GB at 32k): CPU check only
    backends = ({"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION,
                 "efficient": SDPBackend.EFFICIENT_ATTENTION} if device == "cuda"
                else {"math": SDPBackend.MATH})
    rows = []
    for head_dim, heads in ((128, 32), (64, 64)):
        for seq in seqs:
            batch = max(1, tokens // seq)
            shape = (batch, heads, seq, head_dim)
            q = torch.randn(shape, device=device, dtype=dtype, requires_grad=True)
            k = torch.randn(shape, device=device, dtype=dtype, requires_grad=True)
            v = torch.randn(shape, device=device, dtype=dtype, requires_grad=True)
            grad = torch.randn(shape, device=device, dtype=dtype)
            flops = 4 * batch * heads * seq * seq * head_dim / 2  # causal: half the products
            for name, backend in backends.items():
                row = {"backend": name, "head_dim": head_dim, "heads": heads, "seq": seq,
                       "batch": batch}
                try:
                    fwd, total = _sdpa_ms(q, k, v, grad, backend, device, repeats)
                    bwd = max(total - fwd, 1e-9)
                    row.update(fwd_ms=fwd, bwd_ms=bwd, fwd_tflops=flops / fwd / 1e9,
                               bwd_tflops=2.5 * flops / bwd / 1e9)
                except RuntimeError as e:  # a backend that does not take this shape
                    row["error"] = str(e).splitlines()[0][:160]
                rows.append(row)
            del q, k, v, grad
    return rows


def _slope(xs, ys) -> float:
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    return (sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True))
            / sum((x - mx) ** 2 for x in xs))


def host(device: str, quick: bool, repeats: int) -> dict:
    """Host microseconds an expert adds (module docstring, item 2): narrow widths so the GPU
    runs each kernel faster than the host launches it."""
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    hidden, ffn, tokens = (64, 64, 64) if quick else (256, 256, 512)
    calls = 3 if quick else 20
    out: dict = {"hidden": hidden, "ffn": ffn, "tokens_per_expert": tokens}
    a = torch.randn(tokens, hidden, device=device, dtype=dtype)
    b = torch.randn(hidden, ffn, device=device, dtype=dtype)
    out["mm_us"] = host_us(lambda: torch.mm(a, b), device, repeats, calls)

    def loop(experts):  # SequentialMLP's shape: fc1, activation, fc2 per expert, then backward
        fc1 = [torch.nn.Linear(hidden, 2 * ffn, bias=False, device=device, dtype=dtype)
               for _ in range(experts)]
        fc2 = [torch.nn.Linear(ffn, hidden, bias=False, device=device, dtype=dtype)
               for _ in range(experts)]
        xs = [torch.randn(tokens, hidden, device=device, dtype=dtype, requires_grad=True)
              for _ in range(experts)]

        def run():
            outs = []
            for f1, f2, x in zip(fc1, fc2, xs, strict=True):
                h1, h2 = f1(x).chunk(2, dim=-1)
                outs.append(f2(torch.nn.functional.silu(h1) * h2))
            torch.cat(outs).sum().backward()
        return run

    out["sequential_us"] = {e: host_us(loop(e), device, repeats, calls) for e in EXPERTS}
    out["sequential_us_per_expert"] = _slope(EXPERTS, list(out["sequential_us"].values()))
    if device == "cuda" and hasattr(torch, "_grouped_mm"):
        def grouped(experts):
            x = torch.randn(experts * tokens, hidden, device=device, dtype=dtype,
                            requires_grad=True)
            w = torch.randn(experts, hidden, ffn, device=device, dtype=dtype,
                            requires_grad=True)
            offs = torch.arange(tokens, experts * tokens + 1, tokens, device=device,
                                dtype=torch.int32)

            def run():
                torch._grouped_mm(x, w, offs=offs).sum().backward()
            return run
        try:
            out["grouped_mm_us"] = {e: host_us(grouped(e), device, repeats, calls)
                                    for e in EXPERTS}
            out["grouped_mm_us_per_expert"] = _slope(EXPERTS,
                                                     list(out["grouped_mm_us"].values()))
        except RuntimeError as e:
            out["grouped_mm_error"] = str(e).splitlines()[0][:160]
    try:
        import transformer_engine.pytorch as te
    except Exception as e:  # not in this image
        out["te_grouped_linear"] = f"absent ({type(e).__name__})"
        return out

    def te_grouped(experts):
        fc1 = te.GroupedLinear(experts, hidden, 2 * ffn, bias=False, params_dtype=dtype)
        fc2 = te.GroupedLinear(experts, ffn, hidden, bias=False, params_dtype=dtype)
        x = torch.randn(experts * tokens, hidden, device=device, dtype=dtype,
                        requires_grad=True)
        splits = [tokens] * experts

        def run():
            h1, h2 = fc1(x, splits).chunk(2, dim=-1)
            fc2(torch.nn.functional.silu(h1) * h2, splits).sum().backward()
        return run
    try:
        out["te_grouped_linear_us"] = {e: host_us(te_grouped(e), device, repeats, calls)
                                       for e in EXPERTS}
        out["te_grouped_linear_us_per_expert"] = _slope(
            EXPERTS, list(out["te_grouped_linear_us"].values()))
    except Exception as e:  # what this TE refused
        out["te_grouped_linear"] = f"failed: {type(e).__name__}: {str(e)[:160]}"
    return out


def main(argv=None) -> int:
    args = parse_args(argv)
    parts = [p for p in args.parts.split(",") if p]
    unknown = sorted(set(parts) - set(PARTS))
    if unknown:
        print(f"kernel_probe: unknown part(s) {', '.join(unknown)}; known: {', '.join(PARTS)}",
              file=sys.stderr)
        return 2
    repeats = args.repeats if args.repeats is not None else (2 if args.quick else 5)
    if repeats < 1:
        print("kernel_probe: --repeats must be at least 1", file=sys.stderr)
        return 2
    device = _device()
    result: dict = {"options": {"quick": args.quick, "parts": parts, "repeats": repeats}}
    torch.manual_seed(0)
    run = {"env": env, "attention": lambda: attention(device, args.quick, repeats),
           "host": lambda: host(device, args.quick, repeats)}
    for part in parts:
        t0 = time.perf_counter()
        result[part] = run[part]()
        print(f"{part}: {time.perf_counter() - t0:.1f} s", flush=True)
    with open(args.out, "w") as f:
        json.dump(result, f, indent=1, default=str)
    for row in result.get("attention", []):
        if "fwd_tflops" in row:
            print(f"  {row['backend']:9s} hd{row['head_dim']} s{row['seq']:6d}: "
                  f"fwd {row['fwd_tflops']:7.1f} bwd {row['bwd_tflops']:7.1f} TFLOP/s")
    h = result.get("host", {})
    for key in ("mm_us", "sequential_us_per_expert", "grouped_mm_us_per_expert",
                "te_grouped_linear_us_per_expert"):
        if key in h and not math.isnan(h[key]):
            print(f"  host {key}: {h[key]:.1f} us")
    return 0


if __name__ == "__main__":
    sys.exit(main())
