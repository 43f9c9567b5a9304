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

import math
import statistics
from collections import defaultdict
from dataclasses import dataclass

from statetrack.checks import check_value
from statetrack.errors import StatetrackError
from statetrack.experiments.spec import by_settings, covers, paper_of
from statetrack.labels import split_variant_label, variant_label
from statetrack.schema import FIT_THRESHOLD, SELECTION_DEFAULTS, selection_of
from statetrack.store import RESULT_KEYS
from statetrack.training.evaluate import extrapolation_length, run_score


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


def summarize(rows: list[dict], selection: dict | None = None, train_length: dict | None = None) -> list[dict]:
    """Rows of `Store.results` -> one entry per (task, model, dataset_size) with the selected figures.

    The learning rate is chosen on the training lengths only: each run's criterion is computed over
    its evaluation lengths up to the longest training length of its task (`train_length`: run task ->
    length, as `planned_names` gives it), never over the test lengths; where no such length was
    evaluated, or `train_length` does not name the task, over every length.

    Each entry: task, run_task and variant (an evaluation variant's entry has task
    "<run_task> [<variant>]"), model, dataset_size (None for fresh batches), lr (selected), lengths, seeds,
    selection, score (the headline's criterion value), headline (per-length scaled accuracy: mean
    over seeds or the best seed's), best and best_seed, mean and std (per length over seeds at the
    selected lr; the sample std), per_seed ({seed: {scaled, accuracy, sequence, score}} at that lr),
    lr_scores ({lr: score under the lr rule}), sequence_mean and sequence_std (sequence accuracy per
    length over the seeds at the selected lr that measured it) and sequence_differs (some run of the
    entry, at any lr, has a sequence accuracy other than its accuracy: only then is it worth a table
    of its own).
    """
    selection = {**SELECTION_DEFAULTS, **(selection or {})}
    groups, variants, differs = _seed_records(rows, selection, train_length)

    def lr_score(runs_at_lr: dict) -> tuple:  # the lr rule's score of one lr's runs ({seed: record})
        scores = [s["train_score"] for s in runs_at_lr.values()]
        return _mean_score(scores) if selection["lr"] == "best_mean" else max(scores)

    summary = []
    for (task, model, size), by_lr in groups.items():
        lr_scores = {lr: lr_score(by_lr[lr]) for lr in sorted(by_lr)}
        lr = max(sorted(by_lr), key=lambda x: lr_scores[x])  # ties: the smallest lr
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
                "sequence_differs": (task, model, size) in differs,
            }
        )
    return sorted(summary, key=lambda e: (e["task"], e["model"], e["dataset_size"] or 0))


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


def _selected_figures(seeds: dict, selection: dict) -> dict:
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


