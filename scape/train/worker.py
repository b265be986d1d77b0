"""Entry point of one rank under torchrun: `python -m scape.train.worker CONFIG.json`.

Errors end the rank with one line on stderr and exit code 1 (the launcher then ends the other
ranks); a peer that never arrives or dies mid-step surfaces as a timeout of the process group
(TrainConfig.timeout_s), never as a hang. Testing hook: SCAPE_FAULT_RANK and SCAPE_FAULT_STEP
make that rank exit abruptly at that step, as a crashed node would.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import fields
from pathlib import Path

from scape.adams import Hyper
from scape.plan import SchemeConfig
from scape.train.launch import describe_failure, write_rank_error
from scape.train.loop import TrainConfig, train
from scape.train.parent import die_with_parent


def config_from_dict(d: dict) -> TrainConfig:
    d = dict(d)
    d["scheme"] = SchemeConfig(**d["scheme"])
    d["hyper"] = Hyper(**d["hyper"])
    return TrainConfig(**{f.name: d[f.name] for f in fields(TrainConfig) if f.name in d})


def shutdown() -> None:
    """Leave together: no rank tears its connections down while a peer still uses them (a
    gloo peer that vanishes mid-operation can abort the other's process)."""
    import torch.distributed as dist

    if dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()


def main() -> int:
    die_with_parent()  # torchrun (or the netbed launcher) killed: this rank ends too
    cfg = config_from_dict(json.loads(Path(sys.argv[1]).read_text()))
    rank = int(os.environ.get("RANK", "0"))
    fault_rank = os.environ.get("SCAPE_FAULT_RANK")
    if fault_rank is not None and int(fault_rank) == rank:
        import scape.schemes.base as base

        fault_step, original = int(os.environ.get("SCAPE_FAULT_STEP", "1")), base.Scheme.step

        def dying_step(self, lr=None):
            if self.t + 1 >= fault_step:
                os._exit(17)  # no cleanup, no goodbye: a crashed node
            return original(self, lr)

        base.Scheme.step = dying_step
    try:
        train(cfg)
        shutdown()
    except Exception as exc:  # one line per rank, never a traceback
        if cfg.out:
            message = write_rank_error(cfg.out, rank, exc, cfg.timeout_s)
        else:
            message = describe_failure(exc, cfg.timeout_s)
        print(f"rank {rank}: {message}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
