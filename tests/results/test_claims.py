"""Claims (statetrack.results.claims): verdicts on twins, comparisons and missing runs, claims that
name a model by its settings, range claims, the seed rules, the fit gate, variant claims, claims
not run at a scale or left out by overrides, and claims on a metric the runs report."""

import pytest
from claims_data import MEASURED, PAPER

from statetrack.errors import StatetrackError
from statetrack.experiments.spec import by_settings, paper_of
from statetrack.results.claims import (
    BEHAVES,
    COMPARES,
    FAIL,
    FAILS,
    FITS,
    INCONCLUSIVE,
    NOT_IN_RUN,
    NOT_MEASURED,
    NOT_RUN,
    PASS,
    claim_kind,
    claim_verdicts,
    planned_names,
    seeds_verdict,
)
from statetrack.results.selection import summarize


def test_claim_verdicts_cover_twins_beats_and_missing_runs():
    rows = [{"model": m, "task": "parity", "seed": s, "lr": 0.01, "length": n, "scaled_accuracy": v, "accuracy": v}
            for (m, s), by_length in {**MEASURED, ("Transformer (num_layers=1)", 0): {40: 0.1, 256: 0.0, 1000: 0.0},
                                      ("Transformer (num_layers=2)", 0): {40: 0.9, 256: 0.8, 1000: 0.0}}.items()
            for n, v in by_length.items()]
    summary = summarize(rows)
    paper = paper_of({"name": "x", "paper": PAPER})
    verdicts = {v["claim"]["text"]: v for v in claim_verdicts(paper, summary)}
    beats = verdicts["the negative range helps"]
    assert beats["verdict"] == PASS and beats["results"][0]["rival"] == pytest.approx(0.025)
    # "Transformer" covers both Transformers; the two-layer one fails the claim
    fails = verdicts["the Transformer fails"]
    assert fails["verdict"] == FAIL and [r["holds"] for r in fails["results"]] == [True, False]
    assert verdicts["the LSTM extrapolates too"]["verdict"] == NOT_MEASURED and verdicts["the LSTM extrapolates too"]["missing"] == ["LSTM"]


def test_a_claim_names_a_model_by_its_settings_where_it_has_no_twin():
    """A scale with one Mamba labels it "Mamba [0,1]"; a claim on "Mamba [0,1] (num_layers=2)" reads it
    when its depth is 2, and not when it is 1 (then the claim's model is not run)."""
    paper = paper_of({"name": "x", "paper": {
        "source": "s", "lengths": [40, 256],
        "figures": {"Mamba [0,1] (num_layers=2)": "generalizes", "Mamba [0,1] (num_layers=1)": "fails"},
        "claims": [{"text": "two layers hold", "model": "Mamba [0,1] (num_layers=2)", "at_least": 0.9},
                   {"text": "it beats the LSTM", "model": "LSTM", "beats": "Mamba [0,1] (num_layers=2)"}]}})
    spec = {"models": [{"name": "mamba", "num_layers": 2}, {"name": "lstm"}], "model_defaults": {"d_model": 8}, "lrs": [0.01]}
    named = by_settings(paper, spec)
    assert [c["models"] for c in named["claims"]] == [["Mamba [0,1]"], ["LSTM"]]
    assert named["claims"][1]["bound"] == ["Mamba [0,1]"]
    assert named["figures"][None] == {"Mamba [0,1]": "generalizes", "Mamba [0,1] (num_layers=1)": "fails"}
    one_layer = by_settings(paper, {**spec, "models": [{"name": "mamba", "num_layers": 1}, {"name": "lstm"}]})
    assert one_layer["claims"][0]["models"] == ["Mamba [0,1] (num_layers=2)"]
    # twins keep the labels that tell them apart
    twins = by_settings(paper, {**spec, "models": [{"name": "mamba", "num_layers": 1}, {"name": "mamba", "num_layers": 2}]})
    assert twins["claims"][0]["models"] == ["Mamba [0,1] (num_layers=2)"]


PLANNED = {"models": {"DeltaNet [-1,1]"}, "tasks": {"parity"}, "scale": "quick", "lengths": {"parity": [40, 64, 128, 256]},
           "train_length": {"parity": 40}, "seeds": {("DeltaNet [-1,1]", "parity", None, 0.01): {0, 1, 2}}}


