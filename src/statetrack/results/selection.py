"""Selection: how a grid of (lr, seed) runs becomes one figure per (task, model), the one place
that decides what a figure in a table means (`statetrack.results.scoring` scores an experiment with
it, `statetrack.results.claims` reads the claims off its summary).

- A run's evaluation at one length is scored by `scaled_accuracy` = (acc - chance) / (1 - chance):
  0 at chance, 1 when perfect (Ebrahimi & Memisevic 2025; Grazzi et al. 2025).
- A spec's `selection: {lr, seeds, criterion, threshold, metric}` says how a grid of (lr, seed) runs
  becomes one figure per (task, model); `summarize` applies it and the report only renders it.
  - criterion, a run's score: `mean_scaled` is the mean scaled accuracy over the evaluation
    lengths; `extrapolation` (Anonymous 2025) is the longest test length L with accuracy >=
    threshold (0.9) at L and at every shorter test length (0 when none), ties broken by mean
    scaled accuracy. `metric` is what that threshold applies to: `accuracy` (over supervised
    tokens) or `sequence_accuracy` (examples right at every supervised position).
  - The paper's check-mark table (Anonymous 2025, Tables 2-5): a model extrapolates to length L
    when `metric` at the selected lr (mean over seeds, or the best seed's under `seeds: max`) is >=
    threshold at L and at every shorter test length (`summarize`'s `extrapolates`). The headline's
    score under `extrapolation` is that same length, so headline and check marks never disagree.
  - lr: `best_mean` keeps the learning rate whose mean score over seeds is highest
    (Ebrahimi & Memisevic 2025; Anonymous 2025); `best_max` the one whose best seed scores highest
    (best over seeds x lrs, Deletang et al. 2023). Either reads the criterion at the training
    lengths only (the evaluation lengths up to the longest training length), never at the test
    lengths, so no figure beyond the training lengths picks the rate it is reported at; rates
    that tie there go to the smallest.
  - seeds: the headline figure at that lr: `mean` (± the sample std over seeds, Anonymous 2025) or `max`
  (the best seed). Grazzi et al. 2025 report both, so the report always shows the best seed and mean ± std beside
  the headline.
- Runs on a fixed training set of N examples (`train.dataset_size`) are read as a model of their
  own per N; `data_efficiency` gathers each model's figure at the longest test length against N
  (Ebrahimi & Memisevic 2025, Fig. 2).
- Sequence accuracy (the fraction of examples right at every supervised position: string accuracy
  on `copy`, every prefix product on word problems) is summarized beside it, mean ± std over the
  seeds at the selected lr; it takes no part in selection.
Selection is not part of any run's id: changing it retrains nothing.
"""

from __future__ import annotations

import itertools
import math
import statistics
from collections import defaultdict
from typing import Any, TypedDict

from statetrack.errors import StatetrackError
from statetrack.labels import split_variant_label
from statetrack.schema import SELECTION_DEFAULTS, extrapolation_length, lr_factor, run_score
from statetrack.store import RESULT_KEYS, Plan


class Figures(TypedDict):
    """The figures of one (task, model, training-set size) at its selected lr (`summarize`), per
    evaluation length: `headline` (the mean over seeds, or the best seed's, as `selection.seeds`
    says), `best` (the best seed's, `best_seed`), `mean` and `std` (the sample std) over seeds of
    the scaled accuracy; `per_seed` ({seed: {scaled, accuracy, sequence, measured, metrics, score}});
    `sequence_mean`/`sequence_std` (sequence accuracy, where measured); `measured_mean` (what the
    threshold of `extrapolation` reads, mean over seeds); `extrapolates` (the check marks);
    `metrics_mean` ({metric: {length: mean over seeds}}); `score`, the headline's criterion value."""

    lengths: list[int]
    seeds: list[int]
    selection: dict[str, Any]
    score: float
    headline: dict[int, float | None]
    best_seed: int
    best: dict[int, float | None]
    mean: dict[int, float]
    std: dict[int, float]
    per_seed: dict[int, dict[str, Any]]
    sequence_mean: dict[int, float]
    sequence_std: dict[int, float]
    measured_mean: dict[int, float]
    extrapolates: dict[int, bool]
    metrics_mean: dict[str, dict[int, float]]


