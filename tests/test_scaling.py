"""`scape report scaling`: figures render headless; the reports link every figure and CSV."""

from __future__ import annotations

import re
from html import unescape

import pandas as pd
import pytest
from markupsafe import escape

from reports.scaling import write_report
from tests.test_cli import scape


def test_scaling_report_links_every_figure_and_csv(tmp_path):
    files = write_report("gpt-345m", "dgx-h100", tmp_path, quick=True, workers=1)
    md = files["markdown"].read_text()
    html = files["html"].read_text()
    pngs = sorted(p.name for p in tmp_path.glob("*.png"))
    csvs = sorted(p.name for p in tmp_path.glob("*.csv"))
    assert len(pngs) == 6 and len(csvs) == 7
    # the run with failures: goodput in (0, 1], falling (or flat) with the GPU count, and the
    # facility energy per token of a profile with [power]
    run = pd.read_csv(tmp_path / "run.csv")
    assert ((run["goodput"] > 0) & (run["goodput"] <= 1)).all()
    dense = run[run["scheme"] == "dense-adams"].sort_values("gpus")
    assert list(dense["goodput"]) == sorted(dense["goodput"], reverse=True)
    assert (run["wh_per_token"] > 0).all()
    for png in tmp_path.glob("*.png"):
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    md_links = set(re.findall(r"\]\(([^)]+)\)", md))
    assert md_links == set(pngs) | set(csvs)
    assert set(re.findall(r'href="([^"]+)"', html)) == set(csvs)
    assert html.count('src="data:image/png;base64,') == len(pngs)  # self-contained images
    df = pd.read_csv(files["all_csv"])
    base = df[(df["scheme"] == "dense-adams") & df["fits"]]
    assert (base["speedup_vs_dense_adams"] == 1.0).all()
    # the answer opens both pages, and the HTML has the Markdown's speedup table, every GPU
    # count a row of it
    answer = md.splitlines()[2]
    assert answer.startswith("At ") and "SCAPE 99%" in answer and "bound by" in answer
    assert answer in unescape(html)
    assert str(escape(answer)) in html and "'" in answer  # autoescaped: AdamS's -> &#39;
    table = html[html.index("<table"):html.index("</table>")]
    gpus = sorted(df.loc[(df["sweep"] == "gpus") & df["fits"], "gpus"].unique())
    assert [int(g) for g in re.findall(r"<tr>\s*<td>(\d+)</td>", table)] == gpus


def test_report_cli(capsys, tmp_path):
    code, out, _ = scape(capsys, "report", "scaling", "-m", "gpt-345m", "-H", "vista-gh200",
                         "--quick", "--workers", "1", "--out", str(tmp_path))
    assert code == 0 and "scaling.html" in out and (tmp_path / "scaling.html").exists()


def test_report_cli_without_out_writes_its_default_folder(capsys, tmp_path, monkeypatch):
    """No --out: the report goes to out/scaling and the command says so (it had written the
    report and then failed on Path(None))."""
    monkeypatch.chdir(tmp_path)
    code, out, err = scape(capsys, "report", "scaling", "-m", "gpt-345m", "-H", "vista-gh200",
                           "--quick", "--workers", "1")
    assert code == 0, err
    from reports.tables import unwrapped

    assert "figures and CSVs in out/scaling/" in unwrapped(out)  # a '#' line wrapped at 100
    assert (tmp_path / "out" / "scaling" / "scaling.html").exists()


def test_breakdown_bars_add_up_to_the_step_and_the_headline_is_plans_answer():
    """Issue 58: the breakdown bars left the pipeline bubble out (7B on commodity-100gbe at
    4,096 GPUs: bars of 2.2 s and 2.7 s under a headline of 3.72 s and 3.59 s). The parts
    (reports/scaling_figures.py step_parts) add up to each step, and each point's step is the
    fastest plan `scape plan` finds at that GPU count and scheme on the same inputs."""
    from profiles import load_hardware, load_model
    from reports.scaling import Point, evaluate, global_batch
    from reports.scaling_figures import step_parts
    from simulator.planning.plan_request import PlanRequest
    from simulator.planning.planner import plan_training

    model, hw = load_model("llama-7b"), load_hardware("commodity-100gbe")
    gpus = 4096
    rows = pd.DataFrame([evaluate(Point("gpus", model, hw, gpus, s, hw.nic.bw_Gbps))
                         for s in ("dense-adams", "scape:0.99")]).set_index("scheme")
    parts = step_parts(rows)
    assert "pipeline bubble" in parts and (parts["pipeline bubble"] > 0).all()
    assert list(parts.sum(axis=1)) == pytest.approx(list(rows["step_time_s"]), rel=1e-9)
    for scheme, row in rows.iterrows():
        req = PlanRequest(model, 1e12, (hw,), max_gpus=gpus,
                          global_batch=global_batch(model, gpus), schemes=(scheme,),
                          workers=1, price_per_gpu_hour=1.0).validate()
        top = plan_training(req, keep=1).iloc[0]
        assert top["gpus"] == gpus and (top["tp"], top["pp"]) == (row["tp"], row["pp"])
        assert top["step_time_s"] == pytest.approx(row["step_time_s"], rel=1e-9)


def test_report_takes_gpus_schemes_and_global_batch(capsys, tmp_path):
    """Issue 58: `report scaling` lacked --gpus, --schemes and --global-batch; the typed values
    are the sweep's, said in the report; the baseline stays in for the speedups."""
    out = tmp_path / "r"
    code, _, err = scape(capsys, "report", "scaling", "-m", "gpt-345m", "-H", "vista-gh200",
                         "--gpus", "8,64", "-s", "scape-partitioned:0.99", "--global-batch",
                         "256", "--workers", "1", "--out", str(out))
    assert code == 0, err
    points = pd.read_csv(out / "all_points.csv")
    swept = points[points["sweep"] == "gpus"]
    assert sorted(set(swept["gpus"])) == [8, 64]
    assert set(swept["scheme"]) == {"dense-adams", "scape-partitioned:0.99"}
    assert set(points["global_batch"]) == {256}
    md = (out / "scaling.md").read_text()
    assert "256 sequences (--global-batch)" in md and "8, 64 (--gpus)" in md
    code, _, err = scape(capsys, "report", "scaling", "-m", "gpt-345m", "-H", "dgx-h100",
                         "--gpus", "12", "--out", str(tmp_path / "x"))
    assert code == 2 and "--gpus 12" in err and err.count("\n") == 1