def _rows(by_seed: dict, model="DeltaNet [-1,1]") -> list[dict]:
    return [{"model": model, "task": "parity", "seed": s, "lr": 0.01, "length": n, "scaled_accuracy": v, "accuracy": (1 + v) / 2}
            for s, by_length in by_seed.items() for n, v in by_length.items()]


def _verdict(claim: dict, rows: list[dict], planned=PLANNED, selection=None) -> dict:
    paper = paper_of({"name": "x", "paper": {"source": "s", "lengths": [40, 256], "claims": [{"text": "t", **claim}]}})
    return claim_verdicts(paper, summarize(rows, selection, planned.get("train_length")), planned)[0]


def test_a_range_claim_is_not_measured_without_every_planned_length():
    """Evaluated at 40 and 1000 only: the range 40..256 lacks 64, 128 and 256 of the plan, and the
    longest training length 40 alone must never pass an extrapolation claim."""
    rows = _rows({s: {40: 1.0, 1000: 1.0} for s in (0, 1, 2)})
    verdict = _verdict({"model": "DeltaNet [-1,1]", "at_least": 0.9}, rows)
    assert verdict["verdict"] == NOT_MEASURED and "3 of 3 seeds not measured" in verdict["reason"]
    # a plan that evaluates only 40 and 1000: the range holds no length beyond training
    only = {**PLANNED, "lengths": {"parity": [40, 1000]}}
    verdict = _verdict({"model": "DeltaNet [-1,1]", "at_least": 0.9}, rows, only)
    assert verdict["verdict"] == NOT_MEASURED
    assert verdict["results"][0]["reason"] == "no evaluation length in 40..256 beyond the longest training length 40"
    # a claim within the training lengths needs none beyond them
    assert _verdict({"model": "DeltaNet [-1,1]", "lengths": 40, "at_least": 0.9}, rows, only)["verdict"] == PASS


def test_a_range_claim_holds_only_at_every_length_of_its_range():
    rows = _rows({s: {40: 1.0, 64: 1.0, 128: 1.0, 256: 0.6} for s in (0, 1, 2)})  # mean 0.9, but 0.6 at 256
    verdict = _verdict({"model": "DeltaNet [-1,1]", "at_least": 0.9}, rows)
    assert verdict["verdict"] == FAIL and verdict["results"][0]["seeds"] == {0: 0.6, 1: 0.6, 2: 0.6}


def test_claims_are_scored_per_seed_under_their_seed_rule():
    rows = _rows({0: dict.fromkeys([40, 64, 128, 256], 1.0), 1: {40: 1.0, **dict.fromkeys([64, 128, 256], 0.1)},
                  2: {40: 1.0, **dict.fromkeys([64, 128, 256], 0.2)}})
    majority = _verdict({"model": "DeltaNet [-1,1]", "at_least": 0.9}, rows)
    assert majority["verdict"] == FAIL and (majority["results"][0]["passed"], majority["results"][0]["of"]) == (1, 3)
    assert _verdict({"model": "DeltaNet [-1,1]", "at_least": 0.9, "seeds": "best"}, rows)["verdict"] == PASS
    assert _verdict({"model": "DeltaNet [-1,1]", "at_least": 0.9, "seeds": "all"}, rows)["verdict"] == FAIL
    two = _rows({s: dict.fromkeys([40, 64, 128, 256], 1.0) for s in (0, 1)})  # seed 2 not finished
    assert _verdict({"model": "DeltaNet [-1,1]", "at_least": 0.9}, two)["verdict"] == PASS  # 2 of 3 already decide
    assert _verdict({"model": "DeltaNet [-1,1]", "at_least": 0.9, "seeds": "all"}, two)["verdict"] == NOT_MEASURED
    assert seeds_verdict([True, False, None]) is None and seeds_verdict([True, False, False]) is False