class _Entry(Figures):
    """The keys of a `SummaryEntry` that `summarize` gives."""

    task: str
    run_task: str
    variant: str
    model: str
    dataset_size: int | None
    lr: float
    lr_scores: dict[float, float]
    ties: list[float]
    rates: dict[float, Figures]
    sequence_differs: bool


class SummaryEntry(_Entry, total=False):
    """One entry of `summarize`: a (task, model, training-set size) and its `Figures` at the
    selected `lr`. `task` is "<run_task> [<variant>]" for an evaluation variant's entry (`variant`
    '' for the training task); `dataset_size` None for fresh batches; `lr_scores` ({lr: score
    under the lr rule}); `rates` ({lr: its Figures} for every other rate trained, which `at_rate`
    reads); `ties` (the other rates that tie with the selected one on the training lengths,
    `tied_rates`: a strict verdict must hold at each of them);
    `sequence_differs`: some run of the entry, at any lr, has a sequence
    accuracy other than its accuracy; `train_length`: the task's longest training length in the
    plan (`with_train_lengths`; None where the plan does not record it)."""

    train_length: int | None


def sample_std(values: list[float]) -> float:
    """The sample standard deviation (n - 1 in the denominator) of the seeds' figures; 0 for one seed."""
    return statistics.stdev(values) if len(values) > 1 else 0.0


def _mean_score(scores: list[tuple]) -> tuple:
    return tuple(statistics.mean(parts) for parts in zip(*scores))


def describe_selection(selection: dict | None) -> str:
    """The selection rule in words, printed under every headline table."""
    selection = {**SELECTION_DEFAULTS, **(selection or {})}
    score = (
        "longest test length with {} >= {:g} there and at every shorter length".format(
            selection["metric"].replace("_", " "), selection["threshold"]
        )
        if selection["criterion"] == "extrapolation"
        else "mean scaled accuracy over lengths"
    )
    lr = (
        "the best mean over seeds" if selection["lr"] == "best_mean" else "the best single seed"
    ) + " at the training lengths"
    seeds = "mean ± sample std over seeds" if selection["seeds"] == "mean" else "the best seed"
    return f"score = {score}; lr with {lr}; headline = {seeds}"


def summarize(rows: list[dict], selection: dict | None = None, train_length: dict | None = None) -> list[SummaryEntry]:
    """Rows of `Store.results` -> one entry per (task, model, dataset_size) with the selected figures.

    The learning rate is chosen on the training lengths only: each run's criterion is computed over
    its evaluation lengths up to the longest training length of its task (`train_length`: run task ->
    length, as `planned_names` gives it), never over the test lengths; where no such length was
    evaluated, or `train_length` does not name the task, over every length.

    Each entry is a `SummaryEntry`.
    """
    selection = {**SELECTION_DEFAULTS, **(selection or {})}
    groups, variants, differs = _seed_records(rows, selection, train_length)

    def lr_score(runs_at_lr: dict) -> tuple:  # the lr rule's score of one lr's runs ({seed: record})
        scores = [s["train_score"] for s in runs_at_lr.values()]
        return _mean_score(scores) if selection["lr"] == "best_mean" else max(scores)

    summary: list[SummaryEntry] = []
    for (task, model, size), by_lr in groups.items():
        lr_scores = {lr: lr_score(by_lr[lr]) for lr in sorted(by_lr)}
        lr = max(sorted(by_lr), key=lambda x: lr_scores[x])  # ties: the smallest lr, the others in `ties`
        summary.append(
            {
                "task": task,
                "run_task": variants[task][0],
                "variant": variants[task][1],
                "model": model,
                "dataset_size": size,
                "lr": lr,
                **_selected_figures(by_lr[lr], selection),
                "lr_scores": {x: score[0] for x, score in lr_scores.items()},
                "ties": tied_rates(lr_scores, lr),
                "rates": {x: _selected_figures(by_lr[x], selection) for x in sorted(by_lr) if x != lr},
                "sequence_differs": (task, model, size) in differs,
            }
        )
    return sorted(summary, key=lambda e: (e["task"], e["model"], e["dataset_size"] or 0))


