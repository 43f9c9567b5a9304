"""The report answers "did it reproduce?": a spec's `paper:` (the paper's figures and claims) checked
and set beside the measured figures with a verdict per claim, the index's verdicts column, and the
readability fixes (no "± 0" for one seed, text columns left-aligned, distinguishable curves)."""

import math
import textwrap

import pytest
import yaml

from statetrack.errors import StatetrackError
from statetrack.experiments import expand, load_spec
from statetrack.experiments.spec import by_settings, paper_of, shipped_specs
from statetrack.results.plots import curve_style, log_axis
from statetrack.results.report import markdown_table, table_rows, write_index, write_report
from statetrack.results.scoring import (
    FAIL,
    INCONCLUSIVE,
    NOT_IN_RUN,
    NOT_MEASURED,
    NOT_RUN,
    PASS,
    claim_verdicts,
    score_store,
    seeds_verdict,
    still_learning,
    summarize,
)
from statetrack.store import Outcome, RunClaim, Store

PAPER = {
    "source": "Grazzi et al. 2025, parity table",
    "metric": "scaled accuracy on test lengths 40..256",
    "lengths": [40, 256],
    "figures": {"DeltaNet [-1,1]": 1.0, "DeltaNet [0,1]": 0.017, "Transformer": "fails"},
    "claims": [
        {"text": "DeltaNet [-1,1] extrapolates", "model": "DeltaNet [-1,1]", "at_least": 0.9},
        {"text": "DeltaNet [0,1] does not", "model": "DeltaNet [0,1]", "below": 0.2},
        {"text": "DeltaNet [-1,1] holds at 1000", "model": "DeltaNet [-1,1]", "lengths": 1000, "at_least": 0.9},
        {"text": "the negative range helps", "model": "DeltaNet [-1,1]", "beats": "DeltaNet [0,1]"},
        {"text": "the LSTM extrapolates too", "model": "LSTM", "at_least": 0.9},
        {"text": "the Transformer fails", "model": "Transformer", "below": 0.5},
    ],
}
# scaled accuracy per length of each (model, seed): DeltaNet [-1,1] exact to 256 but not at 1000,
# DeltaNet [0,1] at chance; the LSTM is planned but has not finished; no Transformer in this run
MEASURED = {
    ("DeltaNet [-1,1]", 0): {40: 1.0, 256: 0.96, 1000: 0.5},
    ("DeltaNet [-1,1]", 1): {40: 1.0, 256: 0.90, 1000: 0.3},
    ("DeltaNet [0,1]", 0): {40: 0.05, 256: 0.0, 1000: 0.0},
}


def _store(tmp_path, paper=PAPER, seeds=(0, 1)) -> Store:
    store = Store(tmp_path / "statetrack.db")
    planned = []
    for model in ("DeltaNet [-1,1]", "DeltaNet [0,1]", "LSTM"):
        for seed in seeds:
            run_id = f"{model}-{seed}"
            planned.append({"id": run_id, "model": model, "task": "parity", "lr": 0.01, "seed": seed})
            scaled = MEASURED.get((model, seed))
            if scaled is None:
                continue
            config = {"experiment": "parity", "model": {"name": model}, "task": {"name": "parity"},
                      "train": {"lr": 0.01, "seed": seed, "min_length": 3, "max_length": 40}, "eval": {"lengths": [40, 256, 1000]}}
            store.start_run(RunClaim(run_id, "parity", model, "parity", seed, 0.01, config, "abc"))
            evals = [{"length": n, "accuracy": (1 + v) / 2, "scaled_accuracy": v, "samples": 64} for n, v in scaled.items()]
            store.finish_run(run_id, Outcome(evals, [{"step": 10, "loss": 0.7, "accuracy": 0.5}, {"step": 20, "loss": 0.01, "accuracy": 1.0}], 20, 100, 1.0, 0.1))
    spec = {"name": "parity", "scale": "quick", "description": "parity, synthetic", "selection": {"seeds": "mean"}}
    store.set_plan("parity", {**spec, **({"paper": paper} if paper else {})}, planned)
    return store


