"""Checks (figures computed without training, `measure: check:NAME`): each against an independent
oracle, and a claim on a check that passes and one that fails."""

import math

import pytest
import torch

from statetrack.checks import CHECKS, Check, check_value, shipped
from statetrack.checks.shipped import burst_inputs, expected_memory, s4d_burst_accuracy
from statetrack.errors import StatetrackError
from statetrack.experiments.spec import paper_of
from statetrack.results.claims import FAIL, PASS, claim_verdicts
from statetrack.results.report import claim_measured, claim_test


def test_burst_inputs_are_runs_of_ones_then_exactly_n_zeros():
    tokens, onset = burst_inputs(3, 4, 200, torch.Generator().manual_seed(1))
    for row, marks in zip(tokens.int().tolist(), onset.tolist()):
        text = "".join(map(str, row)).rstrip("0")  # the last burst may be cut off by the length
        assert set(text.split("1")) <= {"", "000"}  # every burst is exactly three 0s
        for t in range(len(row) - 1):  # marked: exactly the positions whose next token starts a burst
            assert marks[t] == (row[t] == 1 and row[t + 1] == 0)


def test_s4d_construction_predicts_every_offset_and_a_wrong_period_does_not():
    assert s4d_burst_accuracy(3) == 1.0
    assert s4d_burst_accuracy(8) == 1.0
    # the same readout on bursts one 0 longer than the rotation's period returns to h = 1 too early
    tokens, onset = burst_inputs(4, 4, 300, torch.Generator().manual_seed(0))
    a = complex(math.cos(2 * math.pi / 3), math.sin(2 * math.pi / 3))
    h, right, scored = 1 + 0j, 0, 0
    for t in range(tokens.shape[1] - 1):  # a plain Python loop as the oracle of the recurrence
        h = a * h + (1 - a) * tokens[0, t].item()
        if not onset[0, t]:
            scored += 1
            right += (abs(h - 1) < shipped.AT_ONE) == (tokens[0, t + 1].item() == 1)
    assert right < scored


def test_expected_memory_matches_the_geometric_closed_form():
    # the first stretch of open gates is geometric: E[T] = p / (1 - p), p = P(omega x + b > logit 0.99)
    threshold = math.log(0.99 / 0.01)
    for omega in (0.5, 1.0):
        p = 0.5 * (1 + math.erf((shipped.GATE_BIAS - threshold) / omega / math.sqrt(2)))
        assert expected_memory(omega) == pytest.approx(p / (1 - p), rel=0.1)


def test_every_shipped_check_is_deterministic_and_holds_its_claimed_side():
    assert check_value("s4d_offset_construction") == 1.0
    assert check_value("belief_norm_is_survival_product") < 1e-9
    assert check_value("belief_float32_underflow") == 1.0
    assert check_value("belief_renormalised_error") < 1e-5
    assert check_value("gate_memory_falls_with_omega") < 1
    assert shipped.gate_memory_falls_with_omega() == check_value("gate_memory_falls_with_omega")


def _paper(claims):
    return paper_of({"name": "x", "paper": {"source": "Someone 2025", "claims": claims}})


def test_a_claim_on_a_check_passes_or_fails_on_its_figure(monkeypatch):
    monkeypatch.setitem(CHECKS, "half_for_test", Check("half_for_test", "a figure of one half", lambda: 0.5))
    paper = _paper(
        [
            {"text": "holds", "model": "S4D", "measure": "check:half_for_test", "at_least": 0.4},
            {"text": "fails", "model": "S4D", "measure": "check:half_for_test", "below": 0.4},
            {"text": "other scale", "model": "S4D", "measure": "check:half_for_test", "below": 0.4, "scale": "paper"},
        ]
    )
    verdicts = claim_verdicts(paper, [], {"scale": "quick", "models": set(), "tasks": set(), "seeds": {}})
    assert [v["verdict"] for v in verdicts] == [PASS, FAIL, "not run at this scale"]
    assert verdicts[0]["results"][0]["value"] == 0.5
    assert claim_measured(verdicts[1]) == "computed: 0.5"
    assert claim_test(verdicts[0]["claim"]) == "a figure of one half >= 0.4 (computed without training)"


@pytest.mark.parametrize(
    "claim, words",
    [
        ({"measure": "check:no_such_check", "at_least": 1}, "check:NAME for a figure computed without training"),
        ({"measure": "check:s4d_offset_construction", "at_least": 1, "task": "t"}, "reads no runs; leave out task"),
        ({"measure": "check:s4d_offset_construction", "beats": "LSTM"}, "with a metric or a check give"),
    ],
)
def test_a_check_claim_that_cannot_be_read_is_a_clear_error(claim, words):
    with pytest.raises(StatetrackError, match=words):
        _paper([{"text": "t", "model": "S4D", **claim}])
