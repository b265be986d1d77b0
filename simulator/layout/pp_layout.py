"""Megatron-Core's pipeline layout (--pipeline-model-parallel-layout; megatron/core/transformer/
pipeline_parallel_layer_layout.py `PipelineParallelLayerLayout`, read, not copied): which units
each virtual pipeline stage holds, "E" the embedding, "t" a decoder layer, "m" a multi-token-
prediction layer, "L" the output layer and loss; "|" ends a virtual stage, "*N" repeats the unit or
the parenthesised group before it ("Et*4|(t*4|)*14tmL": Megatron-Bridge's DeepSeek-V3 layout for
16 virtual stages). Virtual stage j runs on pipeline rank j mod PP as its model chunk j // PP
(Megatron's interleaved assignment, simulator/layout/pipeline.py stage_layers).

This tool prices the embedding on the first virtual stage and the output layer, the loss and the
MTP layers on the last (simulator/step/simulate.py), so a layout that puts them elsewhere is
refused; what a layout decides here is how many decoder layers each model chunk holds."""

from __future__ import annotations

import functools
import re

from profiles import UserError

UNITS = "EtmL"
_TOKEN = re.compile(r"\s*(?:([EtmL])|(\()|(\))|(\|)|\*\s*(\d+))")


def _expand(text: str) -> str:
    """The layout with every repetition written out ("(t|)*2" -> "t|t|")."""
    stack: list[list[str]] = [[]]
    last: list[str] | None = None  # the unit or group a following "*N" repeats
    pos = 0
    text = text.strip()
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None:
            raise UserError(f"--pipeline-model-parallel-layout: unexpected {text[pos:]!r} at "
                            f"character {pos + 1} (units {', '.join(UNITS)}, '|' between "
                            "virtual stages, '*N' to repeat, parentheses to group)")
        unit, opened, closed, bar, times = m.groups()
        pos = m.end()
        if unit or bar:
            last = [unit or "|"]
            stack[-1] += last
        elif opened:
            stack.append([])
            last = None
        elif closed:
            if len(stack) == 1:
                raise UserError("--pipeline-model-parallel-layout: ')' without its '('")
            last = stack.pop()
            stack[-1] += last
        else:
            if last is None or int(times) < 1:
                raise UserError("--pipeline-model-parallel-layout: '*N' repeats the unit or "
                                "group before it, N at least 1")
            stack[-1] += last * (int(times) - 1)
            last = None
    if len(stack) != 1:
        raise UserError("--pipeline-model-parallel-layout: a '(' is not closed")
    return "".join(stack[0])


@functools.lru_cache(maxsize=256)
def parse_layout(text: str, n_layers: int, pp: int, chunks: int, mtp_layers: int
                 ) -> tuple[tuple[int, ...], ...]:
    """Decoder layers of each model chunk, [stage][chunk], from a Megatron-Core layout string
    (module docstring), checked against the model and layout it prices."""
    stages = _expand(text).split("|")
    if stages and stages[-1] == "":
        stages.pop()  # a trailing "|" closes the last stage
    want = pp * chunks
    if len(stages) != want:
        raise UserError(f"--pipeline-model-parallel-layout: {len(stages)} virtual stages, "
                        f"the layout has {want} (PP {pp} x {chunks} chunks)")
    units = "".join(stages)
    count = [st.count("t") for st in stages]
    if sum(count) != n_layers:
        raise UserError(f"--pipeline-model-parallel-layout: {sum(count)} decoder layers "
                        f"('t'), the model has {n_layers}")
    if units.count("E") != 1 or "E" not in stages[0]:
        raise UserError("--pipeline-model-parallel-layout: one 'E' (the embedding), in the "
                        "first virtual stage, as this tool prices it")
    if units.count("L") != 1 or "L" not in stages[-1]:
        raise UserError("--pipeline-model-parallel-layout: one 'L' (the output layer and "
                        "loss), in the last virtual stage, as this tool prices it")
    mtp = units.count("m")
    if mtp != mtp_layers or (mtp and stages[-1].count("m") != mtp):
        raise UserError(f"--pipeline-model-parallel-layout: {mtp} 'm' units where "
                        f"--mtp-layers is {mtp_layers}; they go in the last virtual stage, "
                        "beside the loss, as this tool prices them")
    return tuple(tuple(count[c * pp + s] for c in range(chunks)) for s in range(pp))
