"""Activation recomputation policies: the named ones (vocabulary/names.py RECOMPUTE) and
Megatron-Core's selective recomputation of named modules, written `selective:mod1,mod2`.

Megatron-Core (megatron/core/transformer/transformer_config.py, `recompute_modules`, with
`--recompute-granularity selective --recompute-modules ...`) recomputes, per layer, the modules
it is given: `core_attn` (the attention core, its default), `layernorm` (the input and pre-MLP
norms), `mla_up_proj` (multi-head latent attention's up-projections and rotary embedding),
`mlp` (a dense layer's MLP), `moe` (a MoE layer's router, dispatch, experts and combine),
`moe_act` (the routed experts' activation function) and `shared_experts`. The named policy
`selective` is `selective:core_attn`; `selective-norm` is `selective:core_attn,layernorm`.
"""

from __future__ import annotations

from vocabulary.errors import UserError
from vocabulary.names import RECOMPUTE
from vocabulary.suggest import did_you_mean

MODULES = ("core_attn", "layernorm", "mla_up_proj", "mlp", "moe", "moe_act", "shared_experts")
PREFIX = "selective:"
# what DeepSeek-V3's Megatron recipes recompute before the whole layer (the modules whose
# tensors are largest: latent attention's up-projections, the MLPs, the MoE layers)
RECIPE_MODULES = ("mla_up_proj", "mlp", "moe")
# modules only a model with latent attention, or with experts, has
NEEDS = {"mla_up_proj": "mla", "moe": "moe", "moe_act": "moe", "shared_experts": "moe"}
# the named Megatron policies as module sets
NAMED = {"selective": frozenset({"core_attn"}),
         "selective-norm": frozenset({"core_attn", "layernorm"})}


def modules_of(policy: str) -> frozenset[str] | None:
    """The Megatron-Core modules a selective policy recomputes; None for the other policies
    (none, full, torchtitan's selective-op). The policy must be valid (`check`)."""
    if policy in NAMED:
        return NAMED[policy]
    if policy.startswith(PREFIX):
        return frozenset(policy[len(PREFIX):].split(","))
    return None


def with_modules(modules: str) -> str:
    """`selective:...` from a module list as Megatron's flag takes it (spaces or commas:
    `mla_up_proj mlp moe`), checked, in Megatron's order, each once."""
    names = [m for m in modules.replace(",", " ").split() if m]
    if not names:
        raise UserError("--recompute-modules needs at least one of " + ", ".join(MODULES))
    for name in names:
        if name not in MODULES:
            raise UserError(f"--recompute-modules: unknown module {name!r}"
                            f"{did_you_mean(name, MODULES)}; Megatron-Core's are "
                            + ", ".join(MODULES))
    return PREFIX + ",".join(m for m in MODULES if m in names)


def for_model(model, names) -> str:
    """`selective:...` of those of `names` the model has (a ModelProfile: latent attention's
    up-projections need its `mla`, the MoE modules its `moe`)."""
    return with_modules(" ".join(n for n in names
                                 if n not in NEEDS or getattr(model, NEEDS[n]) is not None))


def check(policy: str) -> str:
    """The policy, or a UserError naming the valid ones."""
    if policy in RECOMPUTE:
        return policy
    if isinstance(policy, str) and policy.startswith(PREFIX):
        return with_modules(policy[len(PREFIX):])
    raise UserError(f"--recompute must be one of {', '.join(RECOMPUTE)}, or {PREFIX}<modules> "
                    f"(Megatron-Core's {', '.join(MODULES)}), got {policy!r}"
                    f"{did_you_mean(str(policy), RECOMPUTE)}")


def recomputes(policy: str, module: str) -> bool:
    """Whether a policy runs a module's forward again in the backward: every module under full
    recomputation, the named ones under Megatron's selective."""
    if policy == "full":
        return True
    modules = modules_of(policy)
    return modules is not None and module in modules


def combine(policy: str, modules: str | None) -> str:
    """--recompute with --recompute-modules (None: not given): Megatron-Core's selective
    recomputation of those modules; modules with another policy are refused."""
    if modules is None:
        return check(policy)
    if policy not in ("none", "selective"):  # "none" is the flag's default: not given
        raise UserError(f"--recompute-modules names what Megatron's selective recomputation "
                        f"runs again: give it with --recompute selective, not {policy}")
    return with_modules(modules)
