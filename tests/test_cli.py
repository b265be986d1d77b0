"""CLI smoke tests over every profile, and one-line errors with exit code 2."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from cli import app
from profiles import load_hardware, names

REPO = Path(__file__).resolve().parents[1]


def scape(capsys, *args: str) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as info:
        app(args=list(args))
    out, err = capsys.readouterr()
    return info.value.code, out, err


@pytest.mark.parametrize("name", names("hardware"))
def test_collective_json_over_every_hardware(capsys, name):
    g = load_hardware(name).node.gpus_per_node
    gpus = max(2, g) * 4
    code, out, _ = scape(capsys, "collective", "--hardware", name, "--gpus", str(gpus),
                         "--sizes", "1MiB,1GiB", "--format", "json")
    assert code == 0
    rows = json.loads(out)
    assert [r["size_bytes"] for r in rows] == [2**20, 2**30]
    for r in rows:
        assert r["time_s"] > 0 and r["algbw_GBps"] > 0 and r["busbw_GBps"] > 0
        assert r["algbw_GBps"] == pytest.approx(r["size_bytes"] / r["time_s"] / 1e9)


@pytest.mark.parametrize("op", ["all_reduce", "reduce_scatter", "all_gather", "broadcast",
                                "all_to_all"])
def test_collective_table_and_csv(capsys, op):
    code, out, _ = scape(capsys, "collective", "-H", "dgx-h100", "--gpus", "16", "--op", op,
                         "--sizes", "1KiB..1MiB")
    assert code == 0
    lines = [ln for ln in out.splitlines() if not ln.startswith("#")]
    assert lines[0].split() == ["size_bytes", "size", "time_us", "algbw_GBps", "busbw_GBps",
                                "algo", "proto", "held_out"]
    assert len(lines) == 1 + 11  # 1KiB doubling to 1MiB
    code, out, _ = scape(capsys, "collective", "-H", "dgx-h100", "--gpus", "16", "--op", op,
                         "--sizes", "1KiB,1MiB", "--format", "csv")
    assert code == 0 and out.splitlines()[0].startswith("op,algo,proto,ranks,size_bytes,time_s")


@pytest.mark.parametrize("kind_name", [f"hardware/{n}" for n in names("hardware")]
                         + [f"models/{n}" for n in names("model")])
def test_profiles_show_and_check_every_profile(capsys, kind_name):
    code, out, _ = scape(capsys, "profiles", "show", kind_name)
    assert code == 0 and "source" in out
    code, out, _ = scape(capsys, "profiles", "show", kind_name, "--format", "json")
    assert code == 0 and json.loads(out)["name"] == kind_name.split("/")[1]
    code, out, _ = scape(capsys, "profiles", "check", str(REPO / "profiles" / f"{kind_name}.toml"))
    assert code == 0 and out.startswith("ok:")


def test_profiles_show_finds_a_shipped_file_name_and_prints_only_filled_tables(capsys):
    """`dgx-a100.toml` names the shipped file wherever its kind keeps it; a table a shipped
    profile leaves to measurement ([measured], [kernels]) is left out, not printed empty; a
    measured profile shows its own."""
    code, out, err = scape(capsys, "profiles", "show", "dgx-a100.toml")
    assert code == 0, err
    assert "profiles/hardware/dgx-a100.toml" in out and "[nccl]" in out
    assert "[measured]" not in out and "[kernels]" not in out
    code, out, err = scape(capsys, "profiles", "show", "measured/netbed-1gbit")
    assert code == 0 and "[measured]" in out, err
    code, _, err = scape(capsys, "profiles", "show", "no-such.toml")
    assert code == 2 and "looked in" in err and "profiles/hardware" in err


def test_profiles_list(capsys):
    code, out, _ = scape(capsys, "profiles", "list", "--format", "json")
    assert code == 0
    rows = json.loads(out)
    embedded = {r["name"] for r in rows if r["kind"] != "measured"}
    assert embedded == set(names("hardware")) | set(names("model"))
    assert "measured/netbed-100mbit" in {r["name"] for r in rows if r["kind"] == "measured"}


BAD = [
    (["collective", "-H", "dgx-h100", "--gpus", "0"], "between 2 and 1,048,576 GPUs"),
    (["collective", "-H", "dgx-h100", "--gpus", "8", "--op", "foo"], "Invalid value for '--op'"),
    (["collective", "-H", "dgx-h100", "--gpus", "8", "--sizes", "-5"], "must be positive"),
    (["collective", "-H", "dgx-h100", "--gpus", "8", "--sizes", "1MiB,1048576"],
     "list 1MiB twice"),
    (["collective", "-H", "nope", "--gpus", "8"], "unknown hardware profile 'nope'"),
    (["collective", "-H", "dgx-h100", "--gpus", "12"], "multiple of the node size"),
    (["collective", "-H", "dgx-h100", "--gpus", "x"], "--gpus"),
    (["collective", "--gpus", "8"], "Missing option"),
    (["collective", "-H", "dgx-h100", "--gpus", "8", "--format", "xml"],
     "Invalid value for '--format'"),
    (["collective", "-H", "dgx-h100", "--gpus", "8", "--algo", "tree", "--op", "all_gather"],
     "no algorithm 'tree'"),
    (["profiles", "show", "gpt-9"], "unknown profile 'gpt-9'"),
    # calibration, validation and the testbed fail before any measuring starts
    (["validate", "--profile", "measured/nope"], "no such profile"),
    (["calibrate", "collectives", "--out", "x", "--nprocs", "1"], "at least 2"),
    (["calibrate", "collectives", "--out", "a/b"], "plain profile name"),
    (["calibrate", "collectives", "--out", "x", "--netbed", "rate=fast"], "--netbed rate"),
    (["calibrate", "collectives", "--out", "x", "--backend", "mpi"],
     "Invalid value for '--backend'"),
    (["calibrate", "compute", "--out", "x", "--model", "gpt-9"], "unknown model"),
    (["calibrate", "compute", "--out", "x", "--micro-batch", "0"], "--micro-batch"),
    (["netbed", "--netbed", "rate=1gbit", "--nprocs", "1"], "at least 2"),
    (["train", "--netbed", "delay=1ms"], "--netbed wants"),
]


@pytest.mark.parametrize(("args", "message"), BAD)
def test_user_errors_are_one_line_exit_2(capsys, args, message):
    code, _out, err = scape(capsys, *args)
    assert code == 2
    assert err.count("\n") == 1 and message in err and "Traceback" not in err


def test_profiles_check_malformed_file(capsys, tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text("[gpu\nmodel = 'x'\n")
    code, _, err = scape(capsys, "profiles", "check", str(bad))
    assert code == 2 and err.count("\n") == 1 and "not valid TOML" in err and str(bad) in err


@pytest.mark.parametrize("launcher", [[sys.executable, "-m", "cli"],
                                      [str(Path(sys.executable).parent / "scape")]])
def test_entry_points(launcher):
    if not Path(launcher[0]).exists():
        pytest.skip(f"{launcher[0]} not installed (run through make test)")
    ok = subprocess.run([*launcher, "collective", "-H", "vista-gh200", "--gpus", "32", "--sizes",
                         "1GiB", "--format", "json"], cwd=REPO, capture_output=True, text=True)
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)[0]["size_bytes"] == 2**30
    bad = subprocess.run([*launcher, "collective", "-H", "vista-gh200", "--gpus", "0"], cwd=REPO,
                         capture_output=True, text=True)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "Traceback" not in bad.stderr
    helped = subprocess.run([*launcher, "--help"], cwd=REPO, capture_output=True, text=True)
    for command in ("train", "netbed", "calibrate", "validate"):  # every command registered
        assert command in helped.stdout


def test_collective_beside_a_published_run(capsys):
    """--published puts a published nccl-tests case's time beside each simulated size (its
    sizes by default) with the error; a setting the run did not have is refused."""
    import csv

    with (REPO / "profiles" / "external" / "public-collectives.csv").open() as f:
        want = {int(r["size_bytes"]): float(r["time_us"]) for r in csv.DictReader(f)
                if r["case"] == "A1-nvls"}
    code, out, _ = scape(capsys, "collective", "-H", "dgx-h100", "--gpus", "8", "--published",
                         "A1-nvls", "--format", "json")
    assert code == 0
    rows = json.loads(out)
    assert {r["size_bytes"] for r in rows} == set(want)
    for r in rows:
        assert r["published_case"] == "A1-nvls" and r["published_us"] == want[r["size_bytes"]]
        assert r["error_pct"] == pytest.approx(100 * (r["time_s"] * 1e6 / r["published_us"] - 1))
    code, out, _ = scape(capsys, "collective", "-H", "dgx-h100", "--gpus", "8", "--published",
                         "A1-nvls", "--sizes", "1KiB,8MiB", "--format", "json")
    first, second = json.loads(out)
    assert first["published_us"] is None and second["published_us"] == want[8 << 20]
    # launched as the run was: one process drove the 8 GPUs (nccl-tests -g 8), so no call
    # ends before 8 launches
    assert all(r["gpus_per_process"] == 8 for r in rows)
    assert rows[0]["time_s"] >= 8 * load_hardware("dgx-h100").nccl.launch_us * 1e-6
    for args, message in (
            (["--gpus", "16"], "ran all_reduce on 8 GPUs of dgx-h100"),
            (["--gpus", "8", "--proto", "ll"], "no --proto"),
            (["--gpus", "8", "--gpus-per-process", "1"], "no --gpus-per-process"),
            (["--gpus", "8", "--algo", "ring"], "--algo auto")):
        code, _, err = scape(capsys, "collective", "-H", "dgx-h100", *args, "--published",
                             "A1-nvls")
        assert code == 2 and message in err
    code, _, err = scape(capsys, "collective", "-H", "dgx-h100", "--gpus", "8", "--published", "A9")
    assert code == 2 and "unknown published case 'A9'; known: A1-nvls" in err


def test_simulate_json_and_trace(capsys, tmp_path):
    trace = tmp_path / "step.json"
    code, out, _ = scape(capsys, "simulate", "-m", "llama-1.8b", "-H", "vista-gh200", "--gpus",
                         "32", "-s", "scape:0.99", "--micro-batch", "8", "--global-batch",
                         "1024", "--trace", str(trace), "--format", "json")
    assert code == 0
    (row,) = json.loads(out)
    for key in ("step_time_s", "compute_s", "exposed_comm_s", "bytes_per_gpu"):
        assert row[key] >= 0
    assert row["step_time_s"] >= row["compute_s"] and row["sparsity"] == 0.99
    assert json.loads(trace.read_text())["traceEvents"]


def test_attention_flash2_slows_an_h100_step_and_says_so(capsys):
    """`--attention flash2` prices FlashAttention-2's rates on H100 (slower than the profile's
    cuDNN kernel); the row carries the option it ran with."""
    rows = {}
    for kernel in ("flash", "flash2"):
        code, out, _ = scape(capsys, "simulate", "-m", "llama-7b", "-H", "dgx-h100", "--gpus", "8",
                             "-s", "dense-zero3", "--micro-batch", "2", "--attention", kernel,
                             "--format", "json")
        assert code == 0
        (rows[kernel],) = json.loads(out)
    assert rows["flash2"]["attention"] == "flash2"
    assert rows["flash2"]["compute_s"] > rows["flash"]["compute_s"]


def test_attention_is_refused_where_an_mfu_prices_the_step(capsys):
    """An MFU (given, or the profile's) has no attention kernel: --attention there is
    refused, not ignored; left out, the step runs and its row says flash."""
    for args, how in ((["-H", "dgx-h100", "--mfu", "0.5"], "mfu 0.5 (given)"),
                      (["-H", "vista-gh200"], "([compute])")):
        code, _, err = scape(capsys, "simulate", "-m", "llama-1.8b", "--gpus", "8", "-s",
                             "dense-adams", *args, "--attention", "unfused")
        assert code == 2 and "--attention unfused: forward and backward are priced by" in err
        assert how in err
        code, out, _ = scape(capsys, "simulate", "-m", "llama-1.8b", "--gpus", "8", "-s",
                             "dense-adams", *args, "--format", "json")
        assert code == 0 and json.loads(out)[0]["attention"] == "flash"


def test_sparsity_flag_reaches_the_scheme(capsys):
    rows = {}
    for s in ("0.9", "0.99"):
        code, out, _ = scape(capsys, "simulate", "-m", "gpt-345m", "-H", "dgx-h100", "--gpus", "16",
                             "-s", "scape-partitioned", "--sparsity", s, "--format", "json")
        assert code == 0
        (rows[s],) = json.loads(out)
    assert rows["0.9"]["sparsity"] == 0.9 and rows["0.99"]["sparsity"] == 0.99
    assert rows["0.99"]["bytes_per_gpu"] < rows["0.9"]["bytes_per_gpu"]


def test_sync_flag_reaches_the_scheme(capsys):
    """--sync momentum adds the error-feedback and decay kernels
    (scape/plan/scape_partitioned.py), same bytes."""
    rows = {}
    for sync in ("gradient", "momentum"):
        code, out, _ = scape(capsys, "simulate", "-m", "gpt-345m", "-H", "vista-gh200", "--gpus",
                             "32", "-s", "scape-partitioned:0.99", "--sync", sync, "--format",
                             "json")
        assert code == 0
        (rows[sync],) = json.loads(out)
    assert rows["momentum"]["compression_s"] > rows["gradient"]["compression_s"]
    assert rows["momentum"]["bytes_per_gpu"] == rows["gradient"]["bytes_per_gpu"]
    code, out, _ = scape(capsys, "compare", "-m", "gpt-345m", "-H", "vista-gh200", "--gpus", "32",
                         "--schemes", "dense-adams,scape-partitioned:0.99", "--sync", "momentum",
                         "--format", "json")
    scape_row = next(r for r in json.loads(out) if r["scheme"] == "scape-partitioned:0.99")
    assert code == 0 and scape_row["compression_s"] == pytest.approx(
        rows["momentum"]["compression_s"])


def test_density_warmup_gives_run_averages(capsys):
    """--density-warmup W averages SCAPE's step over a run (W steps unless --run-steps)."""
    args = ("compare", "-m", "gpt-345m", "-H", "vista-gh200", "--gpus", "32", "--schemes",
            "dense-adams,scape-partitioned:0.99", "--density-warmup", "1000", "--format",
            "json")
    code, out, _ = scape(capsys, *args)
    rows = {r["scheme"]: r for r in json.loads(out)}
    assert code == 0
    assert rows["dense-adams"]["run_speedup"] == 1.0
    assert rows["dense-adams"]["run_mean_step_s"] == rows["dense-adams"]["step_time_s"]
    sp = rows["scape-partitioned:0.99"]
    assert 1.0 < sp["run_speedup"] < sp["speedup"]
    code, out, _ = scape(capsys, *args, "--run-steps", "100000")  # 1% of the run warms up
    longer = {r["scheme"]: r for r in json.loads(out)}["scape-partitioned:0.99"]
    assert longer["run_speedup"] > sp["run_speedup"]
    code, out, _ = scape(capsys, "simulate", "-m", "gpt-345m", "-H", "vista-gh200", "--gpus", "32",
                         "-s", "scape-partitioned:0.99", "--density-warmup", "1000", "--format",
                         "json")
    (row,) = json.loads(out)
    assert code == 0 and row["run_steps"] == 1000
    assert row["run_mean_step_s"] == pytest.approx(sp["run_mean_step_s"])


def test_dense_steps_and_linear_warmup_in_simulate(capsys):
    """The Llama-500M runs' schedule: D dense steps then a linear warm-up; the run average
    covers D + W steps by default, costs more than the steady step (dense steps send all N)
    and the JSON says which schedule it ran."""
    code, out, _ = scape(capsys, "simulate", "-m", "llama-500m", "-H", "vista-gh200-socket",
                         "--gpus", "32", "-s", "scape:0.9", "--micro-batch", "16",
                         "--density-dense-steps", "200", "--density-warmup", "800",
                         "--density-shape", "linear", "--format", "json")
    (row,) = json.loads(out)
    assert code == 0 and row["run_steps"] == 1000
    assert row["density_dense_steps"] == 200 and row["density_shape"] == "linear"
    assert row["run_mean_step_s"] > row["step_time_s"]
    assert row["run_mean_bytes_per_gpu"] > row["bytes_per_gpu"]


def test_compare_has_speedup_over_baseline(capsys):
    code, out, _ = scape(capsys, "compare", "-m", "gpt-345m", "-H", "vista-gh200", "--gpus", "32",
                         "--schemes", "dense-adams,scape:0.99,topk:0.9", "--format", "json")
    assert code == 0
    rows = {r["scheme"]: r for r in json.loads(out)}
    assert rows["dense-adams"]["speedup"] == 1.0
    for r in rows.values():
        assert r["speedup"] == pytest.approx(rows["dense-adams"]["step_time_s"] / r["step_time_s"])


STEP_BAD = [
    (["simulate", "-m", "llama-1.8b", "-H", "vista-gh200", "--gpus", "32", "-s",
      "scape-partitioned", "--sparsity", "1.0"], "sparsity must be in [0, 1)"),
    (["simulate", "-m", "llama-1.8b", "-H", "dgx-h100", "--gpus", "33"],
     "multiple of the node size"),
    (["simulate", "-m", "llama-1.8b", "-H", "vista-gh200", "--gpus", "33", "--micro-batch", "8",
      "--global-batch", "1024"], "does not split"),
    (["simulate", "-m", "llama-1.8b", "-H", "dgx-h100", "--gpus", "16", "-s", "nope"],
     "unknown scheme 'nope'"),
    (["simulate", "-m", "llama-1.8b", "-H", "dgx-h100", "--gpus", "16", "--tp", "3"],
     "tensor-parallel degree must divide"),
    (["compare", "-m", "llama-1.8b", "-H", "dgx-h100", "--gpus", "16", "--schemes", "scape:x"],
     "cannot read 'scape:x'"),
    (["simulate", "-m", "gpt-9", "-H", "dgx-h100", "--gpus", "16"], "unknown model profile"),
    (["simulate", "-m", "gpt-345m", "-H", "dgx-h100", "--gpus", "16", "-s",
      "scape-partitioned:0.99", "--sync", "params"], "Invalid value for '--sync'"),
    (["compare", "-m", "gpt-345m", "-H", "dgx-h100", "--gpus", "16", "--run-steps", "0"],
     "--run-steps must be positive"),
    (["simulate", "-m", "gpt-345m", "-H", "dgx-h100", "--gpus", "16", "-s",
      "scape-partitioned:0.99", "--density-warmup", "-5"], "density warm-up must be >= 0"),
]


@pytest.mark.parametrize(("args", "message"), STEP_BAD)
def test_step_user_errors_are_one_line_exit_2(capsys, args, message):
    code, _out, err = scape(capsys, *args)
    assert code == 2
    assert err.count("\n") == 1 and message in err and "Traceback" not in err


@pytest.mark.parametrize("path", sorted((REPO / "profiles" / "measured").glob("*.toml")))
def test_committed_measured_profiles_load_and_simulate(capsys, path):
    """Each measured profile is a complete hardware profile the simulator runs on, with its
    calibrated collectives and the sweep it was fitted to beside it."""
    hw = load_hardware(f"measured/{path.stem}")
    assert hw.collectives and hw.kernels and hw.slowdown[0] == 1.0
    assert path.with_suffix(".collectives.csv").exists()

    def simulate(gpus: int):
        return scape(capsys, "simulate", "--model", "tiny-gpt", "--hardware",
                     f"measured/{path.stem}", "--gpus", str(gpus), "--scheme", "scape:0.99",
                     "--micro-batch", "16", "--format", "json")

    # as many ranks as it timed sharing the host (or the GPU): at most 2 here
    code, out, _ = simulate(min(2, len(hw.slowdown)))
    assert code == 0 and json.loads(out)[0]["step_time_s"] > 0
    if len(hw.slowdown) < 2:  # a profile that timed compute alone (the H100's) says so
        code, _, err = simulate(2)
        assert code == 2 and "--max-ranks 2" in err


def test_version(capsys):
    from importlib.metadata import version

    code, out, _ = scape(capsys, "--version")
    assert code == 0 and out.startswith(f"scape {version('scape-costmodel')} (torch ")


def test_memory_is_shown_refused_in_simulate_and_flagged_in_compare(capsys):
    """A step no GPU can hold: simulate refuses it with the breakdown; compare keeps the row
    with fits_memory false; rows that fit say how much they use."""
    code, _, err = scape(capsys, "simulate", "-m", "llama-70b", "-H", "dgx-h100", "--gpus", "8",
                         "-s", "dense-adams")
    # one NCCL communicator (data parallel only): 81,559 MiB less 1.5 GiB, over 1.05
    assert code == 2 and "needs 573.8 GB per GPU" in err and "79.9 GB usable" in err
    code, out, _ = scape(capsys, "compare", "-m", "llama-7b", "-H", "dgx-h100", "--gpus", "64",
                         "--micro-batch", "1", "--schemes", "dense-adams,scape:0.99",
                         "--format", "json")
    rows = {r["scheme"]: r for r in json.loads(out)}
    assert code == 0
    assert rows["dense-adams"]["fits_memory"] and not rows["scape:0.99"]["fits_memory"]
    # the authors' reducer without the distributed optimizer keeps AdamS's 8 B and a 4 B
    # residual per parameter on every GPU: 12 B x 6.74e9 parameters alone exceed 79.9 GB
    usable = rows["dense-adams"]["usable_memory_GB"]
    assert rows["scape:0.99"]["usable_memory_GB"] == usable == pytest.approx(79.9, abs=0.05)
    assert rows["scape:0.99"]["memory_GB"] > usable > rows["dense-adams"]["memory_GB"]
    code, out, _ = scape(capsys, "simulate", "-m", "llama-1.8b", "-H", "vista-gh200", "--gpus",
                         "32", "-s", "scape:0.99", "--micro-batch", "8", "--format", "json")
    (row,) = json.loads(out)
    assert code == 0 and row["fits_memory"] and row["memory_GB"] == pytest.approx(
        sum(row[f"memory_{k}_GB"] for k in ("weights", "grads", "optimizer", "scheme_state",
                                             "activations", "loss")))


def test_phase_meter_counts_phases_and_says_the_time_left(capsys):
    from cli.common import _phase_meter

    say = _phase_meter("calibrate compute", 3)
    for phase in ("matmul peak", "copy bandwidth", "kernel select"):
        say(phase)
    lines = capsys.readouterr().err.splitlines()
    assert lines[0].startswith("calibrate compute: [1/3] matmul peak (0:00 so far)")
    assert "[3/3] kernel select" in lines[2] and "left)" in lines[2]


def test_a_model_alias_is_named_with_its_profile(capsys):
    """`-m llama3.1-8b` prices llama3-8b (the same architecture) and the header says both
    names; the canonical name alone stays as it was."""
    code, out, _ = scape(capsys, "simulate", "-m", "llama3.1-8b", "-H", "dgx-h100", "--gpus",
                         "16", "--scheme", "dense-zero3")
    assert code == 0 and "# llama3.1-8b (profile llama3-8b): micro-batch" in out
    same, plain, _ = scape(capsys, "simulate", "-m", "llama3-8b", "-H", "dgx-h100", "--gpus",
                           "16", "--scheme", "dense-zero3")
    assert same == 0 and "# llama3-8b: micro-batch" in plain
    assert out.split("step_time_ms")[1].split("\n")[0] == plain.split("step_time_ms")[1].split(
        "\n")[0]
