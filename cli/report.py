"""`scape report scaling` and `scape reproduce`."""

from __future__ import annotations

import typer

from cli.app import StrictTyper, app
from cli.common import STEP_OPTS, Format3, _progress
from cli.outputs import out_folder
from profiles import load_hardware, load_model
from reports.tables import check_format, comment_lines, render
from vocabulary.units import parse_counts, parse_names

report_app = StrictTyper(help="Report builders.", no_args_is_help=True, rich_markup_mode=None)
app.add_typer(report_app, name="report")


@report_app.command("scaling")
def report_scaling(
    model: str = STEP_OPTS["model"], hardware: str = STEP_OPTS["hardware"],
    out: str = typer.Option(None, "--out", help="folder for the report [default: out/scaling]"),
    quick: bool = typer.Option(False, "--quick", help="a small sweep (for demos)"),
    workers: int = typer.Option(None, "--workers", help="processes; default: every core"),
    gpus: str = typer.Option(None, "--gpus", help="GPU counts to sweep, comma-separated "
                             "(e.g. 64,512,4096) [default: 8 to 16,384 in whole nodes]"),
    schemes: str = typer.Option(None, "--schemes", "-s",
                                help="schemes to compare, comma-separated (dense-adams, the "
                                     "baseline, is always in) [default: dense-adams, "
                                     "dense-ddp, quantized:8, topk:0.99, scalecom:0.99, "
                                     "scape:0.9, scape:0.99, scape:0.999, "
                                     "scape-partitioned:0.99]"),
    global_batch: int = typer.Option(None, "--global-batch", "--global-batch-size",
                                     help="sequences per step at every point [default: the "
                                          "model profile's, or one per GPU past it]"),
):
    """What-if sweeps (GPUs, NIC bandwidth, sparsity, model size) as Markdown + HTML + CSV."""
    from reports.scaling import write_report as scaling_report
    from simulator.step.batch import check_workers

    check_workers(workers)
    load_model(model)
    load_hardware(hardware)
    folder = out_folder(out, "out/scaling")
    with _progress("simulating steps") as bar:
        task = bar.add_task("steps", total=None)
        files = scaling_report(model, hardware, folder, quick, workers,
                               progress_total=lambda n: bar.update(task, total=n),
                               progress=lambda n: bar.advance(task, n),
                               gpus=None if gpus is None else tuple(_counts(gpus)),
                               schemes=None if schemes is None else tuple(
                                   parse_names(schemes, "--schemes")),
                               batch=global_batch)
    print("\n".join(comment_lines(f"report: {files['html']} (self-contained) and "
                                  f"{files['markdown']}; figures and CSVs in {folder}/")))



@app.command()
def reproduce(
    out: str = typer.Option(None, "--out", help="folder for the report [default: out/reproduce]"),
    hardware: str = typer.Option(None, "--hardware", "-H",
                                 help="default: vista-gh200-socket (TCP sockets, as the "
                                      "authors ran); the report adds vista-gh200 (InfiniBand) "
                                      "as a what-if"),
    compute_profile: str = typer.Option(
        None, "--compute-profile",
        help="a measured profile (measured/NAME from scape calibrate compute): also price "
             "forward and backward at the rate it measured, side by side with the profile's"),
    fmt: Format3 = typer.Option("table", "--format", help="table|csv|json"),
):
    """The SCAPE paper's setting predicted, next to the paper's figures, with assumptions."""
    check_format(fmt)
    import pandas as pd  # here, not at the top: `scape report --help` never loads it

    from reports.reproduce import write_report
    from reports.reproduce_settings import DEFAULT_HARDWARE

    hardware = DEFAULT_HARDWARE if hardware is None else hardware
    files = write_report(out_folder(out, "out/reproduce"), hardware, compute_profile)
    df = pd.read_csv(files["predictions"])
    if compute_profile is not None:  # the measured compute's columns beside the profile's
        both = pd.read_csv(files["measured_compute"])
        df = df.merge(both[["model", "scheme", "sparsity", "step_time_s_measured_compute",
                            "speedup_vs_dense_adams_measured_compute"]],
                      on=["model", "scheme", "sparsity"]).assign(compute_profile=compute_profile)
    measured_cols = [c for c in df.columns if c.endswith("_measured_compute")]
    cols = ["model", "scheme", "sparsity", "step_time_s", "exposed_comm_s",
            "speedup_vs_dense_adams",
            "end_to_end_reduction", "paper_metric", "paper_value", "predicted_value",
            "table_value", "hardware", "what_if_hardware", "what_if_step_time_s",
            "what_if_speedup", "memory_GB", "fits_memory", *measured_cols,
            *(["compute_profile"] if measured_cols else [])]
    if fmt != "table":
        print(render(df[cols], fmt))
        return
    shown = df[["model", "scheme", "sparsity", "step_time_s", "exposed_comm_s",
                "speedup_vs_dense_adams", "end_to_end_reduction", "predicted_value",
                "paper_value", "table_value", "what_if_step_time_s", "what_if_speedup",
                *measured_cols]].copy()
    if not df["fits_memory"].all():  # a step no GPU holds says so, as compare's rows do
        shown["fits_memory"] = df["fits_memory"].map({True: "", False: "NO"})
    for col in ("predicted_value", "paper_value", "table_value"):
        shown[col] = shown[col].map(lambda v: "" if pd.isna(v) else f"{v:.4g}")
    header = (f"SCAPE paper setting on 32 GPUs of {hardware}\n"
              "predicted_value: the model's figure in the paper's own terms (a per-step "
              "speedup, or a time reduction over the density schedule the authors logged), "
              "beside the paper's (paper_value) and the authors' table's (table_value); "
              "end_to_end_reduction is one step's at the target density; what_if_*: the "
              f"same run on {df['what_if_hardware'].iloc[0]}")
    print(render(shown, "table", header=header, floatfmt={
        c: "{:.3f}" for c in ("sparsity", "step_time_s", "exposed_comm_s",
                              "speedup_vs_dense_adams", "end_to_end_reduction",
                              "what_if_step_time_s", "what_if_speedup", *measured_cols)},
        schema=cols))
    if compute_profile is not None:
        check = pd.read_csv(files["compute_check"])
        formats = {"profile_compute_s": "{:.3f}", "measured_compute_s": "{:.3f}",
                   "authors_compute_s": "{:.3f}", "profile_err_pct": "{:+.1f}",
                   "measured_err_pct": "{:+.1f}"}
        for col, spec in formats.items():  # blank where the authors report no such model
            check[col] = check[col].map(lambda v, f=spec: "" if pd.isna(v) else f.format(v))
        print(render(check[["model", "micro_batch", *formats]], "table",
                     header=f"forward+backward per step: {hardware}'s against "
                     f"{compute_profile}'s, and the authors' GH200 computation"))
    print("\n".join(comment_lines(
        f"report: {files['report']} (assumptions, what-if on {files['what_if'].stem}, "
        "sensitivity figure, CSVs)")))


def _counts(text: str) -> list[int]:
    """`64,512,4096`: whole positive GPU counts, or a one-line refusal."""
    return parse_counts(text, "--gpus", least=1, what="GPUs", example="64,512,4096")
