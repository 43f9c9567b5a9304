"""Selection (statetrack.results.selection): one rule, checked against figures worked out by hand:
the extrapolation length, the lr and seed rules, the threshold, and the lr chosen on the training
lengths only."""

import itertools
import math

import pytest

from statetrack.results.selection import still_learning, summarize
from statetrack.schema import extrapolation_length


def _rows(table):
    """{(lr, seed): {length: accuracy}} -> Store.results rows (chance 0, so scaled == accuracy)."""
    return [{"task": "t", "model": "m", "lr": lr, "seed": seed, "length": n, "accuracy": a, "scaled_accuracy": a}
            for (lr, seed), per_length in table.items() for n, a in per_length.items()]


# lr 0.1: steady, both seeds good to length 20, fail at 40.   mean scaled 0.75 / 0.74
# lr 0.01: one brilliant seed (all lengths), one poor seed.    mean scaled 0.97 / 0.30
GRID = {
    (0.1, 0): {10: 1.0, 20: 0.95, 40: 0.3, 80: 0.75},
    (0.1, 1): {10: 1.0, 20: 0.91, 40: 0.3, 80: 0.75},
    (0.01, 0): {10: 0.97, 20: 0.97, 40: 0.97, 80: 0.97},
    (0.01, 1): {10: 0.5, 20: 0.2, 40: 0.2, 80: 0.3},
}


def test_extrapolation_counts_only_unbroken_prefix():
    assert extrapolation_length({10: 1.0, 20: 0.95, 40: 0.5, 80: 0.99}) == 20  # 80 is good but 40 is not
    assert extrapolation_length({10: 0.89, 20: 1.0}) == 0
    assert extrapolation_length({20: 0.9, 10: 0.95}) == 20  # order of the dict does not matter
    assert extrapolation_length({10: 0.85, 20: 0.8}, threshold=0.8) == 20


@pytest.mark.parametrize("lr_rule, seeds_rule, criterion, lr, score, headline_40", [
    ("best_mean", "mean", "mean_scaled", 0.1, (0.75 + 0.74) / 2, 0.3),   # 0.745 beats (0.97 + 0.30) / 2
    ("best_max", "max", "mean_scaled", 0.01, 0.97, 0.97),              # the brilliant seed wins
    ("best_max", "mean", "mean_scaled", 0.01, (0.97 + 0.30) / 2, (0.97 + 0.2) / 2),
    # lr 0.1 reaches 20 with both seeds (mean 20); lr 0.01 reaches 80 and 0 (mean 40), so the lr rule keeps 0.01;
    # its headline score is the length the mean over seeds extrapolates to, as the check marks read it: 0
    ("best_mean", "mean", "extrapolation", 0.01, 0, (0.97 + 0.2) / 2),
])
def test_selection_rules(lr_rule, seeds_rule, criterion, lr, score, headline_40):
    selection = {"lr": lr_rule, "seeds": seeds_rule, "criterion": criterion, "threshold": 0.9}
    [entry] = summarize(_rows(GRID), selection)
    assert entry["lr"] == lr
    assert entry["score"] == pytest.approx(score)
    assert entry["headline"][40] == pytest.approx(headline_40)
    assert entry["seeds"] == [0, 1] and set(entry["per_seed"]) == {0, 1}
    assert set(entry["lr_scores"]) == {0.01, 0.1}


def test_extrapolation_with_max_over_seeds_and_threshold():
    [entry] = summarize(_rows(GRID), {"lr": "best_max", "seeds": "max", "criterion": "extrapolation"})
    assert (entry["lr"], entry["best_seed"], entry["score"]) == (0.01, 0, 80)
    # with threshold 0.92 lr 0.1's seed 1 (0.91 at 20) reaches only 10, seed 0 still 20
    [entry] = summarize(_rows(GRID), {"lr": "best_mean", "seeds": "mean", "criterion": "extrapolation", "threshold": 0.92})
    assert entry["lr_scores"] == {0.1: 15, 0.01: 40}


def test_lr_is_chosen_on_the_training_lengths_only():
    selection = {"lr": "best_mean", "seeds": "mean", "criterion": "extrapolation", "threshold": 0.9}
    # over every length lr 0.01 wins (its brilliant seed reaches 80); trained up to 20, the rule reads
    # lengths 10 and 20 only, where lr 0.1 holds in both seeds and lr 0.01 in one
    [entry] = summarize(_rows(GRID), selection, {"t": 20})
    assert entry["lr"] == 0.1 and entry["lr_scores"] == {0.1: 20, 0.01: 10}
    assert entry["score"] == 20 and entry["headline"][80] == pytest.approx(0.75)  # reported at every length
    [entry] = summarize(_rows(GRID), {**selection, "criterion": "mean_scaled"}, {"t": 10})
    assert entry["lr"] == 0.1 and entry["lr_scores"] == pytest.approx({0.1: 1.0, 0.01: 0.735})
    # a training length shorter than every evaluated one leaves the whole curve to the rule
    assert summarize(_rows(GRID), selection, {"t": 5})[0]["lr"] == 0.01
    assert summarize(_rows(GRID), selection, {"other": 20})[0]["lr"] == 0.01