def tied_rates(lr_scores: dict[float, tuple], selected: float, tolerance: float = 1e-9) -> list[float]:
    """The learning rates other than `selected` whose score under the lr rule (on the training
    lengths) equals the selected one's, within `tolerance` in every part: where several rates fit
    the training lengths exactly, the smallest is selected and the others tie with it, and no
    verdict may rest on that choice."""
    best = lr_scores[selected]
    return [
        lr
        for lr in sorted(lr_scores)
        if lr != selected and all(abs(a - b) <= tolerance for a, b in zip(lr_scores[lr], best))
    ]


def at_rate(entry: SummaryEntry, lr: float) -> SummaryEntry:
    """The entry with the figures of another rate it trained, `lr` (one of `entry["rates"]`), in
    place of the selected rate's; the entry itself at its own rate."""
    if lr == entry["lr"]:
        return entry
    return {**entry, **entry["rates"][lr], "lr": lr, "ties": [], "rates": {}}


def _seed_records(rows: list[dict], selection: dict, train_length: dict | None) -> tuple[dict, dict, set]:
    """The rows grouped as `summarize` reads them: {(task, model, N): {lr: {seed: record}}}, each
    record {scaled, accuracy, sequence, measured, metrics, score, train_score}; the tasks' (run task,
    variant); and the (task, model, N) with a sequence accuracy other than the accuracy."""
    # (task, model, N, lr, seed) -> ({length: scaled}, {length: accuracy}, {length: sequence accuracy where
    # measured}, {metric: {length: value}} of the model's or task's metrics)
    runs: dict = defaultdict(lambda: ({}, {}, {}, {}))
    differs: set = set()  # (task, model, N) with a sequence accuracy that is not the accuracy
    variants: dict = {}  # task -> (the runs' task, the evaluation variant; '' for the training task)
    for r in rows:
        variant = r.get("variant") or ""
        variants[r["task"]] = split_variant_label(r["task"]) if variant else (r["task"], "")
        scaled, accuracy, sequence, metrics = runs[(r["task"], r["model"], r.get("dataset_size"), r["lr"], r["seed"])]
        for name in set(r) - set(RESULT_KEYS):  # e.g. tv_distance, iterations_median
            if isinstance(r[name], (int, float)):
                metrics.setdefault(name, {})[r["length"]] = r[name]
        if selection["metric"] == "sequence_accuracy" and r.get("sequence_accuracy") is None:
            raise StatetrackError(
                f"selection.metric is sequence_accuracy, but {r['model']} on {r['task']} did not measure it "
                f"(runs evaluated before it was stored); use metric: accuracy"
            )
        scaled[r["length"]] = r["scaled_accuracy"]
        accuracy[r["length"]] = r.get("accuracy", r["scaled_accuracy"])
        if r.get("sequence_accuracy") is not None:
            sequence[r["length"]] = r["sequence_accuracy"]
            if abs(r["sequence_accuracy"] - accuracy[r["length"]]) > 1e-9:
                differs.add((r["task"], r["model"], r.get("dataset_size")))
    groups: dict = defaultdict(lambda: defaultdict(dict))  # (task, model, N) -> lr -> seed -> per-seed record
    for (task, model, size, lr, seed), (scaled, accuracy, sequence, metrics) in runs.items():
        measured = sequence if selection["metric"] == "sequence_accuracy" else accuracy
        groups[(task, model, size)][lr][seed] = {
            "scaled": scaled,
            "accuracy": accuracy,
            "sequence": sequence,
            "measured": measured,
            "metrics": metrics,
            "score": run_score(scaled, measured, selection),
            "train_score": run_score(
                *_within_training(scaled, measured, (train_length or {}).get(variants[task][0])), selection
            ),
        }
    return groups, variants, differs


