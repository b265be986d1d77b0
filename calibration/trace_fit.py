"""Fit a hardware profile's compute to a traced step (issue 41, part 2: `scape calibrate
trace`).

The simulator prices forward and backward from the model's shapes (simulator/step/roofline.py):
GEMMs on a roofline at [roofline] gemm_peak_fraction of the GPU's peak, fused attention at
attn_fwd_fraction / attn_bwd_fraction, memory-bound kernels at the HBM bandwidth times
[compute] mem_efficiency. A trace (calibration/trace.py) gives the same three classes' busy
time per step, and the optimizer's. Each of the three is one monotone function of one constant,
so each constant is solved for (bisection on its logarithm) until the shapes model's time of
the class equals the trace's, the three in turn until they agree (the GEMMs' memory term reads
mem_efficiency); the optimizer's time becomes its kernel's cost per parameter. Nothing else of
the profile changes: the fitted profile is the base profile with those constants and their
source. In sample by construction: `simulate` on it gives the traced classes back; what it
predicts is every other shape (micro-batch, sequence, model), which a second trace checks
(bench/trace_holdout.py).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, replace

from calibration.trace import Trace
from profiles import HardwareProfile, ModelProfile, UserError
from profiles.hardware import Roofline
from simulator.step.roofline import head_times, layer_times
from vocabulary.gpu_names import same_family_or_refuse
from vocabulary.names import PER_STEP_KINDS

FITTED = ("gemm", "attention", "memory")
# where the base profile has no [roofline]: the constants the fit does not solve for are
# borrowed from this shipped profile's (its GEMM launch cost and roofline blend), said in the
# fitted profile; `sustained` is 1 there, the fitted fractions carrying the whole share
BORROWED_FROM = "dgx-h100"
BOUNDS = (1e-6, 1e3)  # a constant's factor over its base value the bisection searches


@dataclass(frozen=True)
class TraceFit:
    hardware: HardwareProfile  # the base profile with the fitted constants
    traced_s: dict[str, float]  # per class, the median over the trace's steps
    base_s: dict[str, float]  # per class, the base profile's shapes model
    fitted_s: dict[str, float]  # per class, the fitted profile's
    constants: dict[str, float]  # what was solved for
    steps: int
    spread_pct: float  # the steps' compute time, (max - min) / median


def classes_s(model: ModelProfile, hw: HardwareProfile, micro_batch: int, seq_len: int,
              micro_batches: int, attention: str = "flash", eager: bool = False
              ) -> dict[str, float]:
    """Seconds per step of GEMMs, attention and memory-bound kernels on one GPU, as the shapes
    model prices them (no tensor parallelism, no recomputation). `eager`: the layers'
    elementwise ops ran one PyTorch kernel each (roofline.layer_times)."""
    layer = layer_times(model, hw, micro_batch, seq_len, attention=attention, eager=eager).parts
    head = head_times(model, hw, micro_batch, seq_len).parts
    n = model.arch.n_layers
    return {c: micro_batches * (n * layer[c] + head[c]) for c in FITTED}


def _with_roofline(hw: HardwareProfile) -> HardwareProfile:
    if hw.roofline is not None:
        return hw
    from profiles import load_hardware

    lent = load_hardware(BORROWED_FROM).roofline
    return replace(hw, roofline=Roofline(
        gemm_peak_fraction=0.5, attn_fwd_fraction=0.5, attn_bwd_fraction=0.5,
        gemm_launch_us=lent.gemm_launch_us, gemm_blend=lent.gemm_blend, sustained=1.0,
        source=f"scape calibrate trace: gemm_launch_us and gemm_blend from the shipped "
               f"{BORROWED_FROM} profile's [roofline], sustained 1 (the base profile had no "
               "[roofline]; the fitted fractions carry the whole share)"))


def _set(hw: HardwareProfile, cls: str, value: float) -> HardwareProfile:
    r = hw.roofline
    if cls == "launch":  # every kernel's fixed cost (the host's dispatch where it dominates)
        return replace(hw, roofline=replace(r, gemm_launch_us=value))
    if cls == "gemm":
        return replace(hw, roofline=replace(r, gemm_peak_fraction=value))
    if cls == "attention":  # one factor on both passes: the trace does not split them
        ratio = r.attn_bwd_fraction / r.attn_fwd_fraction
        return replace(hw, roofline=replace(r, attn_fwd_fraction=value,
                                            attn_bwd_fraction=value * ratio))
    return replace(hw, compute=replace(hw.compute, mem_efficiency=value))


def _get(hw: HardwareProfile, cls: str) -> float:
    return {"gemm": hw.roofline.gemm_peak_fraction, "attention": hw.roofline.attn_fwd_fraction,
            "memory": hw.compute.mem_efficiency, "launch": hw.roofline.gemm_launch_us}[cls]


def _solve(hw: HardwareProfile, knob: str, cls: str, target_s: float, price
           ) -> HardwareProfile:
    """`hw` with the constant `knob` set so that the shapes model prices class `cls` at
    `target_s` (the launch cost raises the class's time, the rates lower it)."""
    base = _get(hw, knob) or 1.0
    lo, hi = math.log(base * BOUNDS[0]), math.log(base * BOUNDS[1])
    rises = knob == "launch"
    end = price(_set(hw, knob, math.exp(lo if rises else hi)))[cls]
    if end > target_s:
        raise UserError(f"the trace's {cls} time ({target_s * 1e3:.3f} ms a step) is below "
                        f"what {hw.name} can give at any rate (its launch costs and, for the "
                        "GEMMs, their memory traffic): give the hardware profile of the machine "
                        "traced, and the traced step's micro-batch, sequence and micro-batches "
                        "(--micro-batch, --seq-len, --grad-accum); layers that ran op by op "
                        "(plain PyTorch: scape train, torchtitan without torch.compile) move "
                        "more bytes in memory-bound kernels than fused ones: give --eager")
    for _ in range(100):
        mid = (lo + hi) / 2
        if (price(_set(hw, knob, math.exp(mid)))[cls] > target_s) != rises:
            lo = mid
        else:
            hi = mid
    return _set(hw, knob, math.exp((lo + hi) / 2))


def _fixed_point(hw: HardwareProfile, traced: dict, price, memory_knob: str) -> HardwareProfile:
    """The three classes solved in turn until they agree: memory on `memory_knob`, then the
    GEMMs' and attention's rates (each reads the launch cost, the GEMMs mem_efficiency)."""
    for _ in range(8):
        for knob, cls in ((memory_knob, "memory"), ("gemm", "gemm"),
                          ("attention", "attention")):
            hw = _solve(hw, knob, cls, traced[cls], price)
    return hw


def _refuse_above_peak(trace: Trace, base: HardwareProfile, hw: HardwareProfile) -> None:
    """A fitted share of a peak rate above 1 means the traced kernels ran faster than the
    profile's GPU can: said in the trace's terms, before any profile is written (the profile
    check would refuse it too, naming only the key)."""
    r = hw.roofline
    shares = {"GEMMs": ("[roofline] gemm_peak_fraction", r.gemm_peak_fraction * r.sustained,
                        f"{hw.gpu.peak_bf16_tflops:g} TFLOP/s bf16"),
              "attention": ("[roofline] attn_fwd_fraction / attn_bwd_fraction",
                            max(r.attn_fwd_fraction, r.attn_bwd_fraction) * r.sustained,
                            f"{hw.gpu.peak_bf16_tflops:g} TFLOP/s bf16"),
              "memory-bound kernels": ("[compute] mem_efficiency", hw.compute.mem_efficiency,
                                       f"{hw.gpu.hbm_bw_GBps:g} GB/s")}
    over = [f"its {what} at {share:.2f}x the peak ({peak}; {key})"
            for what, (key, share, peak) in shares.items() if share > 1]
    if over:
        raise UserError(f"{trace.path}: the traced step runs faster than {base.name}'s GPU "
                        f"({base.gpu.model}) can: {'; '.join(over)}. The trace comes from a "
                        "faster GPU, or its step was larger than --micro-batch, --seq-len and "
                        "--grad-accum say: give the hardware profile of the GPU traced and the "
                        "traced step's shape; nothing was written")


def fit_trace(trace: Trace, model: ModelProfile, base: HardwareProfile, micro_batch: int,
              seq_len: int, micro_batches: int = 1, attention: str = "flash",
              eager: bool = False) -> TraceFit:
    """The base profile's GEMM, attention and memory constants solved for the trace's median
    step, and its optimizer's cost per parameter (module docstring). `eager`: the traced layers
    ran their elementwise ops one PyTorch kernel each, so the memory class is priced with
    eager PyTorch's kernels and bytes (simulator/layout/shapes.py eager_extra): priced fused,
    their extra bytes would lower mem_efficiency, which the GEMMs' memory term reads too."""
    if trace.device:  # a trace of another GPU would fit its speed into this one's shares
        same_family_or_refuse(trace.device, f"-H {base.name}", base.gpu.model,
                              str(trace.path))
    if not trace.trains:
        raise UserError(f"{trace.path}: a forward pass only (no backward operator or kernel, no "
                        "optimizer step: an inference trace?): calibrate trace fits a training "
                        "step's forward and backward; profile a training step")
    traced = {c: statistics.median(s.busy_s[c] for s in trace.steps)
              for c in (*FITTED, "optimizer")}
    missing = [c for c in FITTED if traced[c] <= 0]
    if missing:
        raise UserError(f"{trace.path}: no {', '.join(missing)} time in its steps ({trace.source}"
                        "): a training step of a transformer runs all three; was the right "
                        "process traced, with the GPU activity on?")
    hw = _with_roofline(base)

    def price(h):
        return classes_s(model, h, micro_batch, seq_len, micro_batches, attention, eager)

    base_s = price(hw)
    # memory-bound kernels priced by their bandwidth (mem_efficiency); where no bandwidth
    # gives the trace's times (a host whose every operator pays a dispatch cost far above
    # its bytes: the CPU runtime), by the kernels' fixed cost instead
    try:
        hw, knob = _fixed_point(hw, traced, price, "memory"), "mem_efficiency"
    except UserError:
        try:
            hw, knob = (_fixed_point(_with_roofline(base), traced, price, "launch"),
                        "gemm_launch_us")
        except UserError as exc:
            if trace.source != "host operators":
                raise
            raise UserError(f"{trace.path}: a trace of the CPU runtime's operators: their "
                            "time is mostly each operator's dispatch (thousands a step), which "
                            "the shapes model, made for GPU kernels, does not count; "
                            f"{exc}") from None
    _refuse_above_peak(trace, base, hw)
    fitted = price(hw)
    computes = [s.compute_s for s in trace.steps]
    spread = 100 * (max(computes) - min(computes)) / statistics.median(computes)
    constants = {"gemm_peak_fraction": hw.roofline.gemm_peak_fraction,
                 "attn_fwd_fraction": hw.roofline.attn_fwd_fraction,
                 "attn_bwd_fraction": hw.roofline.attn_bwd_fraction,
                 knob: _get(hw, "memory" if knob == "mem_efficiency" else "launch")}
    if traced["optimizer"] > 0:
        ns = traced["optimizer"] / model.n_params * 1e9
        constants["optimizer_ns_per_element"] = ns
        kernels = dict(hw.kernels)
        for kind in ("optimizer_adamw", "optimizer_adams"):
            kernels[kind] = {**kernels.get(kind, {}), "fixed_us": 0.0, "ns_per_element": ns,
                             "residual_pct": 0.0}
        hw = replace(hw, kernels={**kernels, **IN_THE_TRACE})
    return TraceFit(hw, traced, base_s, fitted, constants, len(trace.steps), spread)


# the stack's once-a-step kernels besides the update (simulator/step/per_step.py) are in the
# traced step already: clipping's foreach norm and scale inside the optimizer class (its
# cost per parameter above), the gradient buffer's zeroing among the memory-bound kernels
# (the fitted memory rate); priced at nothing on the fitted profile, not counted twice
IN_THE_TRACE = {kind: {"fixed_us": 0.0, "ns_per_element": 0.0, "residual_pct": 0.0}
                for kind in sorted(PER_STEP_KINDS)}  # sorted: the written file's order


# the [roofline] fractions the step's sustained share multiplies (simulator/step/roofline.py)
SCALED = ("gemm_peak_fraction", "fp8_gemm_peak_fraction", "attn_fwd_fraction",
          "attn_bwd_fraction", "attn_flash2_fwd_fraction", "attn_flash2_bwd_fraction")


def _fold_sustained(roof: dict) -> None:
    """A fitted fraction above 1 under a sustained share below 1 (a traced GPU's kernels faster
    than the base profile's whole-step share allows: dgx-h200's 0.72 was fitted on steps of
    hundreds of GPUs at their power limit): every fraction times the share, and the share 1,
    which prices every kernel the same and keeps each fraction a share of its peak
    (_refuse_above_peak has refused products above 1)."""
    share = roof.get("sustained", 1.0)
    if share >= 1 or all(roof.get(k, 0) <= 1 for k in SCALED):
        return
    for key in SCALED:
        if key in roof:
            roof[key] *= share
    roof["sustained"] = 1.0
    roof["sustained_source"] = (f"1: the base profile's {share:g} folded into the fractions "
                                "(a fitted one was above 1; calibration/trace_fit.py "
                                "_fold_sustained), the same rates")


def profile_tables(fit: TraceFit, base_doc: dict, model: ModelProfile, trace: Trace,
                   name: str, command: str) -> dict:
    """The base profile's TOML tables with the fitted constants and their source: what
    `scape calibrate trace --out NAME` writes (a hardware profile; `simulate -H measured/NAME`
    reads it)."""
    doc = {k: (dict(v) if isinstance(v, dict) else v) for k, v in base_doc.items()}
    c = fit.constants
    src = (f"fitted by `{command}` on {trace.path.name} ({trace.source}, {fit.steps} steps, "
           f"median; the steps' compute spread {fit.spread_pct:.0f}%): each constant solved "
           "so that the shapes model prices the trace's class time (calibration/trace_fit.py)")
    roof = dict(doc.get("roofline", {}))
    if not roof:  # the roofline the fit ran on (`_with_roofline`)
        r = fit.hardware.roofline
        roof.update(gemm_launch_us=r.gemm_launch_us, gemm_blend=r.gemm_blend,
                    sustained=r.sustained, source=r.source)
    roof.update(gemm_peak_fraction=c["gemm_peak_fraction"],
                attn_fwd_fraction=c["attn_fwd_fraction"],
                attn_bwd_fraction=c["attn_bwd_fraction"])
    for key in ("gemm_peak_fraction", "attn_fwd_fraction", "attn_bwd_fraction"):
        roof[f"{key}_source"] = src
    _fold_sustained(roof)
    doc["roofline"] = roof
    if "mem_efficiency" in c:
        doc["compute"] = {**doc.get("compute", {}), "mem_efficiency": c["mem_efficiency"],
                          "mem_efficiency_source": src}
    else:  # the memory-bound kernels solved on their fixed cost
        roof.update(gemm_launch_us=c["gemm_launch_us"], gemm_launch_us_source=src)
    if "optimizer_ns_per_element" in c:
        kernels = dict(doc.get("kernels", {}))
        for kind in ("optimizer_adamw", "optimizer_adams"):
            kernels[kind] = {"fixed_us": 0.0, "ns_per_element": c["optimizer_ns_per_element"],
                             "residual_pct": 0.0}  # where from: the [roofline] sources
        doc["kernels"] = {**kernels, **IN_THE_TRACE}
    mfu = {k: v for k, v in doc.get("model_mfu", {}).items() if k != model.name}
    doc.pop("model_mfu", None)
    if mfu:  # the traced model is priced from its shapes now, the others as before
        doc["model_mfu"] = mfu
    doc["name"] = name
    doc["description"] = (f"{base_doc.get('name', 'base')} with its compute fitted to a traced "
                          f"step of {model.name} ({trace.path.name})")
    return doc