def test_the_fit_gate_sets_aside_seeds_that_did_not_fit_their_training_lengths():
    """Seeds 1 and 2 never fit their longest training length 40 (0.1 there): a claim beyond it is
    decided on seed 0 alone, which cannot make a majority of 3, so it is inconclusive, never ✗;
    the same claim passes or fails once the seeds fit."""
    unfit = _rows({0: dict.fromkeys([40, 64, 128, 256], 1.0), 1: dict.fromkeys([40, 64, 128, 256], 0.1),
                   2: {40: 0.2, 64: 0.95, 128: 0.95, 256: 0.95}})
    verdict = _verdict({"model": "DeltaNet [-1,1]", "at_least": 0.9}, unfit)
    assert verdict["verdict"] == INCONCLUSIVE and verdict["results"][0]["unfit"] == {1: 0.1, 2: 0.2}
    assert verdict["reason"] == "DeltaNet [-1,1] did not fit its training lengths (0.100, 0.200 at 40)"
    assert verdict["results"][0]["passed"] == 1  # seed 2 passes beyond 40 but does not count
    # a failure to extrapolate is read only on a model that fit: below 0.5 is no more decided
    assert _verdict({"model": "DeltaNet [-1,1]", "below": 0.5}, unfit)["verdict"] == INCONCLUSIVE
    # best-of: the one fitted seed passing decides it
    assert _verdict({"model": "DeltaNet [-1,1]", "at_least": 0.9, "seeds": "best"}, unfit)["verdict"] == PASS
    # a lower threshold the spec sets, or fit: 0 (a model that cannot learn the task at all), lets them count
    assert _verdict({"model": "DeltaNet [-1,1]", "at_least": 0.9, "fit": 0.05}, unfit)["verdict"] == FAIL
    assert _verdict({"model": "DeltaNet [-1,1]", "below": 0.5, "fit": 0}, unfit)["verdict"] == FAIL
    # a claim that the model fails at its training length is not gated; one that it fits there is
    # decided by the fit itself: ✗ when most seeds do not fit at this budget
    assert _verdict({"model": "DeltaNet [-1,1]", "lengths": 40, "below": 0.5}, unfit)["verdict"] == PASS
    assert _verdict({"model": "DeltaNet [-1,1]", "lengths": 40, "at_least": 0.9}, unfit)["verdict"] == FAIL
    # not evaluated at the training length: the fit is unknown, so the claim is too
    unknown = _rows({s: dict.fromkeys([64, 128, 256], 1.0) for s in (0, 1, 2)})
    verdict = _verdict({"model": "DeltaNet [-1,1]", "lengths": [64, 256], "at_least": 0.9}, unknown)
    assert verdict["verdict"] == INCONCLUSIVE and verdict["reason"] == "DeltaNet [-1,1] not evaluated at its longest training length 40"


def test_a_comparison_gates_its_winner_not_the_models_it_beats():
    rows = _rows({s: {40: 1.0, 64: 0.8, 128: 0.8, 256: 0.8} for s in (0, 1, 2)})
    rows += _rows({s: {40: 0.1, 64: 0.1, 128: 0.1, 256: 0.1} for s in (0, 1, 2)}, model="DeltaNet [0,1]")
    planned = {**PLANNED, "models": {"DeltaNet [-1,1]", "DeltaNet [0,1]"},
               "seeds": {**PLANNED["seeds"], ("DeltaNet [0,1]", "parity", None, 0.01): {0, 1, 2}}}
    assert _verdict({"model": "DeltaNet [-1,1]", "beats": "DeltaNet [0,1]"}, rows, planned)["verdict"] == PASS
    verdict = _verdict({"model": "DeltaNet [0,1]", "beats": "DeltaNet [-1,1]"}, rows, planned)
    assert verdict["verdict"] == INCONCLUSIVE and "DeltaNet [0,1] did not fit" in verdict["reason"]


def test_a_variant_claim_reads_its_fit_on_the_training_task_or_on_the_fit_variant():
    """Counting-like: the training task's own targets cap its accuracy at 0.5, the `offset` variant
    shows whether the runs learned; a claim on the `two_isi` variant is gated on the variant named
    by fit_variant, else on the training task."""
    def variant_rows(variant, by_seed):
        return [{**r, "task": f"parity [{variant}]", "variant": variant} for r in _rows(by_seed)]

    rows = _rows({s: {40: 0.5} for s in (0, 1, 2)}) + variant_rows("offset", {s: {40: 1.0} for s in (0, 1, 2)})
    rows += variant_rows("two_isi", {s: {40: 0.95} for s in (0, 1, 2)})
    claim = {"model": "DeltaNet [-1,1]", "task": "parity [two_isi]", "lengths": 40, "at_least": 0.9}
    planned = {**PLANNED, "lengths": {"parity": [40]}}
    paper = {"source": "s", "claims": [{"text": "t", **claim}]}
    on_training = claim_verdicts(paper_of({"name": "x", "paper": paper}), summarize(rows), planned)[0]
    assert on_training["verdict"] == INCONCLUSIVE and on_training["results"][0]["unfit"] == {0: 0.5, 1: 0.5, 2: 0.5}
    on_offset = claim_verdicts(paper_of({"name": "x", "paper": {**paper, "fit_variant": "offset"}}), summarize(rows), planned)[0]
    assert on_offset["verdict"] == PASS and on_offset["results"][0]["unfit"] == {}