def _selected_figures(seeds: dict, selection: dict) -> Figures:
    """A summary entry's figures from its seeds' records at the selected lr ({seed: record}): the
    keys of `summarize`'s entry from lengths to metrics_mean."""
    best_seed = max(sorted(seeds), key=lambda s: seeds[s]["score"])
    lengths = sorted(set().union(*[set(v["scaled"]) for v in seeds.values()]))
    per_length = {n: [v["scaled"][n] for v in seeds.values() if n in v["scaled"]] for n in lengths}
    mean = {n: statistics.mean(v) for n, v in per_length.items()}
    best = {n: seeds[best_seed]["scaled"].get(n) for n in lengths}
    per_length_sequence = {n: [v["sequence"][n] for v in seeds.values() if n in v["sequence"]] for n in lengths}
    per_length_sequence = {n: v for n, v in per_length_sequence.items() if v}
    measured_mean = {
        n: statistics.mean(v["measured"][n] for v in seeds.values() if n in v["measured"]) for n in lengths
    }
    by_mean = selection["seeds"] == "mean"
    # the headline, its score and the check marks read one aggregate: the mean over seeds or the best seed
    reached = extrapolation_length(measured_mean if by_mean else seeds[best_seed]["measured"], selection["threshold"])
    score = (_mean_score([v["score"] for v in seeds.values()]) if by_mean else seeds[best_seed]["score"])[0]
    return {
        "lengths": lengths,
        "seeds": sorted(seeds),
        "selection": selection,
        "score": reached if selection["criterion"] == "extrapolation" else score,
        "headline": mean if by_mean else best,
        "best_seed": best_seed,
        "best": best,
        "mean": mean,
        "std": {n: sample_std(v) for n, v in per_length.items()},
        "per_seed": {
            s: {**{k: v for k, v in seeds[s].items() if k != "train_score"}, "score": seeds[s]["score"][0]}
            for s in sorted(seeds)
        },
        "sequence_mean": {n: statistics.mean(v) for n, v in per_length_sequence.items()},
        "sequence_std": {n: sample_std(v) for n, v in per_length_sequence.items()},
        "measured_mean": measured_mean,
        "extrapolates": {n: n <= reached for n in lengths},
        "metrics_mean": {
            name: {
                n: statistics.mean(vs)
                for n in lengths
                if (vs := [v["metrics"][name][n] for v in seeds.values() if n in v["metrics"].get(name, {})])
            }
            for name in sorted({m for v in seeds.values() for m in v["metrics"]})
        },
    }


def _within_training(scaled: dict, measured: dict, longest: int | None) -> tuple[dict, dict]:
    """The per-length figures at the training lengths (up to `longest`), or all of them when none is."""
    keep = [n for n in scaled if longest is not None and n <= longest]
    if not keep:
        return scaled, measured
    return {n: scaled[n] for n in keep}, {n: measured[n] for n in keep if n in measured}


