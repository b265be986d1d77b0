"""The work a training stack does once a step besides the optimizer's update (issue 61 item 3):
what a small model at a large data-parallel degree cannot hide behind its short forward and
backward. Each is a memory-bound kernel priced by simulator/step/compute.py kernel_time
(bytes per element: vocabulary/names.py KERNEL_BYTES), run on the compute stream after the
gradients are reduced (`update`, before the optimizer's own kernel) or after the update
(`post`), and reported in StepResult.per_step_s with the update itself.

- The gradient's global norm, for clipping. Every stack priced here clips by default:
  Megatron-LM's --clip-grad defaults to 1.0 (megatron/training/arguments.py; the norm is
  megatron/core/optimizer/clip_grads.py get_grad_norm_fp32, one multi_tensor_l2norm over the
  fp32 main grads the rank updates), torchtitan's [training] max_norm to 1.0
  (torchtitan/config/job_config.py; torch.nn.utils.clip_grad_norm_ over the sharded
  gradients), and Megatron-DeepSpeed passes --clip-grad to DeepSpeed's BF16_Optimizer. Read
  over the gradient elements the rank's optimizer updates (its shard under ZeRO).
- The clip's scaling. PyTorch's clip_grads_with_norm_ multiplies every gradient by the clamped
  coefficient on every step ("avoids a `if clip_coef < 1:` conditional which can require a
  CPU <=> device synchronization"): torchtitan pays it. Megatron-LM's Apex path scales only
  when the coefficient is below 1 (clip_grad_by_total_norm_fp32), a step that clipped: not
  priced (training past its first steps rarely clips).
- Zeroing the gradient buffer. Megatron-Core's DistributedDataParallel.zero_grad_buffer, at the
  start of every train_step, zeroes each persistent gradient buffer (param_and_grad_buffer.py
  reset: grad_data.zero_()), the whole local buffer even under the distributed optimizer (its
  shard under Megatron-FSDP); DeepSpeed's BF16_Optimizer.clear_hp_grads zeroes its flat fp32
  gradients. torchtitan's optimizer.zero_grad sets gradients to None (PyTorch's default
  set_to_none=True): nothing to price.

A profile fitted on whole steps ([compute] step_fixed_ms, reports/external.py) already counts
all of this in its fitted optimizer and per-step constants: nothing is added there.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from scape.plan import ZERO_STAGE, Kernel, Plan

if TYPE_CHECKING:
    from simulator.step.step_config import StepConfig

# the stack's clip scales every gradient on every step (module docstring)
SCALES_EVERY_STEP = {"megatron": False, "torchtitan": True, "deepspeed": False}
# the stack keeps a persistent gradient buffer it zeroes every step
ZEROES_BUFFER = {"megatron": True, "torchtitan": False, "deepspeed": True}
NORM, SCALE, ZERO = "gradient norm (clipping)", "clip scale", "zero the gradient buffer"


def buffer_bytes(cfg: StepConfig) -> float:
    """Bytes of the gradient buffer one rank zeroes: its dense and expert gradients at the
    gradient dtype, a shard of each under ZeRO-2/3 (Megatron-FSDP's sharded buffers)."""
    dense = sum(size for size, _ in cfg.dense_tensors)
    experts = sum(cfg.expert_tensors)
    if cfg.scheme.scheme in ZERO_STAGE:  # gradients kept as shards
        dense, experts = dense / cfg.shard_ranks, experts / max(cfg.edp, 1)
    return (dense + experts) * cfg.plan_dtypes.grad_bytes


def with_step_work(cfg: StepConfig, plan: Plan) -> Plan:
    """`plan` with the stack's once-a-step kernels (module docstring) in every step kind."""
    if cfg.hardware.compute.step_fixed_ms is not None:
        return plan  # fitted on whole steps: counted in its constants
    zero = (Kernel(ZERO, "memset", buffer_bytes(cfg), "post"),) if ZEROES_BUFFER[cfg.stack] \
        else ()
    steps = []
    for w, s in plan.steps:
        # the elements the optimizer updates: the norm reads each of their gradients
        updated = sum(k.elements for k in s.kernels if k.kind.startswith("optimizer_"))
        clip = (Kernel(NORM, "grad_norm", updated, "update"),)
        if SCALES_EVERY_STEP[cfg.stack]:
            clip += (Kernel(SCALE, "clip_scale", updated, "update"),)
        steps.append((w, replace(s, kernels=(*clip, *s.kernels, *zero))))
    return replace(plan, steps=tuple(steps))


def describe(cfg: StepConfig) -> str:
    """What a step's per_step_s holds on `cfg`'s stack and profile, for a reader of it."""
    if cfg.hardware.compute.step_fixed_ms is not None:
        return (f"the optimizer update and {cfg.hardware.name}'s fitted fixed work "
                f"({cfg.hardware.compute.step_fixed_ms:g} ms)")
    parts = ["the optimizer update", f"the {NORM}"]
    if SCALES_EVERY_STEP[cfg.stack]:
        parts.append(f"the {SCALE}")
    if ZEROES_BUFFER[cfg.stack]:
        parts.append(f"zeroing the gradient buffer ({buffer_bytes(cfg) / 1e9:.2f} GB)")
    return ", ".join(parts) + f", as the {cfg.stack} stack runs them"