def test_a_claim_naming_an_unplanned_model_or_scale_is_listed_as_not_run():
    rows = _rows({s: dict.fromkeys([40, 64, 128, 256], 1.0) for s in (0, 1, 2)})
    verdict = _verdict({"model": ["DeltaNet [-1,1]", "Mamba [-1,1]"], "at_least": 0.9}, rows)
    assert verdict["verdict"] == NOT_RUN and verdict["unplanned"] == ["Mamba [-1,1]"]
    verdict = _verdict({"model": "DeltaNet [-1,1]", "at_least": 0.9, "scale": "paper"}, rows)
    assert verdict["verdict"] == NOT_RUN and verdict["reason"] == "a claim of the paper scale"
    with pytest.raises(StatetrackError, match="unknown paper.claims\\[0\\].seeds 'most'; expected one of: majority, all, best"):
        _verdict({"model": "DeltaNet [-1,1]", "at_least": 0.9, "seeds": "most"}, rows)
    # a model of this scale that the run's overrides left out: "not in this run", not "not run at this scale"
    left = {**PLANNED, "left_out": {"Mamba [-1,1] (d_model=8)"}}
    verdict = _verdict({"model": ["DeltaNet [-1,1]", "Mamba [-1,1]"], "at_least": 0.9}, rows, left)
    assert verdict["verdict"] == NOT_IN_RUN and verdict["reason"] == "left out by this run's overrides: Mamba [-1,1]"


def test_a_claim_may_test_a_metric_of_the_runs():
    """measure: metric:NAME reads a metric the runs report (e.g. pfsa's total-variation distance), mean over seeds."""
    rows = [{"model": m, "task": "pfsa", "seed": s, "lr": 0.01, "length": n, "scaled_accuracy": 0.5, "accuracy": 0.6,
             "tv_distance": tv + 0.01 * s}
            for m, by_length in {"LSTM": {32: 0.05, 512: 0.30}, "DeltaNet [-1,1]": {32: 0.02, 512: 0.04}}.items()
            for s in (0, 2) for n, tv in by_length.items()]
    paper = paper_of({"name": "x", "paper": {"source": "s", "measure": "metric:tv_distance", "claims": [
        {"text": "stable", "model": "DeltaNet [-1,1]", "lengths": 512, "below": 0.1},
        {"text": "unstable", "model": "LSTM", "lengths": 512, "below": 0.1}]}})
    verdicts = {v["claim"]["text"]: v for v in claim_verdicts(paper, summarize(rows))}
    assert verdicts["stable"]["verdict"] == PASS and verdicts["unstable"]["verdict"] == FAIL
    assert verdicts["unstable"]["results"][0]["value"] == pytest.approx(0.31)


# ---- one rule for every kind of claim --------------------------------------------------------------
def _claim(**claim) -> dict:
    return paper_of({"name": "x", "paper": {"source": "s", "lengths": [40, 256], "claims": [{"text": "t", **claim}]}})["claims"][0]


@pytest.mark.parametrize(
    ("claim", "lengths", "variant", "kind"),
    [
        ({"model": "M", "at_least": 0.9}, [40], "", FITS),  # succeeds at the training length: it fits
        ({"model": "M", "at_least": 0.9, "measure": "sequence"}, [40], "", FITS),
        ({"model": "M", "below": 0.5}, [40], "", FAILS),  # fails at the training length
        ({"model": "M", "below": 0.5, "fit": 0}, [40, 256], "", FAILS),  # cannot learn the task at all
        ({"model": "M", "at_least": 0.9}, [40, 256], "", BEHAVES),  # beyond the training lengths
        ({"model": "M", "below": 0.5}, [256], "", BEHAVES),  # a failure to extrapolate
        ({"model": "M", "at_least": 1, "measure": "extrapolation"}, [40], "", BEHAVES),
        ({"model": "M", "below": 20, "measure": "metric:iterations_median"}, [40], "", BEHAVES),  # an analysis figure
        ({"model": "M", "at_least": 0.9}, [40], "two_isi", BEHAVES),  # another input distribution
        ({"model": "M", "beats": "N"}, [40], "", COMPARES),
    ],
)
def test_each_kind_of_claim_is_named_by_one_rule(claim, lengths, variant, kind):
    assert claim_kind(_claim(**claim), lengths, 40, variant) == kind


