"""The architecture as a test (issue 43; README "Architecture"): every import of the project,
at module level or inside a function, read with stdlib `ast`, must point down the ladder

    vocabulary <- profiles <- plan contract <- simulator   <- calibration <- reports <- cli
                                            <- runtime     <-

and no group of modules may import each other in a cycle, inside a folder or across folders.
The rooms below without torch must never import it (planning installs without torch).
"""

from __future__ import annotations

import ast
import sys
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("vocabulary", "profiles", "scape", "simulator", "calibration", "reports", "cli",
            "costmodel")

# room -> the rooms it may import (besides itself)
ALLOWED: dict[str, set[str]] = {
    "vocabulary": set(),
    "profiles": {"vocabulary"},
    "plan": {"vocabulary", "profiles"},
    "simulator": {"vocabulary", "profiles", "plan"},
    "runtime": {"vocabulary", "profiles", "plan"},
    "calibration": {"vocabulary", "profiles", "plan", "simulator", "runtime"},
    "reports": {"vocabulary", "profiles", "plan", "simulator", "runtime", "calibration"},
    "cli": {"vocabulary", "profiles", "plan", "simulator", "runtime", "calibration", "reports"},
    # the Python API: the commands' own defaults and option objects, as functions
    "costmodel": {"vocabulary", "profiles", "plan", "simulator", "runtime", "calibration",
                  "reports", "cli"},
}
# rooms a planning install (no torch) runs on
TORCH_FREE = ("vocabulary", "profiles", "plan", "simulator")


def room(module: str) -> str:
    """The room of a module: scape.plan* is the byte contract, the rest of scape/ the runtime."""
    if module == "scape.plan" or module.startswith("scape.plan."):
        return "plan"
    top = module.split(".")[0]
    return "runtime" if top == "scape" else top


@cache
def modules() -> dict[str, Path]:
    found = {}
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join(parts)] = path
    return found


def _resolve(name: str) -> str | None:
    """The project module `name` is, or lies in (a name imported from it), or None."""
    parts = name.split(".")
    for i in range(len(parts), 0, -1):
        if ".".join(parts[:i]) in modules():
            return ".".join(parts[:i])
    return None


@cache
def imports(module: str) -> dict[str, set[str]]:
    """What `module` imports: {"project": modules of the project, "external": top names}.
    `from X import a`: module X.a where a is a module, else module X (a is a name in it)."""
    path = modules()[module]
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    named: list[str] = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            named += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from the package, up level - 1
                up = package[: len(package) - node.level + 1]
                base = ".".join([*up, *([base] if base else [])])
            named += [f"{base}.{a.name}" if f"{base}.{a.name}" in modules() else base
                      for a in node.names]
    project, external = set(), set()
    for name in named:
        found = _resolve(name)
        if found is None:
            external.add(name.split(".")[0])
        elif found != module:
            project.add(found)
    return {"project": project, "external": external}


def upward_arrows() -> list[str]:
    bad = []
    for module in modules():
        for target in sorted(imports(module)["project"]):
            if room(target) != room(module) and room(target) not in ALLOWED[room(module)]:
                bad.append(f"{module} ({room(module)}) -> {target} ({room(target)})")
    return bad


def cycles() -> list[list[str]]:
    """Strongly connected groups of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in imports(v)["project"]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for module in modules():
        if module not in index:
            visit(module)
    return found


def test_the_walk_sees_the_project():
    """The walk finds every room and real arrows (a walk that saw nothing would pass)."""
    rooms = {room(m) for m in modules()}
    assert rooms == set(ALLOWED)
    assert "profiles" in imports("simulator.step.compute")["project"]
    assert "simulator.network.engine" in imports("simulator.network.collective")["project"]
    assert "torch" in imports("scape.adams")["external"]


def test_no_upward_arrow():
    assert upward_arrows() == []


# simulator/'s parts, each on a floor (../shared/simulator-layout.md): a part imports only parts
# on floors below its own (a module's own part aside)
SIMULATOR_FLOORS = {"network": 1, "layout": 1, "run": 1, "memory": 2, "step": 3, "planning": 4}


def simulator_upward_arrows() -> list[str]:
    bad = []
    for module in modules():
        if module.count(".") < 2 or not module.startswith("simulator."):
            continue
        part = module.split(".")[1]
        for target in imports(module)["project"]:
            if not target.startswith("simulator.") or target.count(".") < 2:
                continue
            other = target.split(".")[1]
            if other != part and SIMULATOR_FLOORS[other] >= SIMULATOR_FLOORS[part]:
                bad.append(f"{module} ({part}) -> {target} ({other})")
    return sorted(bad)


def test_simulator_parts_import_only_downward():
    """Every file of simulator/ sits in one of its parts, and the parts' imports point down."""
    flat = [m for m, path in modules().items() if m.startswith("simulator.")
            and m.count(".") == 1 and path.name != "__init__.py"]
    assert flat == [], f"files outside simulator/'s parts: {flat}"
    assert set(SIMULATOR_FLOORS) == {m.split(".")[1] for m in modules()
                                     if m.startswith("simulator.") and m.count(".") >= 1}
    assert simulator_upward_arrows() == []