def still_learning(curve: list[dict], drop: float = 0.05) -> bool:
    """Whether a run's training loss was still falling when its budget ended: over the last fifth of
    its logged steps, the mean loss of the later half is at least `drop` (relative) and 1e-3
    (absolute) below that of the earlier half. Its figures then say what the budget allowed, not
    what the model can learn. Needs four points in that fifth; False otherwise."""
    if not curve:
        return False
    last = curve[-1]["step"]
    tail = [p["loss"] for p in curve if p["step"] > 0.8 * last and p["loss"] is not None and math.isfinite(p["loss"])]
    if len(tail) < 4:
        return False
    earlier, later = statistics.mean(tail[: len(tail) // 2]), statistics.mean(tail[len(tail) // 2 :])
    return earlier - later >= max(drop * earlier, 1e-3)


def learning_runs(runs: list[dict], plan: dict, curves) -> set[str]:
    """The ids of the done runs that used their whole budget (the plan's steps) with the training
    loss still falling at the end (`still_learning` of `curves(run id)`): their figures say what
    the budget allowed. A diverged run is not among them."""
    budgets = {p["id"]: p.get("steps") for p in plan["runs"]}
    return {
        r["id"]
        for r in runs
        if r["status"] == "done"
        and r.get("diverged_at") is None
        and r["steps"] is not None
        and r["steps"] >= (budgets.get(r["id"]) or r["steps"])
        and still_learning(curves(r["id"]))
    }


def fit_table(scored: Scored, learning: set[str] | None) -> list[dict]:
    """Whether each model learned what it was trained on, one entry per task and model (and
    training-set size) at the selected lr: {task, model, dataset_size, lr, length (the task's
    longest training length), measure and threshold (the fit gate's: `paper.measure` and
    `paper.fit`, else scaled accuracy and FIT_THRESHOLD), figures ({seed: figure at length}),
    fitted (the seeds at or above the threshold), steps ({seed: steps trained}), budget (the plan's
    steps) and learning (the seeds whose runs are in `learning`, see `learning_runs`; None where
    that was not recorded, as in a snapshot exported before it was)}. The figure
    is read on `paper.fit_variant` where the spec names one, as the fit gate reads it."""
    paper = scored.paper or {}
    measure = paper.get("measure", "scaled")
    measure = measure if measure in ("scaled", "sequence", "extrapolation") else "scaled"
    threshold = paper.get("fit") or FIT_THRESHOLD
    variant = (paper.get("claims") or [{}])[0].get("fit_variant") if paper else None
    plan_by_key = {(p["task"], p["model"], p.get("dataset_size"), p["lr"], p["seed"]): p for p in scored.plan["runs"]}
    stored = {r["id"]: r for r in scored.runs}
    out = []
    for e in scored.summary:
        if e["variant"] or e.get("train_length") is None:
            continue
        trained = _trained_entry(e, scored.summary, variant)
        length = e["train_length"]
        figures = {s: fit_figure(trained["per_seed"][s], measure, length) for s in trained["per_seed"]}
        planned = {s: plan_by_key.get((e["task"], e["model"], e["dataset_size"], e["lr"], s)) for s in e["seeds"]}
        steps = {s: stored[p["id"]]["steps"] for s, p in planned.items() if p and stored.get(p["id"], {}).get("steps")}
        out.append(
            {
                "task": e["task"],
                "model": e["model"],
                "dataset_size": e["dataset_size"],
                "lr": e["lr"],
                "length": length,
                "measure": measure,
                "threshold": threshold,
                "figures": figures,
                "fitted": [s for s, v in figures.items() if v is not None and v >= threshold - 1e-9],
                "steps": steps,
                "budget": max((p.get("steps") or 0 for p in planned.values() if p), default=None),
                "learning": None if learning is None else [s for s, p in planned.items() if p and p["id"] in learning],
            }
        )
    return out


def data_efficiency(summary: list[dict]) -> list[dict]:
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


@dataclass
class RunData:
    """Per-run records beyond the figures, read from the store once for the report's plots: training
    curves, every evaluation row (each variant's, with its metrics and accuracy per position) and the
    kept traces, by run id. Served with the store's own signatures (`curves`, `evals`, `traces`)."""

    curves_by_run: dict[str, list[dict]]
    evals_by_run: dict[str, list[dict]]
    traces_by_run: dict[str, list[dict]]

    def curves(self, run_id: str) -> list[dict]:
        return self.curves_by_run.get(run_id, [])

    def evals(self, run_id: str, variant: str | None = "") -> list[dict]:
        rows = self.evals_by_run.get(run_id, [])
        return rows if variant is None else [r for r in rows if r.get("variant", "") == variant]

    def traces(self, run_id: str) -> list[dict]:
        return self.traces_by_run.get(run_id, [])


@dataclass
class Scored:
    """One experiment scored once (`score`): its latest plan, the stored rows of the plan's runs, the
    selection rule and the summary it gives, what the plan runs (`planned_names`), the paper and the
    claims' verdicts, and the planned runs that are not done. The report, the index, `statetrack
    results`, `statetrack run`'s summary and the book render it; none of them scores again."""

    experiment: str
    plan: dict
    runs: list[dict]
    selection: dict
    summary: list[dict]
    planned: dict
    paper: dict | None
    verdicts: list[dict]
    missing: list[dict]
    others: int = 0  # runs of this experiment in the store that the latest plan does not hold
    data: RunData | None = None

    @property
    def spec(self) -> dict:
        return self.plan["spec"]

    @property
    def scale(self) -> str | None:
        return self.plan.get("scale")

    @property
    def description(self) -> str:
        return self.spec.get("description", "")

    @property
    def train_length(self) -> dict[str, int]:
        """{task: its longest training length}, every curriculum stage counted (as the plan records it)."""
        return self.planned["train_length"]


def missing_runs(plan: dict, runs: list[dict]) -> list[dict]:
    """The plan's runs that are not done: the plan's entry with status 'not started', 'running or
    interrupted' or 'failed' and the error of a failed one."""
    stored = {r["id"]: r for r in runs}
    missing = []
    for r in plan["runs"]:
        row = stored.get(r["id"])
        if row is None or row["status"] != "done":
            status = (
                "not started" if row is None else "running or interrupted" if row["status"] == "running" else "failed"
            )
            missing.append({**r, "status": status, "error": row.get("error") if row else None})
    return missing


def _within_training(scaled: dict, measured: dict, longest: int | None) -> tuple[dict, dict]:
    """The per-length figures at the training lengths (up to `longest`), or all of them when none is."""
    keep = [n for n in scaled if longest is not None and n <= longest]
    if not keep:
        return scaled, measured
    return {n: scaled[n] for n in keep}, {n: measured[n] for n in keep if n in measured}


def score(
    experiment: str,
    plan: dict,
    runs: list[dict],
    results: list[dict],
    *,
    paper: dict | None = None,
    selection: dict | None = None,
    others: int = 0,
    data: RunData | None = None,
) -> Scored:
    """Score an experiment from its plan (`Store.plan`), the stored rows of the plan's runs
    (`Store.runs`) and their results (`Store.results`), or the same from a book snapshot.
    `paper` and `selection` (the spec's sections as they are now) replace the plan's: editing a
    claim or the selection rule rescores without a run."""
    spec = plan["spec"]
    selection = selection_of({**spec, "selection": selection if selection is not None else spec.get("selection")})
    planned = planned_names(plan)
    assert planned is not None  # the names of a plan
    summary = with_train_lengths(summarize(results, selection, planned.get("train_length")), planned)
    resolved = paper_of({"name": experiment, "paper": paper if paper is not None else spec.get("paper")})
    resolved = by_settings(resolved, spec) if resolved else None
    verdicts = claim_verdicts(resolved, summary, planned) if resolved else []
    return Scored(
        experiment, plan, runs, selection, summary, planned, resolved, verdicts, missing_runs(plan, runs), others, data
    )


def score_store(
    store, experiment: str, *, paper: dict | None = None, selection: dict | None = None, run_data: bool = False
) -> Scored:
    """`score` of the experiment's latest plan in `store`, each table read once; `run_data`: also
    read the per-run records the report's plots draw (`RunData`)."""
    plan = store.plan(experiment)
    if plan is None:
        raise StatetrackError(
            f"experiment {experiment!r} has no plan in {store.path}: `statetrack run {experiment}` records one"
        )
    ids = {r["id"] for r in plan["runs"]}
    stored = store.runs(experiment)
    runs = [r for r in stored if r["id"] in ids]
    data = None
    if run_data:
        done = [r["id"] for r in runs if r["status"] == "done"]
        data = RunData(
            {i: store.curves(i) for i in done},
            {i: store.evals(i, None) for i in done},
            {i: store.traces(i) for i in done},
        )
    return score(
        experiment,
        plan,
        runs,
        store.results(experiment, ids),
        paper=paper,
        selection=selection,
        others=len(stored) - len(runs),
        data=data,
    )


def with_train_lengths(summary: list[dict], planned: dict | None) -> list[dict]:
    """The summary with each entry's `train_length`: the longest training length of its task in the
    plan (None where the plan does not record it), so that tables can mark the lengths in distribution."""
    train = (planned or {}).get("train_length", {})
    for e in summary:
        e["train_length"] = train.get(e.get("run_task", e["task"]))
    return summary


# ---- the paper's figures and claims beside the measured ones ----------------------------------------
# A spec's `paper:` states what the paper reports, so that the report answers "did it reproduce?".
# Like `selection`, it is no part of any run's id: adding or editing it retrains nothing.
PASS, FAIL, INCONCLUSIVE, NOT_MEASURED, NOT_RUN = "✓", "✗", "inconclusive", "not measured", "not run at this scale"
NOT_IN_RUN = "not in this run"  # it names a model or task of this scale that the run's overrides left out
VERDICTS = (PASS, FAIL, INCONCLUSIVE, NOT_MEASURED, NOT_RUN, NOT_IN_RUN)
MEASURE_TEXT = {
    "scaled": "headline scaled accuracy",
    "sequence": "sequence accuracy (mean over seeds)",
    "extrapolation": "longest test length extrapolated to",
}


def _within(length: int, lengths) -> bool:
    if lengths is None:
        return True
    return length == lengths if isinstance(lengths, int) else lengths[0] <= length <= lengths[1]


def _range_text(lengths) -> str:
    if lengths is None:
        return "at the test lengths"
    return f"at {lengths}" if isinstance(lengths, int) else f"in {lengths[0]}..{lengths[1]}"


def gate_length(entry: dict, claim: dict, lengths: list[int], planned: dict | None = None) -> int | None:
    """The longest training length at which the claim's model must have fit before the claim is
    read over `lengths` (the fit gate), or None where the claim is decided without it. Gated: a
    claim about extrapolation (a length beyond the training lengths, or the measure
    `extrapolation`), every comparison (`beats`), and every claim that a model succeeds (`at_least`):
    a run that did not fit what it was trained on tells nothing of what the model can learn, only
    that its budget was short, so such a claim within the training lengths is ✓ or inconclusive.
    Not gated: a claim that a model fails at the training lengths themselves (`below` within them),
    one whose plan does not record its training lengths, one on a metric (its own scale says
    nothing of fit), and one whose `fit` is 0 (a claim that the model cannot learn the task at all,
    so that failing at the training lengths is the claim itself)."""
    train = (planned or {}).get("train_length", {}).get(entry.get("run_task", entry["task"]))
    if train is None or claim["fit"] <= 0 or claim["measure"].startswith("metric:"):
        return None
    beyond = claim["measure"] == "extrapolation" or max(lengths) > train
    return train if beyond or claim["test"] in ("beats", "at_least") else None


def fit_figure(record: dict, measure: str, length: int) -> float | None:
    """One seed's in-distribution figure at `length` on the claim's measure: scaled accuracy for
    `scaled`, sequence accuracy for `sequence`, the selection's metric for `extrapolation`; None
    when that length was not evaluated."""
    return {"sequence": record["sequence"], "extrapolation": record["measured"]}.get(measure, record["scaled"]).get(
        length
    )


def claim_lengths(
    entry: dict, measure: str, lengths, planned: dict | None = None
) -> tuple[list[int] | None, str | None]:
    """The evaluation lengths a figure over `lengths` (a length, [shortest, longest] or None: all)
    reads for `entry`, or (None, why not): the lengths the plan evaluates its task at (`planned`,
    see `planned_names`; the entry's own lengths for a plan that does not record them) within the
    range, every one of which must have been measured. A range reaching beyond the longest training
    length (and the measure `extrapolation`) is about extrapolation: it must hold an evaluated length
    beyond that training length, so that training-length figures alone never pass it."""
    task = entry.get("run_task", entry["task"])
    known = (planned or {}).get("lengths", {}).get(task)
    pool = sorted(known) if known else entry["lengths"]
    picked = pool if measure == "extrapolation" else [n for n in pool if _within(n, lengths)]
    if not picked:
        return None, f"no evaluation length {_range_text(lengths)} in the plan"
    train = (planned or {}).get("train_length", {}).get(task)
    upper = None if lengths is None else lengths if isinstance(lengths, int) else lengths[1]
    about_extrapolation = measure == "extrapolation" or (upper is not None and train is not None and upper > train)
    if about_extrapolation and train is not None and max(picked) <= train:
        return None, f"no evaluation length {_range_text(lengths)} beyond the longest training length {train}"
    return picked, None


def _seed_values(record: dict, measure: str) -> dict:
    """{length: value} of one seed's run for `measure` (`extrapolation` reads the selection's metric)."""
    if measure.startswith("metric:"):
        return record["metrics"].get(measure[len("metric:") :], {})
    return {"scaled": record["scaled"], "sequence": record["sequence"], "extrapolation": record["measured"]}[measure]


def seed_figure(record: dict, measure: str, lengths: list[int], test: str, threshold: float = 0.9) -> float | None:
    """One seed's figure for a claim over `lengths` (each must be measured, else None): the length it
    extrapolates to for `extrapolation`; otherwise the worst length for `at_least` (the minimum) and
    `below` (the maximum), so that the claim holds at every length of its range, and the mean over
    the lengths for `beats`."""
    values = _seed_values(record, measure)
    if any(values.get(n) is None for n in lengths):
        return None
    picked = [values[n] for n in lengths]
    if measure == "extrapolation":
        return extrapolation_length(dict(zip(lengths, picked)), threshold)
    return min(picked) if test == "at_least" else max(picked) if test == "below" else statistics.mean(picked)


def measured(entry: dict, measure: str = "scaled", lengths=None, planned: dict | None = None) -> float | None:
    """An entry of `summarize` as one figure, the paper's figure's counterpart: `scaled` (its
    headline scaled accuracy), `sequence` (sequence accuracy, mean over seeds) or `metric:NAME` (a
    metric of the runs, e.g. the total-variation distance `metric:tv_distance`, mean over seeds),
    each averaged over the planned test lengths within `lengths` (see `claim_lengths`), or
    `extrapolation` (the longest test length it extrapolates to, 0 when none). None when a length it
    needs was not measured."""
    picked, _ = claim_lengths(entry, measure, lengths, planned)
    if picked is None:
        return None
    if measure == "extrapolation":
        return (
            max((n for n in picked if entry["extrapolates"].get(n)), default=0)
            if all(n in entry["extrapolates"] for n in picked)
            else None
        )
    if measure.startswith("metric:"):
        values = entry.get("metrics_mean", {}).get(measure[len("metric:") :], {})
    else:
        values = entry["headline"] if measure == "scaled" else entry["sequence_mean"]
    if any(values.get(n) is None for n in picked):
        return None
    return statistics.mean(values[n] for n in picked)


def seed_spread(entry: dict, paper: dict, planned: dict | None = None) -> list[float]:
    """Each seed's own figure for the paper's measure over its lengths (the mean over the lengths;
    for `extrapolation` the length it extrapolates to), for the seeds that measured all of them."""
    lengths, _ = claim_lengths(entry, paper["measure"], paper["lengths"], planned)
    if lengths is None:
        return []
    figures = [
        seed_figure(r, paper["measure"], lengths, "beats", entry["selection"]["threshold"])
        for r in entry["per_seed"].values()
    ]
    return [f for f in figures if f is not None]


def paper_figures(paper: dict, summary: list[dict], planned: dict | None = None) -> list[dict]:
    """One row per (task, model) entry of the summary, with the paper's figure where it gives one and
    the measured figure (`paper.measure` over `paper.lengths`); then the paper's figures for models
    and tasks the plan does not run or has not finished (measured None; run False when the plan does
    not run them). Row: task, model, dataset_size, paper, measured, run, seeds (`seed_spread`)."""
    rows, used = [], set()
    for e in summary:
        figure = None
        for key in (e["task"], None):
            names = [name for name in paper["figures"].get(key, {}) if covers(name, e["model"])]
            if names:
                used.add((key, names[0]))
                figure = paper["figures"][key][names[0]]
                break
        rows.append(
            {
                "task": e["task"],
                "model": e["model"],
                "dataset_size": e["dataset_size"],
                "paper": figure,
                "measured": measured(e, paper["measure"], paper["lengths"], planned),
                "run": True,
                "seeds": seed_spread(e, paper, planned),
            }
        )
    for task, by_model in paper["figures"].items():
        for model, figure in by_model.items():
            if (task, model) not in used:
                run = _planned("model", model, planned) and (task is None or _planned("task", task, planned))
                rows.append(
                    {
                        "task": task or "",
                        "model": model,
                        "dataset_size": None,
                        "paper": figure,
                        "measured": None,
                        "run": run,
                        "seeds": [],
                    }
                )
    return rows


def planned_names(plan: dict | None) -> dict | None:
    """What the experiment's latest plan runs, for the claims: {models (labels), tasks (training
    tasks), scale, lengths ({task: evaluation lengths}), train_length ({task: longest training
    length}), seeds ({(model, task, dataset_size, lr): seeds}), left_out (the model and task names of
    this scale that the run's overrides took out)}; None without a plan."""
    if plan is None:
        return None
    lengths: defaultdict[str, set[int]] = defaultdict(set)
    train: dict[str, int] = {}
    seeds: defaultdict[tuple, set[int]] = defaultdict(set)
    for r in plan["runs"]:
        lengths[r["task"]].update(r.get("lengths") or [])
        if r.get("train_length") is not None:
            train[r["task"]] = max(train.get(r["task"], 0), r["train_length"])
        seeds[(r["model"], r["task"], r.get("dataset_size"), r["lr"])].add(r["seed"])
    return {
        "models": {r["model"] for r in plan["runs"]},
        "tasks": {r["task"] for r in plan["runs"]},
        "scale": plan.get("scale"),
        "lengths": {t: sorted(v) for t, v in lengths.items() if v},
        "train_length": train,
        "seeds": dict(seeds),
        "left_out": set(plan["spec"].get("left_out") or ()),
    }


def _planned(kind: str, name: str, planned: dict | None) -> bool:
    """Whether the plan runs a model `name` covers, or task `name` (an evaluation variant of a planned task too)."""
    if planned is None:
        return True
    if kind == "model":
        return any(covers(name, m) for m in planned["models"])
    return name in planned["tasks"] or split_variant_label(name)[0] in planned["tasks"]


def seeds_verdict(outcomes: list, rule: str = "majority") -> bool | None:
    """Per-seed outcomes (True, False, None: not measured) -> whether the claim holds under `rule`:
    `majority` more than half of the seeds pass, `all` every one, `best` at least one; None while
    the seeds not measured could still decide it."""
    n, k, failed = len(outcomes), sum(o is True for o in outcomes), sum(o is False for o in outcomes)
    unknown = n - k - failed
    if rule == "all":
        return False if failed else True if not unknown and n else None
    if rule == "best":
        return True if k else False if not unknown and n else None
    return True if 2 * k > n else False if n and 2 * (k + unknown) <= n else None


def _passes(test: str, value: float, bound) -> bool:
    if test == "at_least":
        return value >= bound - 1e-9
    return value < bound if test == "below" else value > bound


def _entry_figure(entry: dict, claim: dict, lengths: list[int], planned: dict | None) -> tuple[dict, float | None]:
    """({seed: its figure or None} over the seeds the plan runs at the entry's lr, mean of those measured)."""
    key = (entry["model"], entry.get("run_task", entry["task"]), entry["dataset_size"], entry["lr"])
    seeds = sorted((planned or {}).get("seeds", {}).get(key) or entry["seeds"])
    threshold = entry["selection"]["threshold"]
    figures = {
        s: seed_figure(entry["per_seed"][s], claim["measure"], lengths, claim["test"], threshold)
        if s in entry["per_seed"]
        else None
        for s in seeds
    }
    values = [v for v in figures.values() if v is not None]
    return figures, statistics.mean(values) if values else None


def claim_verdicts(paper: dict, summary: list[dict], planned: dict | None = None) -> list[dict]:
    """Each claim of `paper` checked against the summary, seed by seed:
    {claim, verdict, results, missing, unplanned, reason}.

    A claim covers the models and tasks it names (`covers`) at the scales it names. Each (task,
    model) entry it covers is scored per seed at the selected lr (`seed_figure` over `claim_lengths`:
    every planned length of its range measured, extrapolation claims beyond the training lengths) and
    the seeds decide under the claim's rule (`seeds_verdict`). Result per entry: {task, model,
    dataset_size, value (mean over the seeds' figures), rival (`beats`: the best mean figure of the
    rival models on the same task and training-set size), seeds ({seed: figure}), passed, of (seeds
    planned), holds, reason (why it is not measured or inconclusive), unfit ({seed: its figure at
    the longest training length, None when not evaluated there} for the seeds the fit gate set
    aside), train_length (the gate's length, None when not gated) and inconclusive}.

    The fit gate: a claim about extrapolation, and every comparison, is decided only on the seeds of
    its model that reached `claim["fit"]` on the claim's measure at the longest training length
    (`gate_length`, `fit_figure`); the other seeds count as undecided, so that no ✓ or ✗ rests on a
    model that did not learn what it was trained on. A comparison gates the model claimed to win,
    not the ones it beats. missing: planned models (or model on task) without a finished entry;
    unplanned: what it names that this plan does not run (`planned`, from `planned_names`; None: all
    it names). Verdict (`_verdict`): ✗ when some entry fails under the seed rule, else "not in this
    run" when what it names that the plan does not run was left out by the run's overrides
    (`left_out`), else "not run at this scale" when it names a scale, model or task the plan does
    not run, else "not measured" when something is missing or unmeasured, else "inconclusive" when
    the gate left the seed rule undecided, else ✓. A claim on a check (`measure: check:NAME`) reads
    no runs: its scale decides whether it is tested, then `check_verdict`."""
    return [_claim_verdict(claim, summary, planned) for claim in paper["claims"]]


def _claim_verdict(claim: dict, summary: list[dict], planned: dict | None) -> dict:
    """One claim's verdict (`claim_verdicts`)."""
    if claim["scales"] and planned is not None and planned.get("scale") not in claim["scales"]:
        return {
            "claim": claim,
            "verdict": NOT_RUN,
            "results": [],
            "missing": [],
            "unplanned": [],
            "reason": f"a claim of the {' and '.join(claim['scales'])} scale",
        }
    if claim["measure"].startswith("check:"):
        return check_verdict(claim)
    models = [m for m in claim["models"] if _planned("model", m, planned)]
    tasks = None if claim["tasks"] is None else [t for t in claim["tasks"] if _planned("task", t, planned)]
    rivals = [m for m in claim["bound"] if _planned("model", m, planned)] if claim["test"] == "beats" else []
    unplanned = [
        n for n in claim["models"] + (claim["bound"] if claim["test"] == "beats" else []) if n not in models + rivals
    ]
    if tasks is not None:  # (None exactly when the claim names no task)
        unplanned += [t for t in claim["tasks"] if t not in tasks]
    results: list[dict] = []
    missing: list[str] = []
    for model in models if tasks != [] and (claim["test"] != "beats" or rivals) else []:
        entries = [
            e
            for e in summary
            if covers(model, e["model"])
            and (tasks is None or e["task"] in tasks)
            and claim["dataset_size"] in (None, e["dataset_size"])
        ]
        missing += (
            [model]
            if not entries
            else [f"{model} on {t}" for t in tasks or [] if t not in {e["task"] for e in entries}]
        )
        for e in entries:
            result, rivals_missing = _entry_result(claim, e, summary, rivals, planned)
            results.append(result)
            missing += rivals_missing
    verdict, reason = _verdict(results, list(dict.fromkeys(missing)), unplanned, planned)
    return {
        "claim": claim,
        "verdict": verdict,
        "results": results,
        "missing": list(dict.fromkeys(missing)),
        "unplanned": unplanned,
        "reason": reason,
    }


def _entry_result(
    claim: dict, e: dict, summary: list[dict], rivals: list[str], planned: dict | None
) -> tuple[dict, list[str]]:
    """One (task, model) entry of a claim, scored seed by seed behind the fit gate (`claim_verdicts`
    gives its keys), and the rivals it has no entry of on the same task."""
    missing: list[str] = []
    lengths, why = claim_lengths(e, claim["measure"], claim["lengths"], planned)
    figures: dict[int, float | None] = {}  # seed -> its figure
    unfit: dict[int, float | None] = {}  # seed -> its figure at the gate, below the fit threshold
    value: float | None = None
    rival: float | None = None
    gate: int | None = None
    if lengths is not None:
        figures, value = _entry_figure(e, claim, lengths, planned)
        gate = gate_length(e, claim, lengths, planned)
        if gate is not None:  # the fit gate: a seed that did not fit its training lengths decides nothing
            trained = _trained_entry(e, summary, claim["fit_variant"])
            fits = {
                s: fit_figure(trained["per_seed"][s], claim["measure"], gate)
                for s in figures
                if s in trained["per_seed"]
            }  # a seed not finished yet is "not measured", not unfit
            unfit = {s: v for s, v in fits.items() if v is None or v < claim["fit"] - 1e-9}
    if claim["test"] == "beats" and lengths is not None:
        against = {
            name: [
                _entry_figure(r, claim, lengths, planned)[1]
                for r in summary
                if covers(name, r["model"]) and (r["task"], r["dataset_size"]) == (e["task"], e["dataset_size"])
            ]
            for name in rivals
        }
        missing += [f"{name} on {e['task']}" for name, values in against.items() if not values]
        values = [v for vs in against.values() for v in vs]
        rival = None if not values or None in values else max(v for v in values if v is not None)
        why = why or (None if rival is not None else "a rival not measured")
    bound = rival if claim["test"] == "beats" else claim["bound"]
    outcomes = [
        None if v is None or bound is None or s in unfit else _passes(claim["test"], v, bound)
        for s, v in figures.items()
    ]
    holds = seeds_verdict(outcomes, claim["seeds"]) if lengths is not None else None
    unmeasured = sum(o is None for s, o in zip(figures, outcomes) if s not in unfit)
    inconclusive = holds is None and why is None and bool(unfit)
    if inconclusive:
        assert gate is not None  # only a gated claim has unfit seeds
        why = unfit_text(e["model"], unfit, gate)
    elif holds is None and why is None and unmeasured:
        why = f"{unmeasured} of {len(outcomes)} seeds not measured"
    result = {
        "task": e["task"],
        "model": e["model"],
        "dataset_size": e["dataset_size"],
        "value": value,
        "rival": rival,
        "seeds": figures,
        "passed": sum(o is True for o in outcomes),
        "of": len(outcomes),
        "holds": holds,
        "reason": why,
        "unfit": unfit,
        "train_length": gate,
        "inconclusive": inconclusive,
    }
    return result, missing


def _verdict(results: list[dict], missing: list[str], unplanned: list[str], planned: dict | None) -> tuple[str, str]:
    """A claim's verdict and its reason from its entries' results (the order `claim_verdicts` gives)."""
    if any(r["holds"] is False for r in results):
        return FAIL, ""
    if unplanned and all(
        any(n == label or covers(n, label) for label in (planned or {}).get("left_out", ())) for n in unplanned
    ):
        return NOT_IN_RUN, "left out by this run's overrides: " + ", ".join(unplanned)
    if unplanned:
        return NOT_RUN, "not run at this scale: " + ", ".join(unplanned)
    if missing or not results or any(r["holds"] is None and not r["inconclusive"] for r in results):
        reasons = [r["reason"] for r in results if r["reason"]] + (
            ["not run yet: " + ", ".join(missing)] if missing else []
        )
        return NOT_MEASURED, "; ".join(dict.fromkeys(reasons))
    if any(r["inconclusive"] for r in results):
        return INCONCLUSIVE, "; ".join(dict.fromkeys(r["reason"] for r in results if r["inconclusive"]))
    return PASS, ""


def check_verdict(claim: dict) -> dict:
    """The verdict of a claim on a check (`measure: check:NAME`, `statetrack.analysis.checks`): the
    check's figure, computed here without training, against the claim's bound; ✓ or ✗, whatever the
    runs. Its one result has the figure as `value`, no seeds (`of` 1) and the claim's models as `model`."""
    value = check_value(claim["measure"].removeprefix("check:"))
    holds = _passes(claim["test"], value, claim["bound"])
    result: dict = {
        "task": "",
        "model": ", ".join(claim["models"]),
        "dataset_size": None,
        "value": value,
        "rival": None,
        "seeds": {},
        "passed": int(holds),
        "of": 1,
        "holds": holds,
        "reason": None,
        "unfit": {},
        "train_length": None,
        "inconclusive": False,
    }
    return {
        "claim": claim,
        "verdict": PASS if holds else FAIL,
        "results": [result],
        "missing": [],
        "unplanned": [],
        "reason": "",
    }


def _trained_entry(entry: dict, summary: list[dict], variant: str | None = None) -> dict:
    """The summary entry on which the fit of `entry`'s runs is read: the same runs scored on the task
    they trained on, or on the evaluation variant `variant` (`paper.fit_variant`) where that task's
    own targets are partly unpredictable; `entry` itself when it is that one or none is found."""
    task = variant_label(entry.get("run_task", entry["task"]), variant)
    return next(
        (
            e
            for e in summary
            if (e["task"], e["model"], e["dataset_size"], e["lr"])
            == (task, entry["model"], entry["dataset_size"], entry["lr"])
        ),
        entry,
    )


def unfit_text(model: str, unfit: dict, length: int) -> str:
    """Why a claim is inconclusive: "LSTM did not fit its training lengths (0.14, 0.20 at 16)"."""
    measured = [v for v in unfit.values() if v is not None]
    if not measured:
        return f"{model} not evaluated at its longest training length {length}"
    figures = ", ".join(f"{v:.3f}" for v in measured)
    return f"{model} did not fit its training lengths ({figures} at {length}" + (
        f"; {len(unfit) - len(measured)} seed(s) not evaluated there)" if len(measured) < len(unfit) else ")"
    )


def verdict_counts(verdicts: list[dict]) -> dict:
    """{verdict: how many claims have it} over the five verdicts."""
    return {v: sum(1 for x in verdicts if x["verdict"] == v) for v in VERDICTS}
