"""The strict YAML reader every spec and override goes through."""

import pytest

from statetrack import yamlio
from statetrack.errors import StatetrackError


def test_reads_what_specs_use():
    text = "base: &b {steps: 1, lr: 0.01}\ntrain:\n  <<: *b\n  steps: 3\nseeds: [0, 1]\nnote: null\n"
    assert yamlio.load(text) == {"base": {"steps": 1, "lr": 0.01}, "train": {"steps": 3, "lr": 0.01},
                                 "seeds": [0, 1], "note": None}
    assert yamlio.load("") is None
    assert yamlio.load("description: 2025-01-01") == {"description": "2025-01-01"}  # a date stays text


@pytest.mark.parametrize("text, message", [
    ("a: 1\nb: 2\na: 3\n", "key 'a' is given twice in one mapping (lines 1 and 3)"),
    ("m: {x: 1, x: 2}", "key 'x' is given twice"),
    ("? [1, 2]\n: 3\n", "line 1: a mapping key must be a plain value"),
    ("x: !!binary aGVsbG8=", "x: a YAML bytes value is not allowed here"),
    ("x: [1, !!timestamp 2025-01-01]", "x[1]: a YAML date value is not allowed here"),
    ("a: [1, 2\n", "line 2, column 1: while parsing a flow sequence: expected ',' or ']'"),
    ("a: 1\n---\nb: 2\n", "expected a single document in the stream"),
    ("[" * 66 + "]" * 66, "nested more than 64 levels deep"),
    ("[" * 20000 + "]" * 20000, "nested more than 64 levels deep"),
])
def test_refuses_in_one_line(text, message):
    with pytest.raises(StatetrackError) as error:
        yamlio.load(text)
    assert message in str(error.value) and "\n" not in str(error.value)


def test_alias_bomb_is_refused_without_expanding_it():
    # nine levels of ten aliases each would expand to 10^9 values
    lines = ["l0: &l0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 10)}]" for i in range(1, 9)]
    with pytest.raises(StatetrackError, match="expands to more than 100,000 values"):
        yamlio.load("\n".join(lines))
    # a few aliases within the limit are fine
    assert len(yamlio.load("\n".join(lines[:3]))["l2"]) == 10
