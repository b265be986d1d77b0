"""The checks of a hardware profile across its tables (profiles/hardware.py): values that
contradict each other, or that nothing would read. One rule a function, each with the tables
it reads, so that a rule runs only where those tables are sound (profiles/problems.py)."""

from __future__ import annotations

from typing import Any

from profiles.hardware_schema import MEASURED_ONLY
from profiles.problems import Problems
from vocabulary.errors import ProfileError
from vocabulary.names import COLLECTIVES, PROTOCOLS


def cross_check(path, t: dict[str, Any], measured: dict[str, Any], problems: Problems
                 ) -> None:
    """What no single table can check: values that contradict each other, or that nothing
    would read. Each rule runs where the tables it reads had no error of their own (`t` holds
    the sound ones; an optional table that is absent is None), so that a mistake is said
    once, by its own table, and the rule speaks once the table is mended."""
    for tables, rule in RULES:
        if problems.sound(*tables):
            with problems.gather():
                rule(path, _Tables(t), measured)


class _Tables(dict):
    """The sound tables; an absent one reads None."""

    def __getattr__(self, name: str) -> Any:
        return self.get(name)


def _mfu_or_roofline(path, t, measured) -> None:
    if t.compute.mfu is None and t.roofline is None:
        raise ProfileError(f"{path}: [compute] mfu: required unless the profile has a "
                           "[roofline] table (forward and backward from shapes)")
    if t.compute.mfu is not None and t.roofline is not None:  # it would be read by nothing
        raise ProfileError(f"{path}: [compute] mfu: a profile with a [roofline] table prices "
                           "forward and backward from shapes and never reads it; remove one "
                           "(an MFU for particular models goes in [model_mfu], which "
                           "[roofline] leaves in force)")


def _burst_read(path, t, measured) -> None:
    if t.nic.burst_bytes and not measured["collectives"]:  # it would be read by nothing
        raise ProfileError(f"{path}: [nic] burst_bytes: the token bucket of a netbed link, read "
                           "only with the collectives a netbed profile measured "
                           "([collectives.*], scape calibrate collectives --netbed); remove it")


def _roofline_pairs(path, t, measured) -> None:
    r = t.roofline
    if r is not None and (r.attn_flash2_fwd_fraction is None) != (
            r.attn_flash2_bwd_fraction is None):
        raise ProfileError(f"{path}: [roofline] attn_flash2_fwd_fraction and "
                           "attn_flash2_bwd_fraction: give both or neither")
    if r is not None and r.fp8_gemm_peak_fraction is not None and t.gpu.peak_fp8_tflops is None:
        raise ProfileError(f"{path}: [roofline] fp8_gemm_peak_fraction: a share of [gpu] "
                           "peak_fp8_tflops, which the profile does not give; give both")


def _nccl_proto(path, t, measured) -> None:
    n = t.nccl
    unknown = [p for p in (n.protocols if n else ()) if p not in PROTOCOLS]
    if unknown or (n and not n.protocols):
        raise ProfileError(f"{path}: [nccl] proto: a comma-separated list of LL, LL128 and "
                           f"Simple (NCCL_PROTO), got {n.proto!r}")


def _nccl_a2a_pair(path, t, measured) -> None:
    n = t.nccl
    if n is not None and (n.a2a_call_us is None) != (n.a2a_peer_us is None):
        raise ProfileError(f"{path}: [nccl] a2a_call_us and a2a_peer_us: an all-to-all's "
                           "latency across nodes is the two together; give both or neither")


def _intra_kind(path, t, measured) -> None:
    g, intra = t.node.gpus_per_node, t.intra_node
    if (intra.kind == "none") != (g == 1):
        raise ProfileError(
            f"{path}: [intra_node] kind: 'none' exactly when gpus_per_node = 1 "
            f"(got kind={intra.kind!r}, gpus_per_node={g})"
        )
    if intra.kind != "none" and intra.bw_GBps <= 0:
        raise ProfileError(f"{path}: [intra_node] bw_GBps: must be > 0 for kind {intra.kind!r}")


def _nvls(path, t, measured) -> None:
    n, kind = t.nccl, t.intra_node.kind
    if n is not None and n.nvls and (n.arch not in ("hopper", "blackwell") or kind != "nvlink"):
        raise ProfileError(f"{path}: [nccl] nvls: NVLink SHARP needs NVSwitch nodes of Hopper or "
                           f"later (arch {n.arch!r}, intra_node kind {kind!r}); set it false")


def _transport_read(path, t, measured) -> None:
    n, tr = t.nccl, t.transport
    if tr is not None and tr.message_us is not None and n is None:
        raise ProfileError(f"{path}: [transport] message_us: paid by the calls NCCL's tuner "
                           "prices, so it needs an [nccl] table; this profile has none")
    if tr is not None and tr.chunk_kib is not None and n is not None:
        raise ProfileError(f"{path}: [transport] chunk_kib: prices the Simple ring of profiles "
                           "without an [nccl] table; NCCL's model prices this one's steps")


