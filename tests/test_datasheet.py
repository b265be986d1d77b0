"""`scape profiles check` warns on figures no product's datasheet has (issue 58: an H100 at
1,979 TFLOP/s dense BF16, the sparse figure; a 3,200 Gb/s NIC, a node's NICs added up), and
refuses a llama whose odd head width `scape train`'s rotary embeddings cannot rotate."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from profiles import load_hardware, names
from profiles.datasheet import datasheet_warnings
from tests.test_cli import scape

ROOT = Path(__file__).resolve().parents[1] / "profiles"


@pytest.mark.parametrize("name", names("hardware"))
def test_shipped_profiles_lie_within_the_datasheets(name):
    assert datasheet_warnings(load_hardware(name)) == []


def _edited(tmp_path, kind: str, like: str, name: str, edits: dict[str, str]) -> Path:
    text = (ROOT / kind / f"{like}.toml").read_text()
    text = re.sub(r'(?m)^name = .*$', f'name = "{name}"', text, count=1)
    for key, value in edits.items():
        text, n = re.subn(rf"(?m)^{key} = .*$", f"{key} = {value}", text, count=1)
        assert n == 1, key
    path = tmp_path / f"{name}.toml"
    path.write_text(text)
    return path


def test_a_sparse_rate_and_a_node_aggregate_are_named_in_one_check(capsys, tmp_path):
    path = _edited(tmp_path, "hardware", "dgx-h100", "typo-h100",
                   {"peak_bf16_tflops": "1979.0", "bw_Gbps": "3200.0"})
    code, out, err = scape(capsys, "profiles", "check", str(path))
    assert code == 0 and out.startswith("ok:")
    warned = [line for line in err.splitlines() if "datasheet" in line]
    assert len(warned) == 2
    assert "peak_bf16_tflops = 1,979" in warned[0] and "2:4 sparse" in warned[0]
    assert "bw_Gbps = 3,200" in warned[1] and "8 x 400" in warned[1]


def test_a_figure_below_any_training_gpu_reads_as_a_unit_slip(tmp_path):
    from profiles.loader import check_profile

    path = _edited(tmp_path, "hardware", "dgx-h100", "slip-h100", {"hbm_bw_GBps": "3.35"})
    _, hw = check_profile(path)
    (line,) = datasheet_warnings(hw)
    assert "hbm_bw_GBps = 3.35" in line and "unit slip" in line


def test_measured_profiles_are_exempt():
    measured = sorted(f"measured/{p.stem}" for p in (ROOT / "measured").glob("*.toml"))
    assert "measured/h100-2026-11-26" in measured  # a loopback "NIC" of 1,263.8 Gb/s
    for name in measured:
        hw = load_hardware(name)
        assert hw.measured and datasheet_warnings(hw) == []


def test_an_odd_llama_head_width_is_refused_with_even_ones(capsys, tmp_path):
    path = _edited(tmp_path, "models", "llama-7b", "odd-llama",
                   {"d_model": "132", "n_heads": "12", "n_kv_heads": "12"})
    code, _, err = scape(capsys, "profiles", "check", str(path))
    assert code == 2, err
    assert "head width must be even" in err and "got 11" in err
    # 132 / 6 = 22 and 132 / 11 = 12, the nearest even; each with the KV heads that divide it,
    # so the hint followed does not fail on "n_kv_heads must divide n_heads" next
    assert "give n_heads 6 with n_kv_heads 6 or 11 with n_kv_heads 11" in err
    followed = _edited(tmp_path, "models", "llama-7b", "odd-llama-followed",
                       {"d_model": "132", "n_heads": "6", "n_kv_heads": "6"})
    code, _, err = scape(capsys, "profiles", "check", str(followed))
    assert "head width" not in err and "n_kv_heads" not in err, err