def test_report_sets_the_papers_figures_beside_ours_with_verdicts(tmp_path):
    out = write_report(score_store(_store(tmp_path), "parity", run_data=True), tmp_path)
    md = (out / "report.md").read_text()
    # verdicts first, then the accuracy plot, then the figures
    assert md.index("## Claims: did it reproduce?") < md.index("![accuracy_vs_length]") < md.index("## Paper vs measured") < md.index("## Headline")
    assert "Did it reproduce? 2/6 claims ✓, 1 ✗, 2 not measured, 1 not run at this scale" in md
    figures = md.split("## Paper vs measured")[1].split("\n## ")[0]
    # measured: mean over seeds (the selection) of the mean over lengths 40..256
    assert "| parity | DeltaNet [-1,1] | 1.000 | 0.965 |" in figures and "| parity | DeltaNet [0,1] | 0.017 | 0.025 |" in figures
    assert "| parity | DeltaNet [-1,1] | 1.000 | 0.965 | 0.950..0.980 (2 seeds) |" in figures  # each seed's mean over 40..256
    assert "| - | Transformer | fails | not run |" in figures  # named by the paper, not planned: listed, never dropped
    claims = md.split("## Claims: did it reproduce?")[1].split("\n## ")[0]
    # per seed, the worst length of the range: seed 0 0.96, seed 1 0.90
    assert "| DeltaNet [-1,1] extrapolates | scaled acc. at each length in 40..256 >= 0.9, in most seeds | 2 of 2 seeds, 0.930 | ✓ |" in claims
    # seed 1 of DeltaNet [0,1] has not finished: 1 of 2 is no majority yet
    assert ("| DeltaNet [0,1] does not | scaled acc. at each length in 40..256 < 0.2, in most seeds | "
            "1 of 2 seeds, 0.050 (1 of 2 seeds not measured) | not measured |") in claims
    assert "| DeltaNet [-1,1] holds at 1000 | scaled acc. at 1000 >= 0.9, in most seeds | 0 of 2 seeds, 0.400 | ✗ |" in claims
    assert ("| the negative range helps | scaled acc. mean over 40..256 > DeltaNet [0,1]'s, in most seeds | "
            "2 of 2 seeds, 0.965 vs 0.025 | ✓ |") in claims
    assert "| the LSTM extrapolates too | scaled acc. at each length in 40..256 >= 0.9, in most seeds | not run yet: LSTM | not measured |" in claims
    assert ("| the Transformer fails | scaled acc. at each length in 40..256 < 0.5, in most seeds | not in this run: Transformer "
            "| not run at this scale |") in claims
    page = (out / "report.html").read_text()
    assert '<td class="pass">✓</td>' in page and '<td class="fail">✗</td>' in page and "<h2>Paper vs measured</h2>" in page


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
    return claim_verdicts(paper, summarize(rows, selection), planned)[0]


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
    # a claim that the model fails at its training length is not gated; one that it succeeds there
    # is ✓ or inconclusive (a run that did not fit says its budget was short)
    assert _verdict({"model": "DeltaNet [-1,1]", "lengths": 40, "below": 0.5}, unfit)["verdict"] == PASS
    assert _verdict({"model": "DeltaNet [-1,1]", "lengths": 40, "at_least": 0.9}, unfit)["verdict"] == INCONCLUSIVE
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


def test_the_report_marks_a_run_still_learning_when_its_budget_ended(tmp_path):
    """A run that used its whole budget with its loss still falling is "done, still learning" in
    the runs table, and the status line counts it; one that stopped early is not marked."""
    store = Store(tmp_path / "statetrack.db")
    falling = [{"step": s, "loss": 2.0 * math.exp(-s / 400), "accuracy": 0.5} for s in range(50, 1001, 50)]
    planned = []
    for run_id, steps in (("budget", 1000), ("early", 1000)):
        config = {"experiment": "parity", "model": {"name": "LSTM"}, "task": {"name": "parity"},
                  "train": {"lr": 0.01, "seed": 0, "steps": 1000}, "eval": {"lengths": [40]}}
        store.start_run(RunClaim(run_id, "parity", "LSTM", "parity", 0 if run_id == "budget" else 1, 0.01, config, "abc"))
        curve = falling if run_id == "budget" else falling[:10]
        store.finish_run(run_id, Outcome([{"length": 40, "accuracy": 0.6, "scaled_accuracy": 0.2, "samples": 64}], curve, curve[-1]["step"], 100, 1.0, 0.1))
        planned.append({"id": run_id, "model": "LSTM", "task": "parity", "lr": 0.01, "seed": 0 if run_id == "budget" else 1,
                        "steps": steps, "train_length": 40, "lengths": [40]})
    store.set_plan("parity", {"name": "parity", "scale": "quick"}, planned)
    md = (write_report(score_store(store, "parity", run_data=True), tmp_path) / "report.md").read_text()
    assert "2 of 2 runs done at scale quick (1 still learning when their budget ended" in md
    rows = {line.split("|")[1].strip(): line for line in md.splitlines() if line.startswith("| budget") or line.startswith("| early")}
    assert "done, still learning" in rows["budget"] and "still learning" not in rows["early"]
    # the fit table: the figure at the longest training length, no seed at the fit threshold 0.9, the
    # median steps trained (1000 and 500) of the budget, one of the two runs still learning
    fit = md.split("## Fit")[1].split("\n## ")[0]
    assert "fit threshold 0.9" in fit
    assert [cell.strip() for cell in fit.splitlines()[-1].strip("|").split("|")] == [
        "parity", "LSTM", "0.01", "0.200 (0.200 to 0.200) at 40", "0 of 2", "750 of 1000", "1 of 2"]


