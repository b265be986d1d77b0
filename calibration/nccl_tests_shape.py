"""What nccl-tests logs say of the system they ran on (issue 59): the GPU, from the rank
lines' device names, and the node's shape, from the ranks each host ran and the NICs NCCL's
network plugin listed, so a cluster shaped unlike a DGX is fitted as the nodes it has.

The GPU picks the hardware profile whose GPU tables (memory, kernels) the profile written keeps
and whose NCCL path is fitted (calibration/nccl_tests_fit.py). The node shape replaces that
profile's [node] and [nic] counts where the logs tell other ones: GPUs per node from the rank
lines of a run over several hosts (nccl-tests prints `#  Rank r Group g Pid p on HOST device d`
for every rank), NICs per node from `NET/IB : Using [0]mlx5_0:1/IB ...` (NCCL's InfiniBand and
RoCE transport) or `(found N nics)` (aws-ofi-nccl: EFA, Slingshot's cxi). What the logs do
not say is asked for (--gpu-from, --nics-per-node), never defaulted.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from profiles import UserError

# the profile a GPU family's logs are fitted into where several profiles hold that GPU: the
# vendor's own node (DGX), whose GPU tables and NCCL path the others copy or vary
PREFERRED_PREFIX = "dgx-"


def gpu_profile(devices: set[str], typed: str | None, per_node: int | None = None
                ) -> tuple[str, list[str]]:
    """The hardware profile whose GPU the logs ran on: `typed` (--gpu-from) where given, else
    the shipped profile of the device lines' GPU family, one whose nodes hold the logs'
    `per_node` GPUs first (a DGX one where several do, the shortest name otherwise); asked for
    where the logs name no device or no family a shipped profile holds. Returns (profile
    name, notes)."""
    if typed is not None:
        return typed, []
    from profiles import load_hardware
    from profiles.loader import names
    from vocabulary.gpu_names import family

    fams = {family(d) for d in devices} - {None}
    if not devices or not fams:
        said = f" ({', '.join(sorted(devices))})" if devices else ""
        raise UserError(f"--gpu-from NAME: the logs name no GPU this reads{said}; give the "
                        "hardware profile whose GPU they ran on (dgx-a100, dgx-h100, ...): "
                        "nccl-tests measures the network only, and the profile needs its GPU's "
                        "tables to load")
    fam = fams.pop()  # one system per log set: calibrate_from_logs refuses several devices
    held = [n for n in names("hardware") if family(load_hardware(n).gpu.model) == fam]
    if not held:
        raise UserError(f"--gpu-from NAME: the logs ran on {', '.join(sorted(devices))} "
                        f"({fam}), and no shipped hardware profile holds a {fam}: give one "
                        "that does (a profile file of your own: --gpu-from path/to/it.toml)")
    shaped = [n for n in held if load_hardware(n).node.gpus_per_node == per_node]
    pool = shaped or held
    dgx = [n for n in pool if n.startswith(PREFERRED_PREFIX)]
    name = (dgx or sorted(pool, key=len))[0]
    return name, [f"the logs' device lines name {', '.join(sorted(devices))}: fitted into "
                  f"{name}'s GPU tables and NCCL path (of {', '.join(held)}); --gpu-from "
                  "chooses another"]


def node_shape(logs) -> int | None:
    """GPUs per node the logs' rank lines tell: the ranks each host ran, in runs over several
    hosts (a run on one host tells only that a node has at least that many); None where no
    run spans hosts. Refused where runs or hosts disagree."""
    told = {log.ranks_per_node() for log in logs if log.spans_hosts}
    if None in told:
        uneven = next(log for log in logs if log.spans_hosts and log.ranks_per_node() is None)
        raise UserError(f"{uneven.path}: its hosts ran different numbers of ranks "
                        f"({', '.join(map(str, uneven.host_ranks))}): one node shape per "
                        "system; give logs whose hosts each ran the same number of GPUs")
    if len(told) > 1:
        raise UserError(f"the logs' runs put {' and '.join(map(str, sorted(told)))} ranks on "
                        "each host: calibrate one node shape at a time")
    return told.pop() if told else None


def shaped_profile(base, logs, gpus: int | None, nics_typed: int | None, scratch: Path
                   ) -> tuple[object, dict, list[str]]:
    """The base profile with the node shape the logs tell (`gpus` a node: `node_shape`; NICs
    per node from NCCL's lines or `nics_typed`): (profile, its TOML document, notes). The base
    itself where nothing differs. A node of another GPU count whose NICs neither the logs nor
    --nics-per-node give is refused: its NICs are not the base's to assume."""
    from profiles import load_hardware
    from profiles.files import read_toml
    from profiles.measured import dumps

    doc = read_toml(Path(base.path))
    listed = {log.nccl.nics for log in logs if log.nccl.nics is not None}
    if len(listed) > 1:
        raise UserError(f"NCCL listed {' and '.join(map(str, sorted(listed)))} NICs on the logs' "
                        "nodes: calibrate one node shape at a time")
    said = listed.pop() if listed else None
    if nics_typed is not None and said is not None and nics_typed != said:
        raise UserError(f"--nics-per-node {nics_typed}: NCCL's own lines in the logs list "
                        f"{said} NICs a node; leave --nics-per-node out or give {said}")
    nics = nics_typed if nics_typed is not None else said
    notes, changed = [], False
    if gpus is not None and gpus != base.node.gpus_per_node:
        if nics is None:
            raise UserError(f"--nics-per-node N: the logs' runs put {gpus} GPU(s) on each host, "
                            f"and {base.name}'s node has {base.node.gpus_per_node}; the logs "
                            "do not say how many NICs a node has (NCCL_DEBUG=INFO prints them)"
                            ": give --nics-per-node")
        if gpus > 1 and base.intra_node.kind == "none":
            raise UserError(f"the logs' runs put {gpus} GPUs on each host, and {base.name}'s "
                            "node has one GPU and no GPU-to-GPU link to take for theirs: give "
                            "--gpu-from a hardware profile of that node (its [intra_node] "
                            "link: NVLink or PCIe, with its source), e.g. a copy of "
                            f"{base.name}.toml with its [node] and [intra_node] set")
        doc["node"] = {**doc["node"], "gpus_per_node": gpus,
                       "source": "the logs' rank lines: each host ran "
                                 f"{gpus} rank(s) (was {base.name}'s {base.node.gpus_per_node})"}
        doc["node"].pop("nvlink_domain_gpus", None)
        doc["node"].pop("nvlink_domain_gpus_source", None)
        if gpus == 1:
            doc["intra_node"] = {"kind": "none", "bw_GBps": 0.0, "efficiency": 1.0,
                                 "latency_us": 0.0, "source": "one GPU per node (the logs' "
                                 "rank lines): no GPU-to-GPU tier inside the node"}
            if doc.get("nccl", {}).get("nvls"):  # NVLink SHARP needs the node's NVSwitch
                doc["nccl"] = {**doc["nccl"], "nvls": False}
        notes.append(f"node shape from the logs' rank lines: {gpus} GPU(s) per node (the "
                     f"{base.name} node has {base.node.gpus_per_node})")
        changed = True
    if nics is not None and nics != base.nic.nics_per_node:
        how = "--nics-per-node" if nics_typed is not None else "NCCL's network lines in the logs"
        doc["nic"] = {**doc["nic"], "nics_per_node": nics,
                      "source": f"{how}: {nics} NIC(s) a node (was {base.name}'s "
                                f"{base.nic.nics_per_node}); their rate and latency "
                                f"{base.name}'s ({doc['nic'].get('source', '')})"}
        notes.append(f"NICs per node from {how}: {nics} (the {base.name} node has "
                     f"{base.nic.nics_per_node})")
        changed = True
    # the run's NCCL version: before 2.22.3 its tuner sized AG/RS by one rank's share
    told = {log.rank_share() for log in logs} - {None}
    if len(told) == 1 and doc.get("nccl") is not None:
        share = told.pop()
        if share != bool(doc["nccl"].get("rank_share_sizes", False)):
            how = ("the NCCL version the logs print" if any(log.nccl.version for log in logs)
                   else "nccl-tests' old table layout (an `error` column: 2021 or before)")
            doc["nccl"] = {**doc["nccl"], "rank_share_sizes": share,
                           "rank_share_sizes_source": f"{how}: NCCL "
                           + ("before" if share else "2.22.3 or later, not before")
                           + " 2.22.3, whose tuner sizes all-gather and reduce-scatter by one "
                           "rank's share (src/misc/argcheck.cc; 2.22.3's "
                           "ncclFuncMaxSendRecvCount takes the whole)"}
            notes.append(f"NCCL {'before' if share else 'from'} 2.22.3 ({how}): its tuner "
                         "sizes all-gather and reduce-scatter by "
                         + ("one rank's share" if share else "the whole call"))
            changed = True
    if not changed:
        return base, doc, notes
    doc["name"] = f"{base.name}-as-logged"
    path = scratch / f"{doc['name']}.toml"
    path.write_text(dumps(doc))
    try:
        shaped = load_hardware(path)
    except Exception as exc:  # a shape the profile rules refuse (NICs not dividing GPUs)
        raise UserError(f"the logs' node shape ({gpus or base.node.gpus_per_node} GPUs, "
                        f"{nics} NICs) does not make a valid {base.name} node: "
                        f"{str(exc).replace(str(path), 'it')}") from None
    return shaped, doc, notes


def scratch_dir() -> tempfile.TemporaryDirectory:
    """A folder for the shaped profile while it is fitted (removed afterwards)."""
    return tempfile.TemporaryDirectory(prefix="scape-nccl-tests-")