def _nics_divide(path, t, measured) -> None:
    g, nics = t.node.gpus_per_node, t.nic.nics_per_node
    if g % nics and nics % g:
        raise ProfileError(
            f"{path}: [nic] nics_per_node: must divide gpus_per_node ({g}) or be a multiple of "
            f"it (several NICs per GPU), got {nics}"
        )


def _domain_whole_nodes(path, t, measured) -> None:
    """An NVLink domain is whole nodes: at least the node, a multiple of it."""
    g, d = t.node.gpus_per_node, t.node.nvlink_domain_gpus
    if d is not None and (d < g or d % g):
        near = sorted({max(g, d // g * g), -(-d // g) * g})
        raise ProfileError(
            f"{path}: [node] nvlink_domain_gpus: an NVLink domain is whole nodes of "
            f"gpus_per_node ({g}) GPUs, got {d}; nearest valid: "
            f"{' or '.join(map(str, near))}")


def _logs_whole(path, t, measured) -> None:
    """[measured] logs_* (what nccl-tests logs measured, scape calibrate nccl-tests) come
    together and read as scape collective reads them."""
    m = measured.get("measured", {})
    keys = ("logs_ops", "logs_gpus", "logs_min_bytes", "logs_max_bytes")
    if not any(k.startswith("logs_") for k in m):
        return
    where = f"{path}: [measured]"
    missing = [k for k in keys if k not in m]
    if missing:
        raise ProfileError(f"{where} {', '.join(missing)}: scape calibrate nccl-tests writes "
                           f"{', '.join(keys)} together; give all of them or none")
    ops = m["logs_ops"].split(",")
    if not set(ops) <= set(COLLECTIVES):
        raise ProfileError(f"{where} logs_ops: comma-separated collectives "
                           f"({', '.join(COLLECTIVES)}), got {m['logs_ops']!r}")
    for key in ("logs_gpus", "logs_nodes"):
        if key in m and not all(c.isdigit() and int(c) >= 1 for c in m[key].split(",")):
            raise ProfileError(f"{where} {key}: comma-separated counts of at least 1, got "
                               f"{m[key]!r}")
    if m["logs_min_bytes"] > m["logs_max_bytes"]:
        raise ProfileError(f"{where} logs_min_bytes: at most logs_max_bytes "
                           f"({m['logs_max_bytes']}), got {m['logs_min_bytes']}")


# (the tables a rule reads, the rule), in the order the checks ran before they were gathered
_OUTSIDE_PARTS = ("cuda_context_GiB", "workspace_GiB", "nccl_communicator_GiB")


def _memory_outside(path, t, measured) -> None:
    """What lives outside the allocator: its three parts, or the one lump; not both, and not
    some parts (the missing ones would silently count as nothing)."""
    m = t.memory
    if m is None:
        return
    given = [k for k in _OUTSIDE_PARTS if getattr(m, k) is not None]
    if m.context_GiB is not None and given:
        raise ProfileError(f"{path}: [memory] context_GiB is the lump of {', '.join(given)}: "
                           "give the parts (the NCCL buffers then follow the layout's "
                           "communicators) or context_GiB, not both")
    if m.context_GiB is None and len(given) < len(_OUTSIDE_PARTS):
        missing = ", ".join(k for k in _OUTSIDE_PARTS if k not in given)
        raise ProfileError(f"{path}: [memory] {missing}: required with "
                           f"{', '.join(given) or 'no lump'} (what lives outside PyTorch's "
                           "allocator: cuda_context_GiB, workspace_GiB and "
                           "nccl_communicator_GiB, or one context_GiB for all of it)")


def _power_wait(path, t, measured) -> None:
    """A GPU waiting draws less than at its board limit."""
    p = t.power
    if p is not None and p.gpu_wait_W >= p.gpu_max_W:
        raise ProfileError(f"{path}: [power] gpu_wait_W ({p.gpu_wait_W:g}) must be below "
                           f"gpu_max_W ({p.gpu_max_W:g}): a waiting GPU draws less than one "
                           "at its board limit")


RULES = (
    (("memory",), _memory_outside),
    (("power",), _power_wait),
    (("compute", "roofline"), _mfu_or_roofline),
    (("nic", *MEASURED_ONLY), _burst_read),
    (("roofline", "gpu"), _roofline_pairs),
    (("nccl",), _nccl_proto),
    (("nccl",), _nccl_a2a_pair),
    (("intra_node", "node"), _intra_kind),
    (("nccl", "intra_node"), _nvls),
    (("transport", "nccl"), _transport_read),
    (("node", "nic"), _nics_divide),
    (("node",), _domain_whole_nodes),
    (MEASURED_ONLY, _logs_whole),
)
