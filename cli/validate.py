"""`scape validate`: measured against predicted."""

from __future__ import annotations

import sys
from pathlib import Path

import typer

from cli.app import app
from cli.common import NETBED_HELP, SHARE_GPU_HELP, BackendChoice, Format3, _netbed, _rank_counts
from cli.outputs import out_folder, output_file
from profiles import UserError, load_hardware, load_model
from profiles.loader import write_checked
from reports.roles import line, role_lines
from reports.tables import check_format, render
from scape.train.devices import gpu_sharing
from simulator.planning.compare import (
    parse_scheme,
)
from vocabulary.atomic import to_csv_atomic
from vocabulary.names import VALIDATE_SCHEMES
from vocabulary.units import parse_names


@app.command("validate")
def validate_cmd(
    profile: str = typer.Option(None, "--profile",
                                help="measured/NAME (from scape calibrate); with --external: "
                                     "the cluster the data came from (default vista-gh200)"),
    external: str = typer.Option(None, "--external",
                                 help="predict a published data set instead of running: "
                                      "NAME under profiles/external/ (scape-sc26)"),
    schemes: str = typer.Option(None, "--schemes",
                                help="comma-separated NAME[:VALUE] [default: "
                                     + ",".join(VALIDATE_SCHEMES) + "]"),
    nprocs: str = typer.Option(None, "--nprocs", help="ranks, e.g. 3 or 2,3 [default: 2,3]"),
    netbed: str = typer.Option(None, "--netbed",
                               help=NETBED_HELP + "; default: the profile's own"),
    backend: BackendChoice = typer.Option(None, "--backend",
                                          help="gloo|nccl: the runs' backend [default: the one "
                                               "the profile's collectives were measured with]"),
    share_gpu: bool = typer.Option(None, "--share-gpu", help=SHARE_GPU_HELP),
    steps: int = typer.Option(None, "--steps",
                              help="training steps per run (median taken) [default: 30]"),
    rounds: int = typer.Option(None, "--rounds", help="run every scheme this many times, "
                               "interleaved; medians over rounds are compared [default: 1]"),
    probe: bool = typer.Option(None, "--probe-compute/--no-probe-compute",
                               help="time forward/backward again before each run and the "
                                    "kernels once a round (CPU hosts drift, and a profile may "
                                    "come from another host); collectives stay as calibrated "
                                    "[default: probe-compute]"),
    model: str = typer.Option(None, "--model", help="default: the profile's calibrated model"),
    micro_batch: int = typer.Option(None, "--micro-batch", help="default: the calibrated one"),
    out: str = typer.Option(None, "--out", help="folder for CSV, JSON and PNG; refused where "
                                                "it holds a measured validation [default: "
                                                "out/validate/NAME, or NAME-2, NAME-3, ... "
                                                "where that holds one]"),
    write_profile: str = typer.Option(None, "--write-profile",
                                      help="with --external: also write the fitted cluster "
                                           "as a hardware profile TOML here"),
    fmt: Format3 = typer.Option("table", "--format", help="table|csv|json"),
):
    """Run the real optimizer per scheme, simulate the same step from the profile, compare;
    or, with --external, fit on a published data set's dense rows and predict the rest."""
    from reports import validate as v

    check_format(fmt)
    if external is not None:
        run_only = {"--schemes": schemes, "--nprocs": nprocs, "--netbed": netbed,
                    "--backend": backend, "--share-gpu": share_gpu, "--steps": steps,
                    "--rounds": rounds, "--probe-compute": probe,
                    "--model": model, "--micro-batch": micro_batch}
        given = [flag for flag, value in run_only.items() if value is not None]
        if given:
            raise UserError(f"{', '.join(given)}: options of a validation run, not of "
                            "--external (a published data set is predicted, nothing runs)")
        _validate_external(external, profile, out, fmt, write_profile)
        return
    schemes = ",".join(VALIDATE_SCHEMES) if schemes is None else schemes
    nprocs = "2,3" if nprocs is None else nprocs
    steps = 30 if steps is None else steps
    rounds = 1 if rounds is None else rounds
    if write_profile is not None:
        raise UserError("--write-profile goes with --external (a fit to publish)")
    if profile is None:
        raise UserError("give --profile measured/NAME (from scape calibrate) or --external NAME")
    hw = load_hardware(profile)
    v.check_profile_complete(hw.path)
    backend, share_gpu = _backend_of(hw, None if backend is None else str(backend), share_gpu)
    # the probe re-times the CPU testbed's forward/backward; ranks on GPUs are not that
    if probe and backend == "nccl":
        raise UserError("--probe-compute re-times a CPU testbed's forward and backward; NCCL "
                        "ranks run on GPUs: leave it out with --backend nccl")
    probe_typed, probe = probe, (backend == "gloo") if probe is None else probe
    if steps < 3:
        raise UserError(f"--steps must be at least 3 for a median, got {steps}")
    if not 1 <= rounds <= MAX_ROUNDS:
        raise UserError(f"--rounds must be between 1 and {MAX_ROUNDS}, got {rounds}")
    if probe_typed and not hw.slowdown:
        raise UserError(f"--probe-compute: {hw.name} has no [concurrency] slowdown (ranks "
                        "sharing one host's cores) to probe against; leave it out")
    probe = probe and bool(hw.slowdown)  # a host shared by ranks: a CPU testbed
    worlds = _rank_counts(nprocs)
    from scape.netbed import NetbedSpec, check_available
    from scape.train.launch import check_backend

    recorded = hw.measured.get("network_netbed", "")
    measured_on = NetbedSpec.recorded(recorded, hw.name) if recorded else None
    if netbed is not None and measured_on is None:
        # a loopback (or cluster) profile predicts its own links, not a shaped one
        where = ("over loopback" if recorded.startswith("none") else
                 f"on {recorded}" if recorded else "without a netbed")
        raise UserError(f"--netbed {netbed}: {hw.name} was measured {where}, not on a shaped "
                        f"link; calibrate a profile with --netbed {netbed} and validate that "
                        "one")
    spec = measured_on if netbed is None else _netbed(netbed)
    try:  # on the link the runs will use: the typed netbed, else the profile's own
        check_backend(backend, max(worlds), spec, share_gpu)
    except UserError as exc:  # say why this backend: the profile's (gloo would not test it)
        reason = str(exc).removesuffix("; use --backend gloo")
        raise UserError(f"{hw.name}'s collectives were measured with {backend}"
                        + (" on ranks sharing GPUs" if share_gpu else "")
                        + f", and its runs need that here: {reason}") from None
    if measured_on is not None and str(spec) != str(measured_on):
        # the prediction is the profile's: a run on another link would not test it
        raise UserError(f"--netbed {netbed}: {hw.name} was measured on {recorded}; validate it "
                        f"there (leave --netbed out), or calibrate a profile on {netbed}")
    typed_model = model is not None
    model = hw.measured.get("compute_model", "tiny-gpt") if model is None else model
    if micro_batch is None:
        micro_batch = int(hw.measured.get("compute_micro_batch", 16))
    elif micro_batch < 1:
        raise UserError(f"--micro-batch must be at least 1, got {micro_batch}")
    try:
        load_model(model)
    except UserError as exc:  # the profile's model, not one typed: say whose it is
        if typed_model:
            raise
        raise UserError(f"profile {hw.name}: [measured] compute_model {model!r}: {exc}; give "
                        "--model") from None
    configs = [(s, parse_scheme(s)) for s in parse_names(schemes, "--schemes")]
    if netbed is None and measured_on is not None:  # the runs go on the profile's own netbed
        check_available(f"validate a profile measured without one ({hw.name} was measured on "
                        f"{recorded})")
    dest = _measurement_folder(out, f"out/validate/{Path(hw.path).stem}")
    for world in worlds:  # fail fast, before any run
        for _, cfg in configs:
            v.predict(hw, model, cfg, world, micro_batch)
            v.check_runnable(model, cfg, world, micro_batch, steps, backend)
    per_round = v.run(hw, model, configs, worlds, micro_batch, steps, rounds, probe, spec, dest,
                      say=lambda line: print(line, file=sys.stderr, flush=True),
                      backend=backend, share_gpu=share_gpu)
    to_csv_atomic(per_round, dest / "validate.rounds.csv", index=False)
    df = v.aggregate(per_round)
    files = v.save(df, dest, {"profile": hw.path, "model": model, "micro_batch": micro_batch,
                              "steps": steps, "rounds": rounds, "probe_compute": probe,
                              "netbed": str(spec) if spec else None, "backend": backend,
                              "share_gpu": share_gpu,
                              "gpu_sharing": gpu_sharing() if share_gpu else None})
    stats = v.summarize(df)
    if fmt == "json":  # each row says where its measurement was saved (NAME-2, ...)
        print(render(df.assign(out=str(dest)), "json"))
        return
    header = (f"{model}, micro-batch {micro_batch}, {steps} steps per run, profile {hw.path}\n"
              f"median |error| {stats['median_abs_error_pct']:.1f}%, max "
              f"{stats['max_abs_error_pct']:.1f}% over {stats['n']} runs"
              + (f"; the rounds' measurements of a run spread by a median "
                 f"{stats['median_round_spread_pct']:.1f}%, max "
                 f"{stats['max_round_spread_pct']:.1f}% (what the testbed repeats to)"
                 if "median_round_spread_pct" in stats else "")
              + "; saved " + ", ".join(str(f) for f in files) + "\n"
              + "\n".join(role_lines(df, why_none=NOTHING_FITTED)))
    cols = ["scheme", "ranks", "netbed", "measured_step_s", "predicted_step_s", "error_pct",
            "measured_fwd_bwd_s", "measured_comm_s", "predicted_exposed_comm_s", "role"]
    if fmt == "csv":  # the table's header names the folder; a CSV row carries it
        df, cols = df.assign(out=str(dest)), [*cols, "out"]
    print(render(df[cols], fmt, header=header, floatfmt={
        c: "{:.4f}" for c in cols if c.endswith("_s")} | {"error_pct": "{:+.1f}"}))