def test_a_claim_that_a_model_fits_is_decided_by_the_fit_and_names_the_budget():
    """Two seeds of three do not fit 40: the claim that the model fits is ✗ (at this budget), not
    inconclusive; the report says the budget."""
    from statetrack.results.report import claim_measured

    unfit = _rows({0: {40: 1.0, 256: 1.0}, 1: {40: 0.1, 256: 0.1}, 2: {40: 0.3, 256: 0.3}})
    planned = {**PLANNED, "budget": {("DeltaNet [-1,1]", "parity", None, 0.01): 1500}}
    verdict = _verdict({"model": "DeltaNet [-1,1]", "lengths": 40, "at_least": 0.9}, unfit, planned)
    assert verdict["verdict"] == FAIL and verdict["results"][0]["unfit"] == {}
    assert claim_measured(verdict) == "1 of 3 seeds, 0.467 (did not fit at this budget, 1500 steps)"
    # all three fit: ✓
    assert _verdict({"model": "DeltaNet [-1,1]", "lengths": 40, "at_least": 0.9},
                    _rows({s: {40: 1.0} for s in (0, 1, 2)}), planned)["verdict"] == PASS


def test_a_claim_on_an_analysis_figure_is_read_only_on_seeds_that_fit():
    """Fixed-point iterations measured on a model that never fit its training lengths decide nothing."""
    rows = [{**r, "iterations_median": 30.0} for r in _rows({s: {40: 0.3, 64: 0.2, 128: 0.2, 256: 0.2} for s in (0, 1, 2)})]
    claim = {"model": "DeltaNet [-1,1]", "measure": "metric:iterations_median", "lengths": 64, "below": 20}
    verdict = _verdict(claim, rows)
    assert verdict["verdict"] == INCONCLUSIVE and "did not fit its training lengths" in verdict["reason"]
    fitted = [{**r, "scaled_accuracy": 1.0} if r["length"] == 40 else r for r in rows]
    assert _verdict(claim, fitted)["verdict"] == FAIL  # fitted seeds, 30 iterations: the claim is read, and fails


def test_plan_budget_is_each_settings_steps():
    from statetrack.store import Plan

    plan = Plan("x", {}, [{"model": "M", "task": "t", "lr": 0.01, "seed": s, "steps": 100 * (s + 1), "train_length": 10}
                         for s in (0, 1)])
    assert planned_names(plan)["budget"] == {("M", "t", None, 0.01): 200}


# ---- a tie between learning rates on the training lengths ---------------------------------------------
def _two_rates(at_large: dict) -> list[dict]:
    """Both rates fit 40 exactly (a tie, so the smaller, 0.001, is selected); beyond it 0.001 holds
    in every seed and 0.01 in the seeds of `at_large`."""
    rows = []
    for lr, by_seed in ((0.001, {s: 1.0 for s in (0, 1, 2)}), (0.01, at_large)):
        rows += [{**r, "lr": lr} for r in _rows({s: {40: 1.0, 64: v, 128: v, 256: v} for s, v in by_seed.items()})]
    return rows


TIED = {**PLANNED, "seeds": {("DeltaNet [-1,1]", "parity", None, lr): {0, 1, 2} for lr in (0.001, 0.01)}}


