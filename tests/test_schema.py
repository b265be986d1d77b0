"""One schema across formats (issue 42): every command that prints results, run in table, CSV
and JSON. CSV and JSON carry the same columns in the same order and the same rows; every table
column is one of them, under its own name or the name of the unit it is shown in
(reports/schema.py: step_time_s as step_time_ms); every column the table does not show is named
in its header or in its closing "also in --format csv and json" line.

Not run here: `calibrate collectives` and `compute` (they time ranks for minutes; their tables
go through the same render)."""

from __future__ import annotations

import csv
import io
import json
import re
import shutil
from pathlib import Path

import pytest

from reports.schema import explained, left_out
from tests.test_cli import scape
from tests.trace_util import kineto, write

REPO = Path(__file__).resolve().parents[1]

SIMULATE = ("simulate", "-m", "gpt-345m", "-H", "dgx-h100", "--gpus", "16", "-s", "scape:0.99",
            "--density-warmup", "100")
COMMANDS = {
    "simulate": SIMULATE,
    "compare": ("compare", "-m", "gpt-345m", "-H", "vista-gh200", "--gpus", "32",
                "--density-warmup", "100"),
    "collective": ("collective", "-H", "dgx-h100", "--gpus", "16", "--sizes", "64KiB,16MiB"),
    "collective-published": ("collective", "-H", "dgx-h100", "--gpus", "8", "--published",
                             "A1-nvls", "--sizes", "1MiB,2MiB"),
    "plan": ("plan", "-m", "gpt-345m", "--tokens", "1e10", "-H", "dgx-h100,dgx-a100",
             "--max-gpus", "16", "--top", "4", "--workers", "1"),
    "profiles-list": ("profiles", "list"),
    "validate-external": ("validate", "--external", "scape-sc26"),
    "reproduce": ("reproduce",),
    "calibrate-trace": ("calibrate", "trace", "TRACE", "-H", "dgx-h100", "-m", "llama-1.8b",
                        "--micro-batch", "1", "--seq-len", "2048"),
    "train": ("train", "--steps", "3", "--nprocs", "2"),
    "calibrate-refit": ("calibrate", "refit", "--profile", "measured/again"),
}
SHIPPED_SWEEP = REPO / "profiles" / "measured" / "netbed-1gbit"  # a profile with its sweep
# they also write files: --out a temporary folder (calibrate trace: a profile's name)
WRITES = {"validate-external", "reproduce", "train", "calibrate-trace"}


def _run(capsys, tmp_path, name, fmt):
    args = list(COMMANDS[name])
    if "TRACE" in args:  # a Kineto-shaped trace of a step (tests/trace_util.py)
        trace = write(tmp_path / "step.json", kineto({"gemm": 0.2, "attention": 0.03,
                                                      "memory": 0.05, "optimizer": 0.004}))
        args[args.index("TRACE")] = str(trace)
    if name == "calibrate-refit":  # a copy of a shipped measured profile and its sweep
        folder = tmp_path / "profiles" / "measured"
        folder.mkdir(parents=True, exist_ok=True)
        text = SHIPPED_SWEEP.with_suffix(".toml").read_text()
        (folder / "again.toml").write_text(re.sub(r'(?m)^name = .*$', 'name = "again"', text))
        shutil.copy(SHIPPED_SWEEP.with_suffix(".collectives.csv"),
                    folder / "again.collectives.csv")
    if name == "calibrate-trace":
        args += ["--out", f"traced-{fmt}"]
    elif name in WRITES:
        args += ["--out", str(tmp_path / fmt)]
    code, out, err = scape(capsys, *args, "--format", fmt)
    assert code == 0, err
    return out


def _table(out: str, name: str) -> tuple[list[str], str]:
    """The table's column names (simulate's: the first word of each value line; the others:
    the line above their first row), and every comment line of the output."""
    lines = out.splitlines()
    comments = "\n".join(line for line in lines if line.startswith("#"))
    body = [line for line in lines if line.strip() and not line.startswith("#")]
    if name in ("simulate", "train"):
        return [line.split()[0] for line in body], comments
    # a table wider than 100 columns goes on in blocks a blank line apart, each with its own
    # header led by the same column and as many rows; another table (validate's memory) is not
    blocks = [b.splitlines() for b in "\n".join(
        line for line in lines if not line.startswith("#")).strip().split("\n\n")]
    same = [b for b in blocks if len(b) == len(blocks[0]) and b[0].split()[0] ==
            blocks[0][0].split()[0]]
    return list(dict.fromkeys(c for b in same for c in b[0].split())), comments


def _replay_launch(monkeypatch) -> None:
    """`scape train`'s launcher runs the ranks the first time and returns that run's summary
    after: the formats are a rendering of one summary, and two more 2-rank runs cost 16 s."""
    import scape.train.launch as launcher

    runs: list[dict] = []

    def launch(*args, **kwargs):
        if not runs:
            runs.append(real(*args, **kwargs))
        return runs[0]

    real = launcher.launch  # cli/train.py imports it from its module when it runs
    monkeypatch.setattr(launcher, "launch", launch)


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.dist) if n == "train"
                                  else n for n in sorted(COMMANDS)])
def test_table_csv_and_json_carry_one_schema(capsys, tmp_path, monkeypatch, name):
    monkeypatch.setenv("SCAPE_PROFILE_DIR", str(tmp_path / "profiles"))
    if name == "train":  # one real run (JSON); CSV and table print that run's summary again
        _replay_launch(monkeypatch)
    rows = json.loads(_run(capsys, tmp_path, name, "json"))
    reader = csv.reader(io.StringIO(_run(capsys, tmp_path, name, "csv")))
    header, *body = list(reader)
    assert rows and header == list(rows[0]), (name, set(header) ^ set(rows[0]))
    assert len(body) == len(rows) and all(list(r) == header for r in rows)
    shown, comments = _table(_run(capsys, tmp_path, name, "table"), name)
    assert [c for c in shown if not explained(c, header)] == [], name
    assert left_out(header, shown, comments) == [], name
