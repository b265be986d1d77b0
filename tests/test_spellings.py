"""Inputs as people write them (issue 58 item 4): `1T` and `500B` tokens, `8k` sequences,
`2Mi` bytes, a sparsity written as a percentage; each either read as written or refused in one
line that says what was read and what to write."""

from __future__ import annotations

import json

import pytest

from tests.test_cli import scape
from vocabulary.errors import UserError
from vocabulary.units import parse_length, parse_size, parse_tokens


@pytest.mark.parametrize("text, tokens", [("1T", 1e12), ("500B", 5e11), ("1.4T", 1.4e12),
                                          ("2e12", 2e12), ("15,000,000", 1.5e7),
                                          ("300b", 3e11), ("10M", 1e7)])
def test_tokens_read_as_written(text, tokens):
    assert parse_tokens(text) == pytest.approx(tokens, rel=1e-12)


@pytest.mark.parametrize("text, length", [("8k", 8192), ("128K", 131072), ("4096", 4096),
                                          ("8Ki", 8192), ("1M", 1 << 20)])
def test_lengths_read_in_powers_of_1024(text, length):
    assert parse_length(text) == length


@pytest.mark.parametrize("parse, text, says", [
    (parse_tokens, "1TB", "cannot read it"),
    (parse_tokens, "-1T", "cannot read it"),
    (parse_length, "8.5", "whole number"),
    (parse_length, "8kb", "cannot read it"),
    (parse_length, "8T", "cannot read it"),
    (parse_length, "1e400", "whole number"),
])
def test_unreadable_counts_are_refused_with_an_example(parse, text, says):
    with pytest.raises(UserError, match=says) as info:
        parse(text)
    assert repr(text) in str(info.value) and "e.g." in str(info.value)


def test_sizes_take_kubernetes_binary_suffixes():
    assert parse_size("2Mi") == parse_size("2MiB") == 2 << 20
    assert parse_size("1Gi") == 1 << 30


def test_the_command_line_reads_tokens_and_lengths_as_people_write_them(capsys):
    code, out, _ = scape(capsys, "simulate", "-m", "llama-7b", "-H", "dgx-h100", "--gpus",
                         "8", "--seq-len", "8k", "--recompute", "full", "--format",
                         "json")
    assert code == 0 and json.loads(out)[0]["seq_len"] == 8192
    code, _, err = scape(capsys, "plan", "-m", "llama-7b", "-H", "dgx-h100", "--tokens",
                         "1TB", "--max-gpus", "8")
    assert code == 2 and err.count("\n") == 1 and "--tokens '1TB'" in err


@pytest.mark.parametrize("spec, meant", [("scape:99", "scape:0.99"), ("topk:90", "topk:0.9"),
                                         ("scalecom:99.9", "scalecom:0.999")])
def test_a_sparsity_given_as_a_percentage_gets_its_reading(capsys, spec, meant):
    code, _, err = scape(capsys, "simulate", "-m", "llama-7b", "-H", "dgx-h100", "--gpus",
                         "8", "-s", spec)
    assert code == 2 and err.count("\n") == 1 and f"did you mean {meant}" in err
