"""The score and the selection rules: the one place that decides what a figure in a table means.

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
    when the mean over seeds of `metric` at the selected lr is >= threshold at L and at every
    shorter test length (`summarize`'s `extrapolates`).
  - lr: `best_mean` keeps the learning rate whose mean score over seeds is highest
    (Ebrahimi & Memisevic 2025; Anonymous 2025); `best_max` the one whose best seed scores highest
    (best over seeds x lrs, Deletang et al. 2023).
  - seeds: the headline figure at that lr: `mean` (± std, Anonymous 2025) or `max` (the best seed).
  Grazzi et al. 2025 report both, so the report always shows the best seed and mean ± std beside
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

import statistics
from collections import defaultdict

from statetrack.errors import StatetrackError

# Valid values of each selection setting, the default first.
SELECTION_CHOICES = {
    "lr": ("best_mean", "best_max"),  # the lr whose mean / best seed scores highest
    "seeds": ("mean", "max"),  # the headline figure: mean over seeds, or the best seed
    "criterion": ("mean_scaled", "extrapolation"),  # a run's score (see run_score)
    "metric": ("accuracy", "sequence_accuracy"),  # what the threshold of `extrapolation` applies to
}
SELECTION_DEFAULTS = {**{k: v[0] for k, v in SELECTION_CHOICES.items()}, "threshold": 0.9}


def scaled_accuracy(accuracy: float, chance: float) -> float:
    """(acc - chance) / (1 - chance): 0 at chance, 1 when perfect."""
    return (accuracy - chance) / (1.0 - chance)


def extrapolation_length(accuracy: dict, threshold: float = 0.9) -> int:
    """The longest test length whose accuracy, and that of every shorter one, is >= threshold
    (Anonymous 2025); 0 when the shortest one already falls short."""
    reached = 0
    for length in sorted(accuracy):
        if accuracy[length] < threshold:
            break
        reached = length
    return reached


def selection_of(spec: dict) -> dict:
    """The spec's selection rule with defaults filled in, checked (one-line error naming valid values)."""
    given = spec.get("selection") or {}
    if not isinstance(given, dict):
        raise StatetrackError(f"experiment {spec.get('name')!r}: selection must be a mapping with keys: {', '.join(SELECTION_DEFAULTS)}")
    bad = [k for k in given if k not in SELECTION_DEFAULTS]
    if bad:
        raise StatetrackError(f"unknown selection setting {bad[0]!r}; expected one of: {', '.join(SELECTION_DEFAULTS)}")
    selection = {**SELECTION_DEFAULTS, **given}
    for key, choices in SELECTION_CHOICES.items():
        if selection[key] not in choices:
            raise StatetrackError(f"unknown selection.{key} {selection[key]!r}; expected one of: {', '.join(choices)}")
    threshold = selection["threshold"]
    if isinstance(threshold, bool) or not isinstance(threshold, (int, float)) or not 0 < threshold <= 1:
        raise StatetrackError(f"selection.threshold must be a number in (0, 1], got {threshold!r}")
    return selection


def run_score(scaled: dict, accuracy: dict, selection: dict) -> tuple:
    """A run's score as a tuple compared lexicographically: (criterion value, tie-breaker)."""
    mean_scaled = statistics.mean(scaled.values())
    if selection["criterion"] == "extrapolation":
        return (extrapolation_length(accuracy, selection["threshold"]), mean_scaled)
    return (mean_scaled,)


def _mean_score(scores: list[tuple]) -> tuple:
    return tuple(statistics.mean(parts) for parts in zip(*scores))


def describe_selection(selection: dict | None) -> str:
    """The selection rule in words, printed under every headline table."""
    selection = {**SELECTION_DEFAULTS, **(selection or {})}
    score = ("longest test length with {} >= {:g} there and at every shorter length".format(
                 selection["metric"].replace("_", " "), selection["threshold"])
             if selection["criterion"] == "extrapolation" else "mean scaled accuracy over lengths")
    lr = "the best mean over seeds" if selection["lr"] == "best_mean" else "the best single seed"
    seeds = "mean ± std over seeds" if selection["seeds"] == "mean" else "the best seed"
    return f"score = {score}; lr with {lr}; headline = {seeds}"


