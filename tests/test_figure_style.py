"""The report figures' shared presentation (issue 42, "figures that show the answer"): a
diverging speedup scale centred on 1.0x, readable cell text, plain tick labels, a few
representative lines, and a break drawn where SCAPE starts or stops paying."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from reports import figure_style as fs


def test_speedup_norm_is_centred_on_one_with_reciprocal_ends():
    norm = fs.speedup_norm([0.27, 1.5, 3.0])
    assert norm.vcenter == 1.0 and norm(1.0) == pytest.approx(0.5)
    assert norm.vmin == pytest.approx(1 / norm.vmax) and norm.vmax == pytest.approx(1 / 0.27)
    flat = fs.speedup_norm([0.97, 0.99])  # below 1.0x only: the scale still spans it
    assert flat.vmin < 1.0 < flat.vmax


def test_text_colour_follows_the_cell():
    assert fs.text_color((1.0, 1.0, 0.6, 1.0)) == "black"  # light yellow
    assert fs.text_color((0.4, 0.0, 0.1, 1.0)) == "white"  # dark red


def test_plain_labels_and_representative_counts():
    assert [fs.plain(v) for v in (4, 16, 1024, 0.5, 0.001)] == ["4", "16", "1,024", "0.5",
                                                                "0.001"]
    counts = [8 * 2 ** i for i in range(12)]
    shown = fs.representative(counts)
    assert len(shown) == fs.MAX_LINES and shown[0] == 8 and shown[-1] == 16384
    assert fs.representative([8, 64]) == [8, 64]


def _grid(values: list[list[float]], gpus=(8, 64, 512)) -> pd.DataFrame:
    rows = [{"sweep": "bandwidth", "scheme": "scape:0.99", "fits": True, "nic_Gbps": nic,
             "gpus": g, "speedup_vs_dense_adams": v}
            for nic, row in zip((100, 400), values, strict=True)
            for g, v in zip(gpus, row, strict=True)]
    return pd.DataFrame(rows)


def test_heatmap_draws_the_break_at_one(tmp_path):
    from reports.scaling_figures import _break_at_one, _colorbar_ticks

    plt = fs.plt()
    fig, ax = plt.subplots()
    values = np.ma.masked_invalid(np.array([[1.5, 1.1, 0.8], [1.2, 0.9, 0.7]]))
    assert _break_at_one(ax, values)
    assert len(ax.lines) == 3  # two vertical edges and one horizontal one
    plt.close(fig)
    ticks = _colorbar_ticks(fs.speedup_norm(values.compressed()))
    assert 1.0 in ticks and ticks == sorted(ticks)
    from reports.scaling_figures import fig_heatmap

    png = fig_heatmap(_grid([[1.5, 1.1, 0.8], [1.2, 0.9, 0.7]]), tmp_path / "h.png", "t")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_log_axes_carry_no_mathtext_powers(tmp_path):
    plt = fs.plt()
    fig, axes = fs.figure()
    ax = axes[0][0]
    ax.plot([4, 8, 16, 32, 64], [0.6, 1, 2, 5, 12])
    fs.gpu_axis(ax, [4, 8, 16, 32, 64])
    ax.set_yscale("log")
    fs.plain_log_axis(ax.yaxis)
    fig.canvas.draw()
    labels = [t.get_text() for a in (ax.xaxis, ax.yaxis) for t in a.get_ticklabels()]
    assert "16" in labels and "1" in labels and not any("$" in s or "^" in s for s in labels)
    plt.close(fig)


@pytest.mark.skipif(shutil.which("chromium") is None, reason="no Chromium here")
def test_screenshot_probe_names_a_table_wider_than_the_page(tmp_path):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
    import report_screenshots as rs

    cells = "".join(f"<td>{'x' * 30}{i}</td>" for i in range(60))
    html = tmp_path / "wide.html"
    html.write_text(f"<html><body><h2>Wide</h2><div style='overflow-x:auto'><table><tr>{cells}"
                    "</tr></table></div><h2>Narrow</h2><table><tr><td>1</td></tr></table>"
                    "</body></html>")
    wide = rs.overflowing_tables(shutil.which("chromium"), html)
    assert [(t["index"], t["heading"]) for t in wide] == [(0, "Wide")]