# why a measured validation has no in-sample row
NOTHING_FITTED = ("calibrate times collectives and kernels, never a training step; the "
                  "forward and backward probed before each run are measured, not predicted")


# what a measured validation saves: minutes of real runs, never overwritten (an interrupted
# one keeps its rows so far in validate.partial.csv and each run's files under runs/)
MEASURED_FILES = ("validate.csv", "validate.rounds.csv", "validate.json", "validate.partial.csv",
                  "runs")


def _measurement_folder(out: str | None, default: str) -> Path:
    """Where a measured validation goes: --out, refused where it holds one measured before;
    without --out the first of `default`, `default`-2, ... that holds none (each repeat of
    the same command keeps the last one's measurements; the table says where it saved)."""
    def held(folder: str) -> list[str]:
        return [f for f in MEASURED_FILES if (Path(folder) / f).exists()]

    if out is not None:
        if held(out):
            raise UserError(f"--out {out}: holds a validation measured before "
                            f"({', '.join(held(out))}), which is not overwritten; give another "
                            "folder, or move those files away")
        return out_folder(out, default)
    tries = 1
    while held(folder := default if tries == 1 else f"{default}-{tries}"):
        tries += 1
    return out_folder(None, folder)


def _backend_of(hw, backend: str | None, share_gpu: bool | None) -> tuple[str, bool]:
    """The runs' backend and GPU sharing: the profile's own (its collectives were measured
    there) unless given; a given one that differs is refused, as --netbed is: a run on another
    link would not test the profile's prediction."""
    recorded = hw.measured.get("network_backend", "gloo")
    shared = hw.measured.get("network_share_gpu", False)
    if backend is not None and backend != recorded:
        raise UserError(f"--backend {backend}: {hw.name}'s collectives were measured with "
                        f"{recorded}; validate it there (leave --backend out), or calibrate a "
                        f"profile with --backend {backend}")
    if share_gpu and not shared:
        raise UserError(f"--share-gpu: {hw.name}'s collectives were measured with one GPU per "
                        "rank (or on the CPU); leave --share-gpu out, or calibrate a profile "
                        "with it")
    return recorded, bool(shared)


