"""`scape report scaling`: figures render headless; the reports link every figure and CSV."""

from __future__ import annotations

import re
from html import unescape

import pandas as pd
from markupsafe import escape

from reports.scaling import write_report
from tests.test_cli import scape


def test_scaling_report_links_every_figure_and_csv(tmp_path):
    files = write_report("gpt-345m", "dgx-h100", tmp_path, quick=True, workers=1)
    md = files["markdown"].read_text()
    html = files["html"].read_text()
    pngs = sorted(p.name for p in tmp_path.glob("*.png"))
    csvs = sorted(p.name for p in tmp_path.glob("*.csv"))
    assert len(pngs) == 5 and len(csvs) == 6
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
    assert "figures and CSVs in out/scaling/" in out
    assert (tmp_path / "out" / "scaling" / "scaling.html").exists()