def test_still_learning_reads_the_last_fifth_of_the_training_curve():
    flat = [{"step": s, "loss": 2.0 if s < 500 else 0.5} for s in range(100, 1001, 100)]
    falling = [{"step": s, "loss": 2.0 * math.exp(-s / 400)} for s in range(50, 1001, 50)]
    noisy = [{"step": s, "loss": 0.5 + 0.01 * (s // 50 % 2)} for s in range(50, 1001, 50)]
    assert still_learning(falling) and not still_learning(flat) and not still_learning(noisy) and not still_learning([])


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


def test_load_spec_records_what_the_overrides_left_out():
    from statetrack.experiments import load_spec

    spec = load_spec("demo", overrides=["models=[{name: lstm}]"])
    assert spec["left_out"] == ["DeltaNet [-1,1]", "DeltaNet [0,1]"]
    assert "left_out" not in load_spec("demo") and "left_out" not in load_spec("demo", overrides=["train.steps=5"])


@pytest.mark.parametrize("seeds", ["max", "mean"])
def test_the_headline_and_the_check_marks_read_one_aggregate(seeds):
    """selection.criterion=extrapolation: the headline's "extrapolates to" is the last ✓ of the
    check-mark table, whether the headline is the best seed or the mean over seeds."""
    rows = _rows({0: {40: 1.0, 64: 1.0, 256: 1.0, 1000: 1.0}, 1: {40: 1.0, 64: 0.0, 256: 0.0, 1000: 0.0},
                  2: {40: 1.0, 64: 0.2, 256: 0.0, 1000: 0.0}})
    entry = summarize(rows, {"criterion": "extrapolation", "seeds": seeds})[0]
    assert entry["score"] == max((n for n, ok in entry["extrapolates"].items() if ok), default=0)
    assert entry["score"] == (1000 if seeds == "max" else 40)


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


def test_the_report_writes_vector_plots_and_latex_tables_on_request(tmp_path):
    out = write_report(score_store(_store(tmp_path), "parity", run_data=True), tmp_path, formats=("png", "svg", "pdf"))
    assert (out / "accuracy_vs_length.svg").read_text().lstrip().startswith("<?xml")
    assert (out / "accuracy_vs_length.pdf").read_bytes().startswith(b"%PDF")
    paper = (out / "paper_vs_measured.tex").read_text()
    # the same rows as the markdown table, escaped for LaTeX, the table's key as the caption
    assert paper.startswith("\\begin{table}[t]") and "\\begin{tabular}{lllll}" in paper  # paper and measured hold words too ("fails", "not run")
    assert "parity & DeltaNet [-1,1] & 1.000 & 0.965 & 0.950..0.980 (2 seeds) \\\\" in paper
    assert "\\caption{parity: Paper vs measured. Paper:" in paper and "_" not in paper.replace("\\_", "")
    headline = (out / "headline.tex").read_text()
    assert "\\toprule" in headline and "\\bottomrule" in headline and headline.count(" \\\\\n") >= 3
    # without formats, PNG only
    again = write_report(score_store(_store(tmp_path / "b"), "parity", run_data=True), tmp_path / "b")
    assert not list(again.glob("*.svg")) and (again / "headline.tex").is_file()


def test_index_shows_each_experiments_verdicts(tmp_path):
    store = _store(tmp_path)
    store.set_plan("nopaper", {"name": "nopaper", "scale": "quick"}, [])
    write_report(score_store(store, "parity", run_data=True), tmp_path)
    md = (write_index(store, tmp_path).parent / "index.md").read_text()
    assert "| experiment | scale | done | expected | failed | missing | claims |" in md
    assert "| 2/6 claims ✓, 1 ✗, 2 not measured, 1 not run at this scale |" in md
    assert "| [nopaper](nopaper/report.html) | quick | 0 | 0 | 0 | 0 | - |" in md
    # scored by the caller as its report was (the spec's paper as it is now): the index shows those verdicts
    only = score_store(store, "parity", paper={**PAPER, "claims": PAPER["claims"][:1]})
    assert "| 1/1 claims ✓ |" in (write_index(store, tmp_path, {"parity": only}).parent / "index.md").read_text()


def test_report_all_gives_the_index_the_verdicts_of_the_reports(tmp_path, capsys, monkeypatch):
    """`statetrack report --all` scores each experiment once, with its spec's `paper:` and
    `selection:` as they are now, and the index shows the verdicts its report shows."""
    import statetrack.results.report as report
    from cli_helpers import run_cli

    _store(tmp_path)
    now = {"paper": {**PAPER, "claims": PAPER["claims"][:1]}, "selection": {"seeds": "max"}}
    monkeypatch.setattr(report, "spec_section", lambda name, key, scale=None: now.get(key))
    code, _, err = run_cli(capsys, "report", "--all", "--results-dir", str(tmp_path))
    assert code == 0, err
    index, page = (tmp_path / "index.md").read_text(), (tmp_path / "parity" / "report.md").read_text()
    assert "| 1/1 claims ✓ |" in index and "1/1 claims ✓" in page  # the plan's paper has six claims


def test_one_seed_prints_no_spread_and_text_columns_are_left_aligned(tmp_path):
    store = _store(tmp_path, seeds=(0,))
    md = (write_report(score_store(store, "parity", run_data=True), tmp_path) / "report.md").read_text()
    assert "## Scaled accuracy, mean ± std over seeds" not in md and "## Per seed" not in md  # one seed: the headline is all
    headline = md.split("## Headline")[1].split("\n## ")[0]
    cells = "\n".join(line for line in headline.splitlines() if line.startswith("|"))
    assert "±" not in cells and "| DeltaNet [-1,1] | 0.820 | 1.000 | 0.960 | 0.500 |" in cells
    assert "| :--- | ---: | ---: | ---: | ---: |" in headline and "task parity; lr 0.01" in headline  # one task, one lr: named once
    runs = md.split("## Runs")[1]
    assert "| run | model | task | lr | seed | status |" in runs and "| :--- | :--- | :--- | ---: | ---: | :--- |" in runs
    assert all(f"| {r['id']} | " in runs for r in store.runs("parity"))  # the ids `statetrack analyze` and `load_run` take
    _, body = table_rows(summarize(store.results("parity")), "mean")
    assert not any("±" in cell for row in body for cell in row)
    assert markdown_table(["claim", "n"], [["a claim", "3"]]).splitlines()[1] == "| :--- | ---: |"


@pytest.mark.parametrize("paper, message", [
    ("Grazzi", "paper must be a mapping of settings, got 'Grazzi'"),
    ({"figures": {}}, "paper.source is required"),
    ({"source": "x", "table": 1}, "paper: unknown key 'table'; expected one of: source, metric, measure"),
    ({"source": "x", "measure": "best"}, "paper.measure must be one of: scaled, sequence, extrapolation, metric:NAME"),
    ({"source": "x", "lengths": [256, 40]}, "paper.lengths must be a test length or [shortest, longest], got [256, 40]"),
    ({"source": "x", "figures": {"LSTM": [1]}}, "the figure of 'LSTM' must be a number or a short text"),
    ({"source": "x", "figures": {"GRU": 1.0}}, "paper.figures: unknown model 'GRU'; expected one of: DeltaNet [-1,1], LSTM"),
    ({"source": "x", "figures": {"copy": {"LSTM": 1.0}}}, "paper.figures: unknown task 'copy'; expected one of: modadd(m=3)"),
    ({"source": "x", "claims": [{"text": "t", "model": "LSTM"}]}, "paper.claims[0]: needs exactly one of at_least, below, beats, got 0"),
    ({"source": "x", "claims": [{"text": "t", "model": "LSTM", "at_least": "high"}]}, "claims[0].at_least must be a number, got 'high'"),
    ({"source": "x", "claims": [{"model": "LSTM", "below": 0.5}]}, "paper.claims[0].text is required"),
    ({"source": "x", "claims": [{"text": "t", "at_least": 0.5}]}, "paper.claims[0].model is required"),
    ({"source": "x", "claims": [{"text": "t", "model": "Mamba", "below": 0.5}]},
     "paper.claims[0]: unknown model 'Mamba'; expected one of: DeltaNet [-1,1], LSTM"),
    ({"source": "x", "claims": [{"text": "t", "model": "LSTM", "beats": "GRU"}]}, "paper.claims[0]: unknown model 'GRU'"),
    ({"source": "x", "claims": [{"text": "t", "model": "LSTM (d_model=16)", "below": 0.5}]},
     "paper.claims[0]: unknown model 'LSTM (d_model=16)'"),  # the spec's one LSTM has d_model 8
    ({"source": "x", "measure": "metric:tv_distance", "claims": [{"text": "t", "model": "LSTM", "beats": "LSTM"}]},
     "beats compares accuracies (higher is better); with a metric or a check give at_least or below"),
    ({"source": "x", "claims": [{"text": "t", "model": "LSTM", "task": "parity", "below": 0.5}]},
     "paper.claims[0]: unknown task 'parity'; expected one of: modadd(m=3)"),
])
def test_a_bad_paper_section_is_a_one_line_error(tiny_spec, paper, message):
    path = tiny_spec()
    spec = yaml.safe_load(path.read_text())
    path.write_text(yaml.safe_dump({**spec, "paper": paper}))
    with pytest.raises(StatetrackError) as error:
        load_spec(str(path))
    assert message in str(error.value) and "\n" not in str(error.value)


def test_a_paper_section_names_a_model_by_its_settings(tiny_spec):
    """The spec's one LSTM (d_model 8) is labelled "LSTM"; a claim may name it "LSTM (d_model=8)"."""
    path = tiny_spec()
    spec = yaml.safe_load(path.read_text())
    path.write_text(yaml.safe_dump({**spec, "paper": {"source": "x", "claims": [
        {"text": "t", "model": "LSTM (d_model=8)", "below": 0.5}]}}))
    loaded = load_spec(str(path))
    assert by_settings(paper_of(loaded), loaded)["claims"][0]["models"] == ["LSTM"]


def test_the_paper_section_changes_no_run_id(tiny_spec):
    path = tiny_spec()
    before = [r.id for r in expand(load_spec(str(path)))]
    path.write_text(path.read_text() + textwrap.dedent("""
        paper:
          source: Grazzi et al. 2025
          figures: {LSTM: 0.5}
          claims: [{text: the LSTM fails, model: LSTM, below: 0.5}]
        """))
    spec = load_spec(str(path))
    assert spec["paper"]["source"] == "Grazzi et al. 2025"
    assert [r.id for r in expand(spec)] == before


@pytest.mark.parametrize("name", sorted(shipped_specs()))
def test_every_shipped_spec_states_the_papers_figures_and_claims(name):
    for scale in ("quick", "paper"):
        paper = paper_of(load_spec(name, scale))  # names checked against the spec's models and tasks at every scale
        assert paper["source"] and paper["claims"] and any(paper["figures"].values()), name


def test_curves_stay_distinguishable_and_loss_ticks_read_plainly():
    styles = [curve_style(i) for i in range(8)]
    assert len({(s["marker"], s["ls"]) for s in styles}) == 8 and all(s["markerfacecolor"] == "none" for s in styles)
    assert styles[0]["markersize"] > styles[1]["markersize"] > styles[2]["markersize"]  # one inside another shows
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots()
    ax.set_yscale("log")
    ax.plot([0, 1], [0.002, 3.0])
    log_axis(ax.yaxis, 0.002, 3.0)
    fig.canvas.draw()
    labels = {t.get_text() for t in ax.get_yticklabels()}
    plt.close(fig)
    assert {"0.01", "0.1", "1"} <= labels and not any("10^" in t or "$" in t for t in labels)


def test_models_with_the_same_figures_are_named_as_answering_alike():
    from statetrack.results.report import alike_lines

    rows = [{"model": m, "task": "parity", "seed": s, "lr": 0.01, "length": n, "scaled_accuracy": v, "accuracy": 0.5 + v / 2}
            for m, shift in (("LSTM", 0.0), ("DeltaNet [0,1]", 0.0), ("DeltaNet [-1,1]", 0.5)) for s in (0, 1)
            for n, v in ((40, 0.01 * s + shift), (256, -0.02 + shift))]
    lines = alike_lines(summarize(rows))
    assert len(lines) == 1 and lines[0].startswith("DeltaNet [0,1] and LSTM have the same figures at every length and seed")


def test_an_extrapolation_report_of_one_task_and_lr_names_them_once(tmp_path):
    """The check-mark table carries its count of text columns: dropping the one-valued task and lr
    columns keeps it right (a model column of text, then figures)."""
    store = _store(tmp_path)
    md = (write_report(score_store(store, "parity", selection={"criterion": "extrapolation"}, run_data=True), tmp_path) / "report.md").read_text()
    table = md.split("## Extrapolation")[1].split("\n## ")[0]
    lines = [line for line in table.splitlines() if line.startswith("|")]
    assert lines[0].startswith("| model |") and "task" not in lines[0] and lines[1].startswith("| :--- | ---: |")
    assert "task parity" in table
