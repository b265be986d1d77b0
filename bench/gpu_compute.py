"""Benchmark (issue 15 item 1): this device's compute for the SCAPE authors' models and the
optimizer of each scheme, printed and written as JSON. Meant for a lent GPU (bench/gpu_session.sh
runs it); on a CPU it runs too, with --quick, to check the script.

Measured, each a median over timed repeats after warm-ups (calibration/compute.time_call,
cold cache before each call):
- forward+backward of gpt-345m, llama-500m and llama-1.8b at the authors' micro-batch and
  sequence length (the models' profiles; llama-500m micro-batch 16 from the authors'
  pretrain_llama2_500M_baseline.sh), bf16 autocast, FlashAttention forced where torch has it
  (`flash` says whether it ran); a micro-batch that does not fit is halved and says so;
- one optimizer step of Llama-1.8B's parameters on one rank: dense AdamS (ZeRO-1 code path) and
  both SCAPE variants (`scape`, the authors' per-tensor reducer, scape/schemes/scape_authors.py;
  `scape-partitioned`) at density 0.1 and 0.01; SCAPE's first step is dense, so steps 3.. are
  timed (as bench/optimizer_cost.py);
- selection of the top d*n of n = 1e8 and 1e9 scores, d = 0.1 and 0.01: torch.topk against
  scape.select's exact threshold method (`threshold`: top_k_exact, the CUDA default until
  2026-11-26 session 11) and its default (`banded`: top_k_indices, on CUDA the sampled band
  of top_k_banded since then);
- quantize and dequantize (8-bit, block 2048) of 1e8 values;
- with --parts profile (not by default): the operators of one step of SCAPE partitioned at
  d = 0.1 and the authors' reducer at d = 0.01 by their own device time (op_profile);
- with --parts bits (not by default): the mask's bitmap made and read back, the kernels in use
  against candidates, at n = 2^30 (bitmap_kernels).
Usage: python bench/gpu_compute.py [--out FILE.json] [--quick] [--parts fwd_bwd,...,profile]
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import time
from contextlib import nullcontext
from dataclasses import replace

import torch
from optimizer_cost import step_times  # bench/, this script's folder

from calibration.fwd_bwd import measure_fwd_bwd
from calibration.kernel_benches import KERNEL_BENCH
from calibration.timing import synchronize, time_call
from profiles import load_model
from scape.adams import Hyper
from scape.comm import Comm
from scape.plan import make_config
from scape.schemes import make_scheme
from scape.select import top_k_exact, top_k_indices
from scape.train.model import GPT

# (model, the authors' micro-batch): llama-1.8b and gpt-345m scripts pass 8, llama-500m 16
FWD_BWD = (("gpt-345m", 8), ("llama-500m", 16), ("llama-1.8b", 8))
OPTIMIZERS = (("dense-adams", None), ("scape", 0.1), ("scape", 0.01),
              ("scape-partitioned", 0.1), ("scape-partitioned", 0.01))
OPT_LAYERS = (6, 12, 24)  # Llama-1.8B has 24; its whole step may not fit at every scheme
SELECT_N = (10**8, 10**9)
DENSITIES = (0.1, 0.01)


def say(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def _flash():
    """A context forcing FlashAttention in F.scaled_dot_product_attention, or None."""
    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel
    except ImportError:
        return None
    return sdpa_kernel([SDPBackend.FLASH_ATTENTION])


def fwd_bwd(device: torch.device, models, repeats: int) -> list[dict]:
    rows = []
    for name, mb in models:
        while mb >= 1:
            for flash in (True, False):
                ctx = _flash() if flash and device.type == "cuda" else None
                try:
                    with ctx or nullcontext():
                        fb = measure_fwd_bwd(name, mb, device=device, repeats=repeats)
                except torch.OutOfMemoryError:
                    fb = "oom"
                except RuntimeError as e:  # no flash kernel for this shape/dtype/device
                    if ctx is None:
                        raise
                    say(f"{name}: FlashAttention refused ({str(e)[:120]}); default SDPA")
                    continue
                break
            torch.cuda.empty_cache() if device.type == "cuda" else None
            if fb != "oom":
                break
            say(f"{name}: micro-batch {mb} does not fit; halved")
            mb //= 2
        fb["flash"] = ctx is not None
        fb["tflops"] = fb["flops"] / fb["total_s"] / 1e12
        say(f"{name} mb {fb['micro_batch']} x {fb['seq_len']}: fwd {fb['fwd_s']*1e3:.1f} ms, "
            f"bwd {fb['bwd_s']*1e3:.1f} ms, {fb['tflops']:.0f} TFLOP/s")
        rows.append(fb)
    return rows


def _shapes(model_name: str, layers: int | None) -> list[torch.Size]:
    """The parameter shapes of the model, with `layers` blocks where given."""
    profile = load_model(model_name)
    if layers is not None:
        profile = replace(profile, arch=replace(profile.arch, n_layers=layers))
    with torch.device("meta"):
        model = GPT(profile)
    return [p.shape for p in model.parameters()]


def _scheme(device: torch.device, shapes, name: str, density):
    """(params, scheme): fp32 parameters of `shapes` on `device` (seed 0) and the scheme's
    optimizer over them on one rank (density None: dense)."""
    opts = {} if density is None else {"sparsity": 1 - density}
    torch.manual_seed(0)
    with torch.device(device):
        params = [torch.nn.Parameter(torch.randn(s) * 0.02) for s in shapes]  # fp32
        return params, make_scheme(make_config(name, **opts), params, Comm(), Hyper())


def _time_scheme(device: torch.device, shapes, name: str, density, repeats: int) -> dict:
    params, scheme = _scheme(device, shapes, name, density)
    with torch.device(device):
        times, parts = step_times(scheme, params, repeats, lambda: synchronize(device))
    return {"step_s": statistics.median(times), "samples_s": times, "parts_s": parts,
            "peak_memory_GB": (torch.cuda.max_memory_allocated() / 1e9
                               if device.type == "cuda" else None)}


def _free(device: torch.device) -> None:
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()


def optimizer_steps(device: torch.device, model_name: str, cases, layer_counts,
                    repeats: int) -> list[dict]:
    """Each case at each layer count (the model's own last). Where the full model does not fit
    (every [N] buffer of the runtime's step is fp32), `full_s` extends the two largest counts
    that did linearly in the layers: the step is per-tensor and per-element work, so its time is
    a + b * layers; dense AdamS, which fits whole, checks that line (`line_err_pct`)."""
    rows = []
    for name, density in cases:
        for layers in layer_counts:
            shapes = _shapes(model_name, layers)
            n = sum(s.numel() for s in shapes)
            row = {"model": model_name, "layers": layers, "params": n, "scheme": name,
                   "density": density}
            try:
                row.update(_time_scheme(device, shapes, name, density, repeats))
                say(f"{name} d={density} L={layers}: step {row['step_s']*1e3:.1f} ms "
                    f"{ {k: round(v * 1e3, 2) for k, v in row['parts_s'].items()} }")
            except torch.OutOfMemoryError:
                row["step_s"] = None
                say(f"{name} d={density} L={layers}: does not fit")
            _free(device)
            rows.append(row)
    full = layer_counts[-1]
    for name, density in cases:
        mine = [r for r in rows if r["scheme"] == name and r["density"] == density]
        done = [r for r in mine if r["step_s"] is not None and r["layers"] < full]
        if len(done) < 2:
            continue
        (l0, t0), (l1, t1) = [(r["layers"], r["step_s"]) for r in done[-2:]]
        line = t1 + (t1 - t0) / (l1 - l0) * (full - l1)
        last = mine[-1]
        last["line_s"] = line
        if last["step_s"] is not None:
            last["line_err_pct"] = 100 * (line - last["step_s"]) / last["step_s"]
        last["full_s"] = last["step_s"] if last["step_s"] is not None else line
    dense = next((r.get("full_s") for r in rows if r["scheme"] == "dense-adams"
                  and r["layers"] == full), None)
    for r in rows:
        if r.get("full_s") is not None and dense is not None:
            r["over_dense_s"] = r["full_s"] - dense
            say(f"{r['scheme']} d={r['density']}: full model {r['full_s']*1e3:.1f} ms, "
                f"{r['over_dense_s']*1e3:+.1f} ms over dense AdamS"
                + (f" (line {r['line_s']*1e3:.1f} ms, {r['line_err_pct']:+.1f}%)"
                   if "line_err_pct" in r else ""))
    return rows


# The mask's bitmap, made and read back: the kernels that partitioned d = 0.1's `pack` block
# runs (33.9 ms of its +50.5 on the H200, session 13) against candidates that touch fewer
# bytes. The candidates live here until a GPU says which is faster (on a CPU the int64 shifts
# ran slower than the uint8 sum): scape/schemes/scape.py and quantized.py use the first.
_MSB = torch.tensor([int(f"{i:08b}"[::-1], 2) for i in range(256)], dtype=torch.uint8)
_BITS_LSB = ((torch.arange(256).unsqueeze(1) >> torch.arange(8)) & 1).bool()  # [256, 8]


def _pack_shifts(b: torch.Tensor) -> torch.Tensor:
    """[n] bool -> [n/8] uint8, LSB first: each 8 bools read as one little-endian int64 and
    their 0/1 bytes gathered into the low byte by three shift-or steps (no overflow)."""
    x = b.view(torch.uint8).view(torch.int64)  # [n/8], element 8w+j in byte j
    x = (x | (x >> 7)) & 0x0003000300030003
    x = (x | (x >> 14)) & 0x0000000F0000000F
    return ((x | (x >> 28)) & 0xFF).to(torch.uint8)


def bitmap_kernels(device: torch.device, n: int, density: float, repeats: int) -> dict:
    """Seconds of each way to turn k ascending indices of n into the bitmap the mask
    all-gather sends, and back into indices (scape/schemes/scape.py _send_mask, _decode)."""
    from scape.schemes.quantized import _pack_bits, _unpack_bits
    from scape.schemes.scape_authors import pack_lsb, unpack_lsb

    # k ascending, distinct indices, one in each stride of n / k (made on the device: a CPU
    # randperm of 2^30 would take 8 GB and tens of seconds)
    k = int(density * n)
    stride = n // k
    torch.manual_seed(0)
    local = (torch.arange(k, device=device) * stride
             + torch.randint(0, stride, (k,), device=device))  # [k] int64
    msb, lut = _MSB.to(device), _BITS_LSB.to(device)

    def mask() -> torch.Tensor:
        bits = torch.zeros(n, dtype=torch.bool, device=device)  # [n]
        bits[local] = True
        return bits

    bits = mask()
    codes = _pack_bits(bits)  # [n/8] uint8, MSB first
    lsb = pack_lsb(bits)
    cases = {
        "mask (zeros + index_put)": mask,
        "pack sum (in use, MSB)": lambda: _pack_bits(bits),
        "pack shifts (MSB via table)": lambda: msb[_pack_shifts(bits).long()],
        "pack_lsb sum (in use, authors')": lambda: pack_lsb(bits),
        "pack shifts (LSB)": lambda: _pack_shifts(bits),
        "unpack shifts (in use, MSB)": lambda: _unpack_bits(codes),
        "unpack table (MSB)": lambda: lut[msb[codes.long()].long()].reshape(-1),
        "unpack_lsb shifts (in use, authors')": lambda: unpack_lsb(lsb, n),
        "unpack table (LSB)": lambda: lut[lsb.long()].reshape(-1),
        "decode nonzero": lambda: torch.nonzero(bits).squeeze(1),
    }
    # the candidates must give the bytes in use, or their times mean nothing
    same = (torch.equal(msb[_pack_shifts(bits).long()], codes)
            and torch.equal(_pack_shifts(bits), lsb)
            and torch.equal(lut[msb[codes.long()].long()].reshape(-1), bits)
            and torch.equal(lut[lsb.long()].reshape(-1), bits))
    out = {"n": n, "density": density, "candidates_equal": same}
    for name, fn in cases.items():
        out[name] = time_call(fn, device, repeats)
        say(f"bitmap n={n:.0e} d={density}: {name} {out[name] * 1e3:.2f} ms")
    _free(device)
    return out


# where a SCAPE step's time goes, op by op: the variants and densities whose overhead misses
# the goal (session 13, H200: partitioned d = 0.1 +50.5 ms, its `pack` block 33.9 ms against
# 0.6 at d = 0.01; the authors' reducer +71.0 ms at d = 0.01)
PROFILED = (("scape-partitioned", 0.1), ("scape", 0.01))
PROFILE_TOP = 15


def op_profile(device: torch.device, model_name: str, cases, layer_counts,
               top: int = PROFILE_TOP) -> list[dict]:
    """The `top` operators of one optimizer step by their own time on the device (torch.profiler;
    on a CPU, on the host), each case at the largest layer count that fits: after three
    untimed steps (SCAPE's first is dense), with fresh gradients, as `step_times` runs them."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    cuda = device.type == "cuda"
    attr = "self_device_time_total" if cuda else "self_cpu_time_total"
    activities = [ProfilerActivity.CPU, *([ProfilerActivity.CUDA] if cuda else [])]
    rows = []
    for name, density in cases:
        for layers in sorted(layer_counts, reverse=True):
            scheme = params = None
            try:
                params, scheme = _scheme(device, _shapes(model_name, layers), name, density)
                with torch.device(device):
                    step_times(scheme, params, 1, lambda: synchronize(device))  # 3 untimed steps
                    for p in params:
                        p.grad = torch.randn_like(p) * 1e-3
                    synchronize(device)
                    with profile(activities=activities) as prof:
                        scheme.step()
                        synchronize(device)
            except torch.OutOfMemoryError:
                say(f"profile {name} d={density} L={layers}: does not fit")
                scheme = params = None  # what the failed try holds, before it is freed
                _free(device)
                continue
            # operators only: on a GPU the kernels they launch are listed too, with the same
            # device time, and would count it twice
            events = sorted((e for e in prof.key_averages() if e.device_type == DeviceType.CPU),
                            key=lambda e: getattr(e, attr), reverse=True)
            total = sum(getattr(e, attr) for e in events) / 1e3  # ms, every op's own time
            mine = [{"scheme": name, "density": density, "layers": layers, "op": e.key,
                     "calls": e.count, "self_ms": getattr(e, attr) / 1e3, "all_ops_ms": total}
                    for e in events[:top]]
            rows += mine
            say(f"profile {name} d={density} L={layers}, {total:.1f} ms in all: " + "; ".join(
                f"{r['op']} {r['self_ms']:.1f} ms x{r['calls']}" for r in mine[:5]))
            del scheme, params, prof
            _free(device)
            break
    return rows


def selection(device: torch.device, sizes, densities, repeats: int) -> list[dict]:
    rows = []
    for n in sizes:
        try:
            x = torch.randn(n, device=device)  # [n] fp32 scores' source
        except torch.OutOfMemoryError:
            say(f"select n={n:.0e}: does not fit")
            continue
        for d in densities:
            k = round(d * n)
            # both time the |x| pass too: every sparse scheme selects on a magnitude
            for method, fn in (("torch.topk",
                                lambda x=x, k=k: torch.topk(x.abs(), k, sorted=False)),
                               ("threshold", lambda x=x, k=k: top_k_exact(x.abs(), k)),
                               ("banded", lambda x=x, k=k: top_k_indices(x.abs(), k))):
                try:
                    s = time_call(fn, device, repeats)
                except (torch.OutOfMemoryError, RuntimeError) as e:
                    say(f"select {method} n={n:.0e} d={d}: failed ({str(e)[:100]})")
                    s = None
                rows.append({"n": n, "density": d, "method": method, "s": s})
                if s is not None:
                    say(f"select {method} n={n:.0e} d={d}: {s*1e3:.2f} ms")
                if device.type == "cuda":
                    torch.cuda.empty_cache()
        x = None  # free the 4 GB before the next size
    return rows


def quantize(device: torch.device, n: int, repeats: int) -> list[dict]:
    rows = []
    for kind in ("quantize", "dequantize"):
        with torch.device(device):
            bench = KERNEL_BENCH[kind](n, device)
            s = time_call(bench, device, repeats)
        del bench
        rows.append({"kind": kind, "n": n, "s": s})
        say(f"{kind} n={n:.0e}: {s*1e3:.2f} ms")
    return rows


def environment(device: torch.device) -> dict:
    env = {"torch": torch.__version__, "python": sys.version.split()[0],
           "date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()), "device": str(device)}
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        env.update(gpu=props.name, sms=props.multi_processor_count,
                   memory_GB=props.total_memory / 1e9, cuda=torch.version.cuda,
                   nccl=".".join(map(str, torch.cuda.nccl.version())),
                   cudnn=torch.backends.cudnn.version(),
                   flash_sdp=torch.backends.cuda.flash_sdp_enabled())
    return env


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=None, help="write the results as JSON here")
    parser.add_argument("--quick", action="store_true",
                        help="tiny models and sizes: checks the script (CPU)")
    parser.add_argument("--parts", default="fwd_bwd,optimizer,select,quantize")
    args = parser.parse_args()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    parts = args.parts.split(",")
    known = ("fwd_bwd", "optimizer", "select", "quantize", "profile", "bits")
    if unknown := [p for p in parts if p not in known]:
        parser.error(f"--parts: unknown {', '.join(unknown)}; choose from {', '.join(known)}")
    if args.quick:
        models, opt_model, layers, sel, qn, reps = (
            (("tiny-llama", 2),), "tiny-llama", (1, 2, 4), (10**6,), 2**20, 2)
    else:
        # quantize: the multiple of its 2048-value block nearest 1e8
        models, opt_model, layers, sel, qn, reps = (
            FWD_BWD, "llama-1.8b", OPT_LAYERS, SELECT_N, 2048 * 48828, 5)
    result = {"environment": environment(device), "options": vars(args)}
    say(json.dumps(result["environment"]))

    def save() -> None:
        if args.out:
            with open(args.out, "w") as f:
                json.dump(result, f, indent=1)

    steps = {"fwd_bwd": lambda: fwd_bwd(device, models, reps),
             "optimizer": lambda: optimizer_steps(device, opt_model, OPTIMIZERS, layers, reps),
             "select": lambda: selection(device, sel, DENSITIES, 3),
             "quantize": lambda: quantize(device, qn, reps),
             "profile": lambda: op_profile(device, opt_model, PROFILED, layers),
             # Llama-1.8B's whole shard on one GPU is 1.8e9; 2^30 leaves room for the copies
             "bits": lambda: [bitmap_kernels(device, 2**20 if args.quick else 2**30, d, reps)
                              for d in DENSITIES]}
    for part in parts:
        t0 = time.perf_counter()
        try:
            result[part] = steps[part]()
        except Exception as e:  # one part failing must not lose the others' figures
            result[part] = {"error": f"{type(e).__name__}: {e}"}
            say(f"{part} failed: {type(e).__name__}: {e}")
        say(f"{part} took {time.perf_counter() - t0:.1f} s")
        save()
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
