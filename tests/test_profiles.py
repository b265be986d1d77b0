"""Profiles: every embedded file is valid and sourced; validation errors name file and key."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from profiles import ProfileError, check_profile, load_hardware, load_model, names
from profiles.files import ROOT

HW_FILE = ROOT / "hardware" / "dgx-h100.toml"
MODEL_FILE = ROOT / "models" / "llama-7b.toml"


def test_embedded_profiles_are_present():
    assert names("hardware") == ["aws-p5", "commodity-100gbe", "cray-ex254n-gh200", "dgx-a100",
                                 "dgx-b200", "dgx-h100", "dgx-h200", "dgx-h800", "gb200-nvl72",
                                 "gcp-a3-mega", "grand-teton-h100", "jean-zay-a100",
                                 "oci-h100-roce", "vista-gh200", "vista-gh200-socket"]
    assert names("model") == [
        "bloom-176b", "deepseek-v3", "gpt-345m", "gpt-oss-120b", "gpt-oss-20b", "gpt3-175b",
        "llama-1.8b", "llama-405b", "llama-500m", "llama-70b", "llama-7b", "llama3-405b",
        "llama3-70b",
        "llama3-8b", "llama4-maverick", "llama4-scout", "mixtral-8x22b", "mixtral-8x7b",
        "nemotron4-15b", "nemotron4-340b", "qwen3-235b-a22b", "qwen3-30b-a3b", "qwen3-32b",
        "qwen3-8b", "tiny-gpt", "tiny-llama",
    ]


@pytest.mark.parametrize("name", names("hardware"))
def test_hardware_profiles_load_with_sources(name):
    hw = load_hardware(name)
    assert hw.name == name
    for table in (hw.gpu, hw.node, hw.intra_node, hw.nic, hw.fabric):
        assert table.source.strip()
    assert (hw.intra_node.kind == "none") == (hw.node.gpus_per_node == 1)


def test_issue_hardware_facts():
    vista, h100, a100 = (load_hardware(n) for n in ("vista-gh200", "dgx-h100", "dgx-a100"))
    assert (vista.node.gpus_per_node, vista.nic.nics_per_node, vista.nic.bw_Gbps) == (1, 1, 400)
    assert vista.fabric.nodes_per_leaf == 32
    assert (h100.node.gpus_per_node, h100.intra_node.bw_GBps) == (8, 450)
    assert (h100.nic.nics_per_node, h100.nic.bw_Gbps) == (8, 400)
    assert (a100.node.gpus_per_node, a100.intra_node.bw_GBps) == (8, 300)
    assert (a100.nic.nics_per_node, a100.nic.bw_Gbps) == (8, 200)
    commodity = load_hardware("commodity-100gbe")
    assert commodity.nic.bw_Gbps == 100


def test_parameter_counts_match_published_ones():
    assert load_model("llama-7b").n_params == 6_738_415_616  # HF Llama-2-7b-hf
    assert load_model("llama-70b").n_params == 68_976_648_192  # HF Llama-2-70b-hf
    # GPT-2 medium layout by hand: 12 h^2 + 13 h per layer, embeddings, positions, final norm.
    h, n_layers, vocab, seq = 1024, 24, 50304, 1024
    expected = n_layers * (12 * h * h + 13 * h) + vocab * h + seq * h + 2 * h
    assert load_model("gpt-345m").n_params == expected
    # BLOOM's card: 176,247,271,424; the gpt formula adds learned positions BLOOM (ALiBi) lacks
    bloom = load_model("bloom-176b")
    assert bloom.n_params - 2048 * 14336 + 2 * 14336 == pytest.approx(176_247_271_424,
                                                                     rel=2e-4)


@pytest.mark.parametrize("name", names("model"))
def test_model_profiles_load(name):
    model = load_model(name)
    assert model.arch.d_model % model.arch.n_heads == 0
    assert model.n_params > 0


def _broken(tmp_path: Path, src: Path, old: str, new: str, folder: str) -> Path:
    text = src.read_text()
    assert re.search(old, text, flags=re.M), f"fixture pattern {old!r} not in {src.name}"
    out = tmp_path / folder / src.name
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(re.sub(old, new, text, count=1, flags=re.M))
    return out


HW_CASES = [
    (r"^bw_Gbps = 400\.0", "bw_GBps = 50.0", r"\[nic\] bw_GBps: wrong unit.*bw_Gbps"),
    (r"^bw_Gbps = 400\.0", 'bw_Gbps = "400 Gb/s"', r"\[nic\] bw_Gbps: expected a number"),
    (r"^bw_Gbps = 400\.0", "bw_Gbps = -400.0", r"\[nic\] bw_Gbps: must be > 0"),
    (r"^efficiency = 0\.94.*$", "efficiency = 1.5", r"\[nic\] efficiency: must be <= 1"),
    (r"^nics_per_node = 8.*$", "nics_per_node = 8\nspeed = 3", r"\[nic\] speed: unknown key"),
    (r"^nics_per_node = 8.*$", "", r"\[nic\] nics_per_node: missing required key"),
    (r"^nics_per_node = 8.*$", "nics_per_node = 3", r"\[nic\] nics_per_node: must divide"),
    (r"^kind = \"nvlink\"", 'kind = "none"', r"\[intra_node\] kind"),
    (r"^kind = \"nvlink\"", 'kind = "hyperlink"', r"\[intra_node\] kind: must be one of"),
    (r"^\[fabric\]", "[fabrics]", r"\[fabrics\]: unknown table"),
    (r"^name = \"dgx-h100\"", 'name = "other"', r"name: must equal the file name"),
    (r"^gpus_per_node = 8", "gpus_per_node = 8.5", r"\[node\] gpus_per_node: expected an int"),
    (r"^oversubscription = 1\.0", "oversubscription = 0.5", r"oversubscription: must be >= 1"),
    (r"^\[gpu\]", "[gpu\n", r"not valid TOML"),
    # interference: a figure or the SMs a collective holds, never neither, never both
    (r"^nccl_ctas = 16$", "", r"\[compute\] interference: required unless"),
    (r"^nccl_ctas = 16$", "nccl_ctas = 16\ninterference = 0.1",
     r"\[compute\] give interference or nccl_ctas, not both"),
    (r"^nccl_ctas = 16$", "nccl_ctas = 132", r"\[compute\] nccl_ctas 132 must be fewer"),
    (r"^sms = 132$", "", r"\[compute\] interference: required unless"),
    # FlashAttention-2's rates come as a pair
    (r"^attn_flash2_bwd_fraction = .*$", "",
     r"attn_flash2_fwd_fraction and attn_flash2_bwd_fraction: give both or neither"),
    (r"^attn_flash2_fwd_fraction = .*$", "attn_flash2_fwd_fraction = 1.2",
     r"\[roofline\] attn_flash2_fwd_fraction: must be <= 1"),
    # NCCL_PROTO as the platform sets it: NCCL's protocol names only
    (r"^channels = 16$", 'channels = 16\nproto = "Simple,LL256"',
     r"\[nccl\] proto: a comma-separated list of LL, LL128 and Simple"),
    (r"^channels = 16$", 'channels = 16\nproto = "Simple,"',
     r"\[nccl\] proto: a comma-separated list"),
    # NVLink SHARP is Hopper's (third-generation NVSwitch): refused elsewhere, not divided by 0
    (r"^arch = \"hopper\"", 'arch = "ampere"', r"\[nccl\] nvls: NVLink SHARP needs"),
    (r"^launch_us = .*$", "launch_us = 1e300", r"\[nccl\] launch_us: must be <="),
    # the key of earlier versions says what it became
    (r"^launch_us = .*$", "launch_floor_us = 36.4", r"renamed launch_us"),
]


MODEL_CASES = [
    (r"^n_heads = 32.*$", "n_heads = 33", r"\[arch\] n_heads: must divide d_model"),
    (r"^n_layers = 32.*$", "n_layers = 33", r"\[reference\] n_params: computed"),
    (r"^family = \"llama\"", 'family = "mamba"', r"family: must be one of"),
    (r"^vocab_size = 32000.*$", "", r"\[arch\] vocab_size: missing required key"),
    (r"^tied_embeddings = false.*$", 'tied_embeddings = "no"', r"tied_embeddings: expected bool"),
]


CASES = [(HW_FILE, "hardware", *c) for c in HW_CASES] + [
    (MODEL_FILE, "models", *c) for c in MODEL_CASES]


@pytest.mark.parametrize(("src", "folder", "old", "new", "message"), CASES)
def test_validation_names_file_and_key(tmp_path, src, folder, old, new, message):
    bad = _broken(tmp_path, src, old, new, folder)
    with pytest.raises(ProfileError, match=message) as info:
        check_profile(bad)
    assert str(bad) in str(info.value)


def test_unknown_names_list_known_ones():
    with pytest.raises(ProfileError, match=r"unknown hardware profile 'nope'; known: .*dgx-h100"):
        load_hardware("nope")
    with pytest.raises(ProfileError, match="unknown model profile"):
        load_model("gpt-5")


def test_llama31_names_are_llama3_architectures():
    """Llama 3.1 8B/70B/405B have Llama 3's shapes (llama-models sku_list): their names load
    the llama3-* files; a name of another architecture is still refused with suggestions."""
    from profiles.loader import find
    from profiles.model_aliases import MODEL_ALIASES

    for alias, name in MODEL_ALIASES.items():
        assert load_model(alias).name == name
        assert load_model(alias.upper()).name == name
        assert find(alias) == ("model", load_model(name))
    assert load_model("llama3.1-70b").arch == load_model("llama3-70b").arch
    with pytest.raises(ProfileError, match=r"unknown model profile 'llama-3-70b'.*'llama3-70b'"):
        load_model("llama-3-70b")
    with pytest.raises(ProfileError, match=r"unknown model profile 'llama3\.2-1b'"):
        load_model("llama3.2-1b")


def test_check_tells_kind_from_content(tmp_path):
    copy = tmp_path / "elsewhere" / "dgx-h100.toml"
    copy.parent.mkdir()
    copy.write_text(HW_FILE.read_text())
    kind, hw = check_profile(copy)
    assert (kind, hw.name) == ("hardware", "dgx-h100")
    odd = tmp_path / "odd.toml"
    odd.write_text('name = "odd"\n')
    with pytest.raises(ProfileError, match="cannot tell the profile kind"):
        check_profile(odd)


@pytest.mark.parametrize(("name", "old", "new", "message"), [
    # message_us is paid by NCCL-tuned calls only; chunk_kib prices the Simple ring without one
    ("vista-gh200-socket", r"^chunk_kib = 2048$", "chunk_kib = 2048\nmessage_us = 5.0",
     r"\[transport\] message_us: paid by the calls NCCL's tuner prices"),
    ("gcp-a3-mega", r"^message_us = 22\.9$", "message_us = 22.9\nchunk_kib = 1024",
     r"\[transport\] chunk_kib: prices the Simple ring"),
])
def test_transport_values_a_profile_would_ignore_are_refused(tmp_path, name, old, new, message):
    src = HW_FILE.parent / f"{name}.toml"
    with pytest.raises(ProfileError, match=message):
        check_profile(_broken(tmp_path, src, old, new, "hardware"))


def test_dgx_b200_carries_gb200s_fitted_sustained_share():
    """dgx-b200's [roofline] sustained is gb200-nvl72's fitted one (the same B200 die;
    late-constants.md row 60, bench/moe_steps.py SHARE_FROM): the two literals stay equal."""
    from profiles import load_hardware

    assert (load_hardware("dgx-b200").roofline.sustained
            == load_hardware("gb200-nvl72").roofline.sustained)
