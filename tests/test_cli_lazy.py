"""The `scape` entry point loads only what the command asked for needs (issue 58 item 5:
`scape --version` took 0.40 s, importing every command's modules): cli.main."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PROBE = """
import sys
sys.argv = ["scape", *{args!r}]
import cli
try:
    cli.main()
except SystemExit:
    pass
loaded = sorted(m for m in ("pandas", "simpy", "simulator.planning.planner", "cli.simulate",
                            "cli.compare", "cli.plan", "cli.train", "torch", "numpy.ma",
                            "statistics", "concurrent.futures.process", "rich") if m in sys.modules)
print("LOADED", ",".join(loaded))
"""


def _loaded(*args: str) -> tuple[set[str], str]:
    out = subprocess.run([sys.executable, "-c", PROBE.format(args=list(args))], cwd=REPO,
                         capture_output=True, text=True, check=True).stdout
    line = next(x for x in out.splitlines() if x.startswith("LOADED"))
    return set(filter(None, line.split(" ", 1)[1].split(","))), out


def test_version_loads_no_command():
    loaded, out = _loaded("--version")
    assert out.startswith("scape ") and loaded == set()


# simulate and compare are separate modules: typer builds (inspects) every option of every
# command its app holds, so `scape simulate` pays for its own options only; and help is a short
# answer: no pandas (0.3 s of imports on a 2-core host), which a plan loads when it searches
@pytest.mark.parametrize("command, own, others", [
    ("plan", "cli.plan", {"cli.simulate", "pandas"}),
    ("simulate", "cli.simulate", {"cli.plan", "cli.compare"}),
    ("compare", "cli.compare", {"cli.simulate"})])
def test_a_command_loads_its_own_module_only(command, own, others):
    loaded, out = _loaded(command, "--help")
    assert "Usage" in out and own in loaded and not loaded & others and "torch" not in loaded


def test_help_and_a_misspelt_command_see_every_command():
    loaded, out = _loaded("--help")
    assert {"cli.simulate", "cli.plan", "cli.train"} <= loaded and "compare" in out
    assert "pandas" not in loaded


def test_simulate_prints_its_table_without_pandas():
    """pandas is 0.25 s of a `scape simulate` call: the table is printed without it; CSV
    (a frame) loads it."""
    step = ("simulate", "-m", "llama-1.8b", "-H", "dgx-h100", "--gpus", "16")
    loaded, out = _loaded(*step)
    assert "step_time" in out and "simpy" in loaded and "pandas" not in loaded
    # a few ms each that one step never needs: numpy 2's np.unique imports numpy.ma
    # (simulator/network/topology.py distinct), a process pool only runs batches in parallel
    assert not loaded & {"numpy.ma", "statistics", "concurrent.futures.process"}, loaded
    loaded, out = _loaded(*step, "--format", "csv")
    assert "step_time_s" in out and "pandas" in loaded


def test_compare_prints_its_table_without_pandas():
    """`scape compare`'s table is plain rows too (0.55 s with pandas, issue 58); its JSON is a
    frame and loads it."""
    line_up = ("compare", "-m", "llama-1.8b", "-H", "dgx-h100", "--gpus", "16", "--schemes",
               "dense-adamw,scape:0.99")
    loaded, out = _loaded(*line_up)
    assert "speedup" in out and "scape:0.99" in out and "pandas" not in loaded
    loaded, out = _loaded(*line_up, "--format", "json")
    assert '"speedup"' in out and "pandas" in loaded


# short answers that read no table of results: pandas (0.3 s of imports on a 2-core host) is
# loaded by the work that needs it (a plan's search, a report, a validation), never by help or
# a listing
@pytest.mark.parametrize("args", [("train", "--help"), ("report", "--help"),
                                  ("validate", "--help"), ("profiles", "list")])
def test_short_answers_load_no_pandas(args):
    loaded, out = _loaded(*args)
    assert out.strip() and "pandas" not in loaded and "torch" not in loaded, (args, loaded)


def test_a_plan_in_a_pipe_loads_no_progress_bar():
    """Where stderr is not a terminal (a script, CI) no bar is drawn: rich (70 ms of imports)
    is not loaded for it (cli/common.py _progress)."""
    loaded, out = _loaded("plan", "-m", "llama-1.8b", "-H", "dgx-h100", "--tokens", "1e9",
                          "--max-gpus", "8")
    assert "top plan" in out and "pandas" in loaded and "rich" not in loaded, loaded


def test_a_terminal_still_gets_its_progress_bar(monkeypatch):
    """On a terminal the bar is rich's, drawn on stderr; off one, a bar that does nothing."""
    import io

    from cli.common import _progress

    class Terminal(io.StringIO):
        def isatty(self):
            return True

    monkeypatch.setattr(sys, "stderr", io.StringIO())
    with _progress("quiet") as bar:
        bar.advance(bar.add_task("plans", total=None), 3)
    assert type(bar).__module__ == "cli.common"
    monkeypatch.setattr(sys, "stderr", Terminal())
    with _progress("simulating plans") as bar:
        task = bar.add_task("plans", total=None)
        bar.update(task, total=4)
        bar.advance(task, 4)
        assert type(bar).__module__.startswith("rich") and bar.tasks[0].completed == 4