def test_no_import_cycle():
    assert cycles() == []


def test_planning_rooms_never_import_torch():
    users = [m for m in modules() if room(m) in TORCH_FREE and "torch" in imports(m)["external"]]
    assert users == []


def test_vocabulary_is_a_leaf():
    for module in modules():
        if room(module) == "vocabulary":
            assert {room(t) for t in imports(module)["project"]} <= {"vocabulary"}


def test_the_checks_catch_what_they_look_for(monkeypatch):
    """An upward arrow and a cycle, planted, are found."""
    real = imports.__wrapped__

    def planted(module):
        found = real(module)
        if module == "profiles.models":  # profiles -> simulator: upward, and a cycle
            return {**found, "project": found["project"] | {"simulator.step.compute"}}
        if module == "simulator.network.topology":  # network -> step: a part's upward arrow
            return {**found, "project": found["project"] | {"simulator.step.simulate"}}
        return found

    monkeypatch.setattr(sys.modules[__name__], "imports", cache(planted))
    assert any("profiles.models" in arrow for arrow in upward_arrows())
    assert any("profiles.models" in group for group in cycles())
    assert simulator_upward_arrows() == [
        "simulator.network.topology (network) -> simulator.step.simulate (step)"]


def test_registries_hold_the_vocabulary():
    """The registries are keyed by exactly the shared names, in their order."""
    from scape.plan import SCHEMES
    from simulator.network.collectives import ALGORITHMS
    from vocabulary.names import ALGORITHM_NAMES, SCHEME_NAMES

    assert tuple(SCHEMES) == SCHEME_NAMES
    assert {op: tuple(algos) for op, algos in ALGORITHMS.items()} == ALGORITHM_NAMES


# torch hidden as a planning install lacks it: `import torch` raises ModuleNotFoundError
_NO_TORCH = "import sys; sys.modules['torch'] = None; from cli import app; app(sys.argv[1:])"
PLANNING = {
    "plan": ["plan", "-m", "llama-7b", "--tokens", "1e11", "-H", "dgx-h100", "--max-gpus", "16",
             "--workers", "1", "--top", "2", "--format", "csv"],
    "simulate": ["simulate", "-m", "llama-1.8b", "-H", "vista-gh200", "--gpus", "32",
                 "--scheme", "scape:0.99", "--format", "csv"],
    "compare": ["compare", "-m", "gpt-345m", "-H", "vista-gh200", "--gpus", "32", "--format",
                "csv"],
    "collective": ["collective", "-H", "dgx-h100", "--gpus", "8", "--op", "all_reduce",
                   "--sizes", "1MiB", "--format", "csv"],
    "report scaling": ["report", "scaling", "-m", "gpt-345m", "-H", "vista-gh200", "--quick",
                       "--out", "{out}"],
    "validate --external": ["validate", "--external", "scape-sc26", "--format", "csv"],
    "version": ["--version"],
}


def _without_torch(args, tmp_path):
    import subprocess

    args = [a.replace("{out}", str(tmp_path / "out")) for a in args]
    return subprocess.run([sys.executable, "-c", _NO_TORCH, *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)


def test_planning_commands_run_without_torch(tmp_path):
    for name, args in PLANNING.items():
        proc = _without_torch(args, tmp_path)
        assert proc.returncode == 0, (name, proc.stderr[-2000:])
        assert proc.stdout.strip() or name == "report scaling", name


def test_runtime_commands_say_which_extra_to_install(tmp_path):
    for args in (["train", "--model", "tiny-gpt", "--steps", "2"],
                 ["calibrate", "compute", "--out", str(tmp_path / "m")]):
        proc = _without_torch(args, tmp_path)
        assert proc.returncode == 2, proc.stderr
        assert "pip install 'scape-costmodel[train]'" in proc.stderr
        assert "Traceback" not in proc.stderr