def still_learning(
    curve: list[dict], drop: float = 0.05, schedule: dict | None = None, steps: int | None = None
) -> bool:
    """Whether a run's training loss was still falling when its budget ended: over the last fifth of
    its learning, the mean loss of the later half is at least `drop` (relative) and 1e-3 (absolute)
    below that of the earlier half. Its figures then say what the budget allowed, not what the
    model can learn. "The last fifth of its learning" weighs each step by its learning rate
    (`schedule`: the plan's settings of `statetrack.schema.lr_factor` for a run of `steps`; None: a
    constant rate, where it is the last fifth of the logged steps): under a cosine schedule the
    last steps barely move the weights, so a loss flat there says nothing of whether the model was
    still learning, and the window reaches back to where the rate was still high. Needs four
    points in that window; False otherwise."""
    points = [(p["step"], p["loss"]) for p in curve if p["loss"] is not None and math.isfinite(p["loss"])]
    if not curve or not points:
        return False
    last = curve[-1]["step"]
    # spent[i]: the learning done by step i, the sum of the rates (over the peak) of the steps before it
    rates = [1.0 if schedule is None else lr_factor(i, steps or last, **schedule) for i in range(last)]
    spent = list(itertools.accumulate(rates, initial=0.0))
    tail = [loss for step, loss in points if spent[min(step, last)] > 0.8 * spent[-1]]
    if len(tail) < 4:
        return False
    earlier, later = statistics.mean(tail[: len(tail) // 2]), statistics.mean(tail[len(tail) // 2 :])
    return earlier - later >= max(drop * earlier, 1e-3)


def final_loss(curve: list[dict], windows: int = 3) -> float | None:
    """A run's training loss at the end of its budget: the mean of its last `windows` logged points
    (each the mean over one logging window of steps); None when it logged none that is finite."""
    points = [p["loss"] for p in curve if p["loss"] is not None and math.isfinite(p["loss"])][-windows:]
    return statistics.mean(points) if points else None


def learning_runs(runs: list[dict], plan: Plan, curves) -> set[str]:
    """The ids of the done runs that used their whole budget (the plan's steps) with the training
    loss still falling at the end (`still_learning` of `curves(run id)`, weighed by the run's
    learning-rate schedule): their figures say what the budget allowed. A diverged run is not
    among them."""
    planned = {p["id"]: p for p in plan.runs}
    learning = set()
    for r in runs:
        entry = planned.get(r["id"], {})
        if r["status"] != "done" or r.get("diverged_at") is not None or r["steps"] is None:
            continue
        if r["steps"] >= (entry.get("steps") or r["steps"]) and still_learning(
            curves(r["id"]), schedule=entry.get("schedule"), steps=entry.get("steps")
        ):
            learning.add(r["id"])
    return learning


def data_efficiency(summary: list[SummaryEntry]) -> list[dict]:
    """Accuracy against training-set size (Ebrahimi & Memisevic 2025, Fig. 2), read off `summarize`:
    one entry per (task, model) with runs on fixed training sets: task, model, length (the task's
    longest evaluation length) and by_size {N: {mean, std, best, seeds}}, the scaled accuracy at
    that length over seeds (and how many seeds measured it) at the lr the selection rule picked for
    that N (None where not evaluated). Empty unless the runs of some task differ in N."""
    out = []
    for task in sorted({e["task"] for e in summary}):
        entries = [e for e in summary if e["task"] == task and e["dataset_size"] is not None]
        if len({e["dataset_size"] for e in entries}) < 2:
            continue
        length = max(n for e in entries for n in e["lengths"])
        for model in sorted({e["model"] for e in entries}):
            by_size = {
                e["dataset_size"]: {
                    **{k: e[k].get(length) for k in ("mean", "std", "best")},
                    "seeds": sum(1 for r in e["per_seed"].values() if length in r["scaled"]),
                }
                for e in entries
                if e["model"] == model
            }
            out.append({"task": task, "model": model, "length": length, "by_size": dict(sorted(by_size.items()))})
    return out


def with_train_lengths(summary: list[SummaryEntry], planned: dict | None) -> list[SummaryEntry]:
    """The summary with each entry's `train_length`: the longest training length of its task in the
    plan (None where the plan does not record it), so that tables can mark the lengths in distribution."""
    train = (planned or {}).get("train_length", {})
    for e in summary:
        e["train_length"] = train.get(e.get("run_task", e["task"]))
    return summary