def test_still_learning_reads_the_last_fifth_of_the_training_curve():
    flat = [{"step": s, "loss": 2.0 if s < 500 else 0.5} for s in range(100, 1001, 100)]
    falling = [{"step": s, "loss": 2.0 * math.exp(-s / 400)} for s in range(50, 1001, 50)]
    noisy = [{"step": s, "loss": 0.5 + 0.01 * (s // 50 % 2)} for s in range(50, 1001, 50)]
    assert still_learning(falling) and not still_learning(flat) and not still_learning(noisy) and not still_learning([])


def test_still_learning_weighs_the_curve_by_the_learning_rate_under_a_schedule():
    """A cosine schedule flattens the loss of its last steps because the rate goes to zero: a run
    whose loss falls with every unit of learning rate spent is still learning, though its last
    fifth of steps is flat; one that had converged while the rate was high is not."""
    from statetrack.schema import lr_factor

    cosine = {"warmup": 0, "schedule": "cosine", "min_lr_ratio": 0.0}
    spent = list(itertools.accumulate((lr_factor(i, 2000, **cosine) for i in range(2000)), initial=0.0))
    learning = [{"step": s, "loss": 2.0 - 0.0015 * spent[s]} for s in range(50, 2001, 50)]  # linear in the rate spent
    assert not still_learning(learning)  # read by steps, the last fifth barely moves: the old blind spot
    assert still_learning(learning, schedule=cosine, steps=2000)
    converged = [{"step": s, "loss": max(0.1, 2.0 - 0.01 * spent[s])} for s in range(50, 2001, 50)]
    assert not still_learning(converged, schedule=cosine, steps=2000)
    # a constant rate reads the same either way
    falling = [{"step": s, "loss": 2.0 * math.exp(-s / 400)} for s in range(50, 1001, 50)]
    constant = {"warmup": 0, "schedule": "constant", "min_lr_ratio": 0.0}
    assert still_learning(falling, schedule=constant, steps=1000) == still_learning(falling) is True


def test_the_plan_records_a_schedule_for_still_learning():
    from statetrack.experiments.spec import resolve

    plan = resolve("demo", "quick", ["train.schedule=cosine", "train.warmup=10", "seeds=[0]"]).plan()
    assert {r["schedule"]["schedule"] for r in plan.runs} == {"cosine"} and plan.runs[0]["schedule"]["warmup"] == 10
    assert all("schedule" not in r for r in resolve("demo", "quick", ["seeds=[0]"]).plan().runs)  # constant: left out


@pytest.mark.parametrize("seeds", ["max", "mean"])
def test_the_headline_and_the_check_marks_read_one_aggregate(seeds):
    """selection.criterion=extrapolation: the headline's "extrapolates to" is the last ✓ of the
    check-mark table, whether the headline is the best seed or the mean over seeds."""
    rows = _rows({(0.01, 0): {40: 1.0, 64: 1.0, 256: 1.0, 1000: 1.0}, (0.01, 1): {40: 1.0, 64: 0.0, 256: 0.0, 1000: 0.0},
                  (0.01, 2): {40: 1.0, 64: 0.2, 256: 0.0, 1000: 0.0}})
    entry = summarize(rows, {"criterion": "extrapolation", "seeds": seeds})[0]
    assert entry["score"] == max((n for n, ok in entry["extrapolates"].items() if ok), default=0)
    assert entry["score"] == (1000 if seeds == "max" else 40)


def test_a_summary_entry_holds_exactly_the_keys_its_type_declares():
    """`SummaryEntry` is what `summarize` builds (every key, no other) and what `with_train_lengths`
    completes; the renderers are typed against it."""
    from statetrack.results.selection import SummaryEntry, with_train_lengths

    (entry,) = summarize(_rows(GRID))
    assert set(entry) == SummaryEntry.__required_keys__
    assert SummaryEntry.__optional_keys__ == {"train_length"}
    (entry,) = with_train_lengths([entry], {"train_length": {"t": 20}})
    assert set(entry) == SummaryEntry.__required_keys__ | {"train_length"} and entry["train_length"] == 20
    assert entry["lengths"] == [10, 20, 40, 80] and entry["seeds"] == [0, 1] and entry["lr"] in (0.1, 0.01)
