"""A real step's trace on a lent GPU, fitted and then predicted at another shape (issues 41
and 44): the runtime's GPT (scape/train/model.py) trains a model profile in bf16 autocast with
AdamW under torch.profiler (CUDA activity, the profiler's schedule marking each step); the
Kineto trace of one micro-batch size is fitted (`scape calibrate trace`), and the fitted
profile then prices the step at the other micro-batch size, whose own trace says how far off
it is: in sample on the first, held out on the second.

The hardware profile is the shipped one of the GPU's own family (dgx-h100 on an H100,
dgx-h200 on an H200, ...; `scape calibrate trace` refuses another GPU's), or --hardware.

Usage: python bench/gpu_trace.py [--model llama-500m] [--seq-len 2048] [--fit-mb 2]
       [--check-mb 4] [--hardware PROFILE] --out DIR
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def make_trace(model_name: str, micro_batch: int, seq_len: int, path: Path) -> None:
    """Three profiled steps (after one warm-up) of forward, backward and AdamW, as the runtime
    trains, written as a gzipped Kineto trace."""
    import torch
    from torch.profiler import ProfilerActivity, profile, schedule

    from profiles import load_model
    from scape.train.model import GPT

    torch.manual_seed(0)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    m = load_model(model_name)
    model = GPT(m).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    idx = torch.randint(0, m.arch.vocab_size, (micro_batch, seq_len), device=device)

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast(device, dtype=torch.bfloat16, enabled=device == "cuda"):
            loss = model(idx, idx)
        loss.backward()
        opt.step()

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    with profile(activities=activities, schedule=schedule(wait=0, warmup=1, active=3),
                 on_trace_ready=lambda p: p.export_chrome_trace(str(path))) as prof:
        for _ in range(4):
            step()
            if device == "cuda":
                torch.cuda.synchronize()
            prof.step()


def profile_of(device: str) -> str:
    """The shipped hardware profile whose GPU is the family of `device` (its nvidia-smi name),
    preferring a DGX profile; SystemExit naming the families shipped where none is."""
    from profiles import load_hardware, names
    from vocabulary.gpu_names import family

    shipped = sorted(names("hardware"), key=lambda n: (not n.startswith("dgx-"), n))
    models = {n: load_hardware(n).gpu.model for n in shipped}
    found = [name for name, model in models.items() if family(model) == family(device)]
    if not found:
        raise SystemExit(f"no shipped hardware profile holds a {device}; give --hardware "
                         f"(shipped: {', '.join(f'{n} ({m})' for n, m in models.items())})")
    return found[0]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="llama-500m")
    ap.add_argument("--seq-len", type=int, default=2048)
    ap.add_argument("--fit-mb", type=int, default=2)
    ap.add_argument("--check-mb", type=int, default=4)
    ap.add_argument("--hardware", default=None, help="default: the shipped profile of this "
                    "GPU's family")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    if a.hardware is None:
        import torch

        # the CPU runtime's trace names no GPU: it is fitted into dgx-h100's shapes, as before
        a.hardware = (profile_of(torch.cuda.get_device_name(0)) if torch.cuda.is_available()
                      else "dgx-h100")
        print(f"hardware profile {a.hardware}", flush=True)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    traces = {mb: out / f"trace-{a.model}-mb{mb}.json.gz" for mb in (a.fit_mb, a.check_mb)}
    for mb, path in traces.items():
        make_trace(a.model, mb, a.seq_len, path)
        print(f"wrote {path} ({path.stat().st_size:,} bytes)", flush=True)
    fit = subprocess.run([sys.executable, "-m", "cli", "calibrate", "trace",
                          str(traces[a.fit_mb]), "-H", a.hardware, "-m", a.model,
                          "--micro-batch", str(a.fit_mb), "--seq-len", str(a.seq_len),
                          "--out", "gpu-trace", "--format", "json",
                          # the runtime's GPT runs its elementwise ops one kernel each
                          "--eager"],
                         capture_output=True, text=True, cwd=REPO)
    print(fit.stdout or fit.stderr, flush=True)
    if fit.returncode:
        return fit.returncode
    from calibration.trace import read_trace
    from profiles import load_hardware, load_model
    from scape.plan import make_config
    from simulator.step.simulate import simulate_step
    from simulator.step.step_config import StepConfig

    hw, m = load_hardware("measured/gpu-trace"), load_model(a.model)
    result = {}
    for mb, path in traces.items():
        traced = statistics.median(s.compute_s for s in read_trace(path).steps)
        # the torchtitan stack: the simulator's eager layers, as the runtime's GPT runs them
        cfg = StepConfig(m, hw, 1, make_config("dense-adamw"), micro_batch=mb,
                         seq_len=a.seq_len, stack="torchtitan").validate()
        predicted = simulate_step(cfg).compute_s
        role = "in sample (fitted)" if mb == a.fit_mb else "held out"
        result[mb] = {"traced_s": traced, "predicted_s": predicted, "role": role,
                      "error_pct": 100 * (predicted / traced - 1)}
        print(f"micro-batch {mb}: traced {traced * 1e3:.2f} ms, predicted {predicted * 1e3:.2f} "
              f"ms ({result[mb]['error_pct']:+.1f}%), {role}")
    (out / "gpu-trace.json").write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