def summarize(rows: list[dict], selection: dict | None = None) -> list[dict]:
    """Rows of `Store.results` -> one entry per (task, model, dataset_size) with the selected figures.

    Each entry: task, run_task and variant (an evaluation variant's entry has task "<run_task> [<variant>]"), model, dataset_size (None for fresh batches), lr (selected), lengths, seeds, selection, score (the headline's
    criterion value), headline (per-length scaled accuracy: mean over seeds or the best seed's),
    best and best_seed, mean and std (per length over seeds at the selected lr), per_seed
    ({seed: {scaled, accuracy, sequence, score}} at that lr), lr_scores ({lr: score under the lr rule}),
    sequence_mean and sequence_std (sequence accuracy per length over the seeds at the selected lr that
    measured it) and sequence_differs (some run of the entry, at any lr, has a sequence accuracy
    other than its accuracy: only then is it worth a table of its own).
    """
    selection = {**SELECTION_DEFAULTS, **(selection or {})}
    # (task, model, N, lr, seed) -> ({length: scaled}, {length: accuracy}, {length: sequence accuracy where measured})
    runs: dict = defaultdict(lambda: ({}, {}, {}))
    differs: set = set()  # (task, model, N) with a sequence accuracy that is not the accuracy
    variants: dict = {}  # task -> (the runs' task, the evaluation variant; '' for the training task)
    for r in rows:
        variant = r.get("variant") or ""
        variants[r["task"]] = (r["task"][: -len(f" [{variant}]")] if variant else r["task"], variant)
        scaled, accuracy, sequence = runs[(r["task"], r["model"], r.get("dataset_size"), r["lr"], r["seed"])]
        if selection["metric"] == "sequence_accuracy" and r.get("sequence_accuracy") is None:
            raise StatetrackError(f"selection.metric is sequence_accuracy, but {r['model']} on {r['task']} did not measure it "
                                  f"(runs evaluated before it was stored); use metric: accuracy")
        scaled[r["length"]] = r["scaled_accuracy"]
        accuracy[r["length"]] = r.get("accuracy", r["scaled_accuracy"])
        if r.get("sequence_accuracy") is not None:
            sequence[r["length"]] = r["sequence_accuracy"]
            if abs(r["sequence_accuracy"] - accuracy[r["length"]]) > 1e-9:
                differs.add((r["task"], r["model"], r.get("dataset_size")))
    groups: dict = defaultdict(lambda: defaultdict(dict))  # (task, model, N) -> lr -> seed -> per-seed record
    for (task, model, size, lr, seed), (scaled, accuracy, sequence) in runs.items():
        measured = sequence if selection["metric"] == "sequence_accuracy" else accuracy
        groups[(task, model, size)][lr][seed] = {"scaled": scaled, "accuracy": accuracy, "sequence": sequence, "measured": measured,
                                                 "score": run_score(scaled, measured, selection)}
    summary = []
    for (task, model, size), by_lr in groups.items():
        def lr_score(lr):
            scores = [s["score"] for s in by_lr[lr].values()]
            return _mean_score(scores) if selection["lr"] == "best_mean" else max(scores)

        lr_scores = {lr: lr_score(lr) for lr in sorted(by_lr)}
        lr = max(sorted(by_lr), key=lambda x: lr_scores[x])  # ties: the smallest lr
        seeds = by_lr[lr]
        best_seed = max(sorted(seeds), key=lambda s: seeds[s]["score"])
        lengths = sorted(set().union(*[set(v["scaled"]) for v in seeds.values()]))
        per_length = {n: [v["scaled"][n] for v in seeds.values() if n in v["scaled"]] for n in lengths}
        mean = {n: statistics.mean(v) for n, v in per_length.items()}
        best = {n: seeds[best_seed]["scaled"].get(n) for n in lengths}
        per_length_sequence = {n: [v["sequence"][n] for v in seeds.values() if n in v["sequence"]] for n in lengths}
        per_length_sequence = {n: v for n, v in per_length_sequence.items() if v}
        measured_mean = {n: statistics.mean(v["measured"][n] for v in seeds.values() if n in v["measured"]) for n in lengths}
        reached = extrapolation_length(measured_mean, selection["threshold"])
        by_mean = selection["seeds"] == "mean"
        summary.append({
            "task": task, "run_task": variants[task][0], "variant": variants[task][1], "model": model, "dataset_size": size, "lr": lr, "lengths": lengths, "seeds": sorted(seeds), "selection": selection,
            "score": (_mean_score([v["score"] for v in seeds.values()]) if by_mean else seeds[best_seed]["score"])[0],
            "headline": mean if by_mean else best,
            "best_seed": best_seed, "best": best, "mean": mean,
            "std": {n: statistics.pstdev(v) for n, v in per_length.items()},
            "per_seed": {s: {**seeds[s], "score": seeds[s]["score"][0]} for s in sorted(seeds)},
            "lr_scores": {x: score[0] for x, score in lr_scores.items()},
            "sequence_mean": {n: statistics.mean(v) for n, v in per_length_sequence.items()},
            "sequence_std": {n: statistics.pstdev(v) for n, v in per_length_sequence.items()},
            "sequence_differs": (task, model, size) in differs,
            "measured_mean": measured_mean,
            "extrapolates": {n: n <= reached for n in lengths},
        })
    return sorted(summary, key=lambda e: (e["task"], e["model"], e["dataset_size"] or 0))


def data_efficiency(summary: list[dict]) -> list[dict]:
    """Accuracy against training-set size (Ebrahimi & Memisevic 2025, Fig. 2), read off `summarize`:
    one entry per (task, model) with runs on fixed training sets: task, model, length (the task's
    longest evaluation length) and by_size {N: {mean, std, best}}, the scaled accuracy at that
    length over seeds at the lr the selection rule picked for that N (None where not evaluated).
    Empty unless the runs of some task differ in N."""
    out = []
    for task in sorted({e["task"] for e in summary}):
        entries = [e for e in summary if e["task"] == task and e["dataset_size"] is not None]
        if len({e["dataset_size"] for e in entries}) < 2:
            continue
        length = max(n for e in entries for n in e["lengths"])
        for model in sorted({e["model"] for e in entries}):
            by_size = {e["dataset_size"]: {k: e[k].get(length) for k in ("mean", "std", "best")}
                       for e in entries if e["model"] == model}
            out.append({"task": task, "model": model, "length": length, "by_size": dict(sorted(by_size.items()))})
    return out


def planned_ids(store, experiment: str) -> set[str] | None:
    """Ids of the runs the experiment's latest plan expects (None for a store written before plans)."""
    plan = store.plan(experiment)
    return None if plan is None else {r["id"] for r in plan["runs"]}


def experiment_summary(store, experiment: str, selection: dict | None = None) -> list[dict]:
    """`summarize` of the experiment's planned runs, under the selection rule of its spec."""
    plan = store.plan(experiment)
    if selection is None and plan is not None:
        selection = selection_of(plan["spec"])
    return summarize(store.results(experiment, planned_ids(store, experiment)), selection)