MAX_ROUNDS = 100  # repeats of the whole validation: each is minutes of training runs


def _validate_external(name: str, profile: str | None, out: str | None, fmt: str,
                       write_profile: str | None) -> None:
    from reports import external as x

    dest = out_folder(out, f"out/validate-external/{name}")  # the destinations first
    if write_profile is not None:  # (after --out, which it may sit in), then the work
        if not write_profile.endswith(".toml"):  # what `-H` and `profiles show` read
            raise UserError(f"--write-profile {write_profile}: a profile is a .toml file; "
                            "end the name with .toml")
        if not Path(write_profile).stem or Path(write_profile).name.startswith("."):
            raise UserError(f"--write-profile {write_profile}: give the profile a name before "
                            ".toml (it becomes the profile's name)")
        output_file(write_profile, "--write-profile")
        if Path(write_profile).exists():  # a calibrated profile would be lost
            raise UserError(f"--write-profile {write_profile}: the file exists; give a new "
                            "name, or remove it first")
    hardware = x.BASE_HARDWARE if profile is None else profile
    base = load_hardware(hardware)
    table, fit, meta = x.validate_external(name, hardware)
    table = table.assign(external=name, profile=hardware)  # each row says what it ran with
    files = x.write_outputs(table, fit, meta, dest)
    if write_profile is not None:
        path = Path(write_profile)
        command = f"scape validate --external {name}" + (f" --profile {profile}"
                                                          if profile else "")
        text = x.fitted_profile_text(fit, base, path.stem, command, meta["transport"])
        write_checked(path, text, "--write-profile")
        files["profile"] = path
    mem = x.memory_summary(meta["memory"])
    if fmt != "table":  # the rows; the fit, the memory rows and the skipped rows: the JSON file
        print(render(table, fmt))
        return
    by_role = {r: table.loc[table["role"] == r, "error_pct"] for r in ("held-out", "in-sample")}
    header = (f"{name} on profile {hardware} ({base.path}): {x.protocol_text(fit)}\n"
              + line("held out (every SCAPE row)", by_role["held-out"]) + "\n"
              + line("in sample (dense step rows, sums of fitted rows)", by_role["in-sample"])
              + "\nmemory (nothing fitted): "
              f"{mem['memory_rows']} rows, median |error| {mem['median_abs_error_pct']:.1f}%, "
              f"max {mem['max_abs_error_pct']:.1f}%; {len(meta['skipped'])} rows not predicted "
              f"(listed in the JSON); saved " + ", ".join(str(f) for f in files.values()))
    cols = ["series", "model", "gpus", "quantity", "measured_s", "predicted_s", "error_pct",
            "fitted", "role"]
    print(render(table[cols], fmt, header=header, floatfmt={
        "measured_s": "{:.3f}", "predicted_s": "{:.3f}", "error_pct": "{:+.1f}"},
        schema=list(table.columns)))
    # the memory rows: their own table (and CSV file)
    mcols = ["series", "model", "gpus", "measured_MiB", "predicted_low_MiB",
             "predicted_high_MiB", "error_pct"]
    print(render(meta["memory"][mcols], fmt, header=f"memory: {x.MEMORY_PROTOCOL}",
                 floatfmt={"measured_MiB": "{:.0f}", "predicted_low_MiB": "{:.0f}",
                           "predicted_high_MiB": "{:.0f}", "error_pct": "{:+.1f}"}))