def test_a_tie_on_the_training_lengths_holds_only_where_it_holds_at_every_tied_rate():
    from statetrack.results.report import claim_measured

    holds_at_both = _verdict({"model": "DeltaNet [-1,1]", "at_least": 0.9}, _two_rates({0: 1.0, 1: 1.0, 2: 0.1}), TIED)
    assert holds_at_both["verdict"] == PASS and holds_at_both["results"][0]["ties"][0.01]["passed"] == 2
    assert "tied on the training lengths with lr 0.01: 2 of 3 seeds" in claim_measured(holds_at_both)
    fails_at_one = _verdict({"model": "DeltaNet [-1,1]", "at_least": 0.9}, _two_rates({0: 1.0, 1: 0.1, 2: 0.1}), TIED)
    assert fails_at_one["verdict"] == FAIL and fails_at_one["results"][0]["passed"] == 3  # the selected rate passes
    assert "fails at the tied lr 0.01" in fails_at_one["results"][0]["reason"]
    assert claim_measured(fails_at_one).endswith("tied on the training lengths with lr 0.01: 1 of 3 seeds, 0.400 ✗")
    # no tie when one rate scores better on the training lengths: the other decides nothing
    rows = [r for r in _two_rates({0: 0.1, 1: 0.1, 2: 0.1}) if not (r["lr"] == 0.01 and r["length"] == 40)]
    rows += [{**r, "lr": 0.01} for r in _rows({s: {40: 0.5} for s in (0, 1, 2)})]
    alone = _verdict({"model": "DeltaNet [-1,1]", "at_least": 0.9}, rows, TIED)
    assert alone["verdict"] == PASS and alone["results"][0]["ties"] == {}


# ---- the paper's own reporting protocol beside the strict reading ----------------------------------------
def _protocol_verdict(claim: dict, rows: list[dict], protocol: dict, planned=TIED) -> dict:
    paper = paper_of({"name": "x", "paper": {"source": "s", "lengths": [40, 256], "protocol": protocol,
                                             "claims": [{"text": "t", **claim}]}})
    return claim_verdicts(paper, summarize(rows, None, planned.get("train_length")), planned)[0]


def test_the_paper_protocol_reads_the_best_rate_and_seed_beside_the_strict_reading():
    """lr 0.01 scores better on the training lengths, so the strict reading selects it (1 of 3 seeds
    hold beyond: ✗); the paper picks its best model, lr 0.001 (3 of 3 there), on the claim's own figure."""
    rows = []
    for lr, beyond in ((0.001, {0: 1.0, 1: 1.0, 2: 1.0}), (0.01, {0: 1.0, 1: 0.1, 2: 0.1})):
        rows += [{**r, "lr": lr} for r in _rows({s: {40: 1.0 if lr == 0.01 else 0.995, 64: v, 128: v, 256: v}
                                                 for s, v in beyond.items()})]
    protocol = {"quote": "picked the best performing model", "rates": "best", "seeds": "best"}
    verdict = _protocol_verdict({"model": "DeltaNet [-1,1]", "at_least": 0.9}, rows, protocol)
    assert verdict["verdict"] == FAIL and verdict["results"][0]["lr"] == 0.01  # strict: the rate chosen on 40
    reading = verdict["protocol"]
    assert reading["verdict"] == PASS and reading["results"][0]["lr"] == 0.001 and reading["claim"]["seeds"] == "best"
    # at the selected rate only, its best seed passes: the seed rule alone changes the reading
    at_selected = _protocol_verdict({"model": "DeltaNet [-1,1]", "at_least": 0.9}, rows, {**protocol, "rates": "selected"})
    assert at_selected["protocol"]["verdict"] == PASS and at_selected["protocol"]["results"][0]["lr"] == 0.01
    # a claim that a model stays below a level: the best seed below it means every seed is
    below = _protocol_verdict({"model": "DeltaNet [-1,1]", "below": 0.5, "fit": 0}, rows, protocol)
    assert below["protocol"]["claim"]["seeds"] == "all" and below["protocol"]["verdict"] == FAIL
    # without a protocol there is one reading
    assert _verdict({"model": "DeltaNet [-1,1]", "at_least": 0.9}, rows, TIED)["protocol"] is None
    from statetrack.results.report import protocol_cell

    assert protocol_cell(verdict) == "✓: 3 of 3 seeds, 0.995 (lr 0.001)"  # its worst length, 40


def test_a_protocol_needs_a_quote_and_known_rules():
    with pytest.raises(StatetrackError, match="quote"):
        paper_of({"name": "x", "paper": {"source": "s", "protocol": {"rates": "best"}, "claims": []}})
    with pytest.raises(StatetrackError, match="rates 'any'; expected one of: best, selected"):
        paper_of({"name": "x", "paper": {"source": "s", "protocol": {"quote": "q", "rates": "any"}, "claims": []}})
