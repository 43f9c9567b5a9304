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

from statetrack.errors import StatetrackError, check_keys
from statetrack.store import RESULT_KEYS

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
    runs: dict = defaultdict(lambda: ({}, {}, {}, {}))  # ... and {metric: {length: value}} of the model's or task's metrics
    differs: set = set()  # (task, model, N) with a sequence accuracy that is not the accuracy
    variants: dict = {}  # task -> (the runs' task, the evaluation variant; '' for the training task)
    for r in rows:
        variant = r.get("variant") or ""
        variants[r["task"]] = (r["task"][: -len(f" [{variant}]")] if variant else r["task"], variant)
        scaled, accuracy, sequence, metrics = runs[(r["task"], r["model"], r.get("dataset_size"), r["lr"], r["seed"])]
        for name in set(r) - set(RESULT_KEYS):  # e.g. tv_distance, iterations_median
            if isinstance(r[name], (int, float)):
                metrics.setdefault(name, {})[r["length"]] = r[name]
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
    for (task, model, size, lr, seed), (scaled, accuracy, sequence, metrics) in runs.items():
        measured = sequence if selection["metric"] == "sequence_accuracy" else accuracy
        groups[(task, model, size)][lr][seed] = {"scaled": scaled, "accuracy": accuracy, "sequence": sequence, "measured": measured,
                                                 "metrics": metrics, "score": run_score(scaled, measured, selection)}
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
            "metrics_mean": {name: {n: statistics.mean(vs) for n in lengths
                                    if (vs := [v["metrics"][name][n] for v in seeds.values() if n in v["metrics"].get(name, {})])}
                             for name in sorted({m for v in seeds.values() for m in v["metrics"]})},
        })
    return sorted(summary, key=lambda e: (e["task"], e["model"], e["dataset_size"] or 0))


def data_efficiency(summary: list[dict]) -> list[dict]:
    """Accuracy against training-set size (Ebrahimi & Memisevic 2025, Fig. 2), read off `summarize`:
    one entry per (task, model) with runs on fixed training sets: task, model, length (the task's
    longest evaluation length) and by_size {N: {mean, std, best, seeds}}, the scaled accuracy at that
    length over seeds (and how many seeds measured it) at the lr the selection rule picked for that N (None where not evaluated).
    Empty unless the runs of some task differ in N."""
    out = []
    for task in sorted({e["task"] for e in summary}):
        entries = [e for e in summary if e["task"] == task and e["dataset_size"] is not None]
        if len({e["dataset_size"] for e in entries}) < 2:
            continue
        length = max(n for e in entries for n in e["lengths"])
        for model in sorted({e["model"] for e in entries}):
            by_size = {e["dataset_size"]: {**{k: e[k].get(length) for k in ("mean", "std", "best")},
                                           "seeds": sum(1 for r in e["per_seed"].values() if length in r["scaled"])}
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



# ---- the paper's figures and claims beside the measured ones ----------------------------------------
# A spec's `paper:` states what the paper reports, so that the report answers "did it reproduce?".
# Like `selection`, it is no part of any run's id: adding or editing it retrains nothing.
MEASURES = ("scaled", "sequence", "extrapolation")  # what a measured figure is: see `measured`
PAPER_KEYS = {
    "source": "where the figures come from, e.g. 'Grazzi et al. 2025, Table 2'",
    "metric": "what the paper's figures are, in words",
    "measure": "what the measured figure beside them is: scaled, sequence, extrapolation or metric:NAME (see `measured`)",
    "lengths": "the test lengths the measured figure averages over: one length or [shortest, longest] (default: all)",
    "figures": "the paper's figure (a number or a short text) per model: {model: figure}, or per task: {task: {model: figure}}",
    "claims": "the claims tested: a list of {text, model, [task], [dataset_size], [measure], [lengths], at_least|below|beats}",
}
CLAIM_KEYS = ("text", "model", "task", "dataset_size", "measure", "lengths", "at_least", "below", "beats")
CLAIM_TESTS = ("at_least", "below", "beats")  # measured >= x; measured < x; measured > that model's on the same task
PASS, FAIL, NOT_MEASURED = "✓", "✗", "not measured"
MEASURE_TEXT = {
    "scaled": "headline scaled accuracy",
    "sequence": "sequence accuracy (mean over seeds)",
    "extrapolation": "longest test length extrapolated to",
}


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _names(value, where: str) -> list[str]:
    """A name or a non-empty list of names, as a list."""
    names = [value] if isinstance(value, str) else value
    if not isinstance(names, list) or not names or not all(isinstance(n, str) and n for n in names):
        raise StatetrackError(f"{where} must be a name or a non-empty list of names, got {value!r}")
    return names


def _check_lengths(value, where: str):
    ok = (isinstance(value, int) and not isinstance(value, bool) and value >= 1) or (
        isinstance(value, list) and len(value) == 2 and all(isinstance(n, int) and not isinstance(n, bool) and n >= 1 for n in value)
        and value[0] <= value[1])
    if value is not None and not ok:
        raise StatetrackError(f"{where} must be a test length or [shortest, longest], got {value!r}")
    return value


def _check_measure(value, where: str) -> str:
    if value not in MEASURES and not (isinstance(value, str) and value.startswith("metric:") and len(value) > len("metric:")):
        raise StatetrackError(f"{where}: unknown measure {value!r}; expected one of: {', '.join(MEASURES)}, "
                              f"or metric:NAME for a metric the runs report (e.g. metric:tv_distance)")
    return value


def paper_of(spec: dict) -> dict | None:
    """The spec's `paper` with defaults filled in, checked (one-line errors naming what was expected);
    None when the spec has none. Figures become {task or None: {model: figure}} (None: every task);
    each claim gets `models`, `tasks` (None: every task of the experiment), `test` and `bound`."""
    paper = spec.get("paper")
    if paper is None:
        return None
    where = f"experiment {spec.get('name')!r}: paper"
    check_keys(paper, PAPER_KEYS, where)
    if not isinstance(paper.get("source"), str) or not paper["source"].strip():
        raise StatetrackError(f"{where}.source must say where the figures come from, e.g. 'Grazzi et al. 2025, Table 2'")
    if not isinstance(paper.get("metric", ""), str):
        raise StatetrackError(f"{where}.metric must be a text saying what the paper's figures are, got {paper['metric']!r}")
    measure = _check_measure(paper.get("measure", "scaled"), f"{where}.measure")
    lengths = _check_lengths(paper.get("lengths"), f"{where}.lengths")
    figures = paper.get("figures") or {}
    if not isinstance(figures, dict):
        raise StatetrackError(f"{where}.figures must map model names to figures (or task names to such mappings), got {figures!r}")
    per_task = any(isinstance(v, dict) for v in figures.values())
    grouped = figures if per_task else {None: figures}
    for task, by_model in grouped.items():
        if not isinstance(by_model, dict):
            raise StatetrackError(f"{where}.figures: give every figure per model or every one per task; {task!r} maps to {by_model!r}")
        for model, figure in by_model.items():
            if not (_is_number(figure) or (isinstance(figure, str) and figure)):
                raise StatetrackError(f"{where}.figures: the figure of {model!r} must be a number or a short text, got {figure!r}")
    claims = paper.get("claims") or []
    if not isinstance(claims, list):
        raise StatetrackError(f"{where}.claims must be a list of claims {{text, model, at_least|below|beats, ...}}, got {claims!r}")
    checked = []
    for i, claim in enumerate(claims):
        at = f"{where}.claims[{i}]"
        check_keys(claim, CLAIM_KEYS, at)
        if not isinstance(claim.get("text"), str) or not claim["text"].strip():
            raise StatetrackError(f"{at}.text must state the claim in words")
        if "model" not in claim:
            raise StatetrackError(f"{at} names no model; give model: NAME (or a list of names)")
        tests = [k for k in CLAIM_TESTS if k in claim]
        if len(tests) != 1:
            raise StatetrackError(f"{at} needs exactly one of {', '.join(CLAIM_TESTS)}, got {len(tests)}")
        test, bound = tests[0], claim[tests[0]]
        if test == "beats":
            if str(claim.get("measure", measure)).startswith("metric:"):
                raise StatetrackError(f"{at}: beats compares accuracies (higher is better); with a metric give at_least or below")
            bound = _names(bound, f"{at}.beats")
        elif not _is_number(bound):
            raise StatetrackError(f"{at}.{test} must be a number, got {bound!r}")
        size = claim.get("dataset_size")
        if size is not None and not (isinstance(size, int) and not isinstance(size, bool) and size >= 1):
            raise StatetrackError(f"{at}.dataset_size must be a positive integer, got {size!r}")
        checked.append({
            "text": " ".join(claim["text"].split()), "models": _names(claim["model"], f"{at}.model"),
            "tasks": _names(claim["task"], f"{at}.task") if "task" in claim else None, "dataset_size": size,
            "measure": _check_measure(claim.get("measure", measure), f"{at}.measure"),
            "lengths": _check_lengths(claim.get("lengths", lengths), f"{at}.lengths"), "test": test, "bound": bound,
        })
    return {"source": paper["source"].strip(), "metric": " ".join(paper.get("metric", "").split()), "measure": measure,
            "lengths": lengths, "figures": grouped, "claims": checked}


def check_paper_names(spec: dict, models, tasks) -> None:
    """Every model and task the spec's `paper` names is one of `models` (display names) and `tasks`
    (task names as in the tables, evaluation variants included): a typo is a one-line error."""
    paper = paper_of(spec)
    if paper is None:
        return
    where = f"experiment {spec.get('name')!r}: paper"

    def check(kind, name, known, at):
        if not any(covers(name, k) if kind == "model" else name == k for k in known):
            raise StatetrackError(f"{at}: unknown {kind} {name!r}; expected one of: {', '.join(sorted(map(str, known)))}")

    for task, by_model in paper["figures"].items():
        if task is not None:
            check("task", task, tasks, f"{where}.figures")
        for model in by_model:
            check("model", model, models, f"{where}.figures" + (f"[{task!r}]" if task else ""))
    for i, claim in enumerate(paper["claims"]):
        for model in claim["models"] + (claim["bound"] if claim["test"] == "beats" else []):
            check("model", model, models, f"{where}.claims[{i}]")
        for task in claim["tasks"] or []:
            check("task", task, tasks, f"{where}.claims[{i}]")


def covers(name: str, label: str) -> bool:
    """Whether a model name of `paper:` covers a model label of the tables: the same, or the label is
    the name with settings that tell twins apart ("Transformer" covers "Transformer (num_layers=2)")."""
    return label == name or label.startswith(name + " (")


def _within(length: int, lengths) -> bool:
    if lengths is None:
        return True
    return length == lengths if isinstance(lengths, int) else lengths[0] <= length <= lengths[1]


def measured(entry: dict, measure: str = "scaled", lengths=None) -> float | None:
    """An entry of `summarize` as one figure: `scaled` (its headline scaled accuracy) or `sequence`
    (sequence accuracy, mean over seeds) or `metric:NAME` (a metric of the runs, e.g. the
    total-variation distance `metric:tv_distance`, mean over seeds), each averaged over its test lengths within `lengths`
    (a length or [shortest, longest]; None: all), or `extrapolation` (the longest test length it
    extrapolates to, 0 when none). None when nothing was measured there."""
    if measure == "extrapolation":
        return max((n for n, ok in entry["extrapolates"].items() if ok), default=0)
    if measure.startswith("metric:"):
        values = entry.get("metrics_mean", {}).get(measure[len("metric:"):], {})
    else:
        values = entry["headline"] if measure == "scaled" else entry["sequence_mean"]
    picked = [v for n, v in values.items() if v is not None and _within(n, lengths)]
    return statistics.mean(picked) if picked else None


def paper_figures(paper: dict, summary: list[dict], planned: dict | None = None) -> list[dict]:
    """One row per (task, model) entry of the summary, with the paper's figure where it gives one and
    the measured figure (`paper.measure` over `paper.lengths`); then the paper's figures for models
    and tasks the plan runs (`planned`, see `claim_verdicts`) that have no finished entry yet
    (measured None, run False). Row: task, model, dataset_size, paper, measured, run."""
    rows, used = [], set()
    for e in summary:
        figure = None
        for key in (e["task"], None):
            names = [name for name in paper["figures"].get(key, {}) if covers(name, e["model"])]
            if names:
                used.add((key, names[0]))
                figure = paper["figures"][key][names[0]]
                break
        rows.append({"task": e["task"], "model": e["model"], "dataset_size": e["dataset_size"], "paper": figure,
                     "measured": measured(e, paper["measure"], paper["lengths"]), "run": True})
    for task, by_model in paper["figures"].items():
        for model, figure in by_model.items():
            if (task, model) not in used and _planned("model", model, planned) and (task is None or _planned("task", task, planned)):
                rows.append({"task": task or "", "model": model, "dataset_size": None, "paper": figure, "measured": None, "run": False})
    return rows


def planned_names(plan: dict | None) -> dict | None:
    """{models, tasks} the experiment's latest plan runs (model labels, training tasks); None without a plan."""
    if plan is None:
        return None
    return {"models": {r["model"] for r in plan["runs"]}, "tasks": {r["task"] for r in plan["runs"]}}


def _planned(kind: str, name: str, planned: dict | None) -> bool:
    """Whether the plan runs a model `name` covers, or task `name` (an evaluation variant of a planned task too)."""
    if planned is None:
        return True
    if kind == "model":
        return any(covers(name, m) for m in planned["models"])
    return name in planned["tasks"] or (name.endswith("]") and name[: name.rfind(" [")] in planned["tasks"])


def claim_verdicts(paper: dict, summary: list[dict], planned: dict | None = None) -> list[dict]:
    """Each claim of `paper` checked against the summary: {claim, verdict, results, missing, unplanned}.

    A claim covers the models and tasks it names that the experiment's plan runs (`planned`, from
    `planned_names`; None: all it names), so one claim serves every scale of a spec and a run whose
    `models=[...]` override leaves some out (unplanned: the names left aside). results: one {task,
    model, dataset_size, value, rival, holds} per (task, model) entry covered (`covers`; rival: the
    best figure of the `beats` models on the same task and training-set size, which the model must
    exceed); missing: planned models (or model on task) without a finished entry. Verdict: ✗ when
    some entry fails the claim, else "not measured" when something is missing or nothing is covered
    (another scale, runs not finished), else ✓."""
    out = []
    for claim in paper["claims"]:
        results, missing = [], []
        models = [m for m in claim["models"] if _planned("model", m, planned)]
        tasks = None if claim["tasks"] is None else [t for t in claim["tasks"] if _planned("task", t, planned)]
        rivals = [m for m in claim["bound"] if _planned("model", m, planned)] if claim["test"] == "beats" else []
        unplanned = [n for n in claim["models"] + (claim["bound"] if claim["test"] == "beats" else []) if n not in models + rivals]
        unplanned += [t for t in claim["tasks"] or [] if t not in tasks]
        for model in models if tasks != [] and (claim["test"] != "beats" or rivals) else []:
            entries = [e for e in summary if covers(model, e["model"]) and (tasks is None or e["task"] in tasks)
                       and claim["dataset_size"] in (None, e["dataset_size"])]
            missing += [model] if not entries else [f"{model} on {t}" for t in tasks or [] if t not in {e["task"] for e in entries}]
            for e in entries:
                value = measured(e, claim["measure"], claim["lengths"])
                rival = None
                if claim["test"] == "beats":
                    against = {name: [measured(r, claim["measure"], claim["lengths"]) for r in summary if covers(name, r["model"])
                                      and (r["task"], r["dataset_size"]) == (e["task"], e["dataset_size"])] for name in rivals}
                    missing += [f"{name} on {e['task']}" for name, values in against.items() if not values]
                    values = [v for vs in against.values() for v in vs]
                    rival = None if not values or None in values else max(values)
                if value is None or (claim["test"] == "beats" and rival is None):
                    holds = None
                elif claim["test"] == "at_least":
                    holds = value >= claim["bound"] - 1e-9
                elif claim["test"] == "below":
                    holds = value < claim["bound"]
                else:
                    holds = value > rival
                results.append({"task": e["task"], "model": e["model"], "dataset_size": e["dataset_size"], "value": value,
                                "rival": rival, "holds": holds})
        missing = list(dict.fromkeys(missing))
        verdict = (FAIL if any(r["holds"] is False for r in results)
                   else NOT_MEASURED if missing or not results or any(r["holds"] is None for r in results) else PASS)
        out.append({"claim": claim, "verdict": verdict, "results": results, "missing": missing, "unplanned": unplanned})
    return out


def verdict_counts(verdicts: list[dict]) -> dict:
    """{PASS: n, FAIL: n, NOT_MEASURED: n} over the claims' verdicts."""
    return {v: sum(1 for x in verdicts if x["verdict"] == v) for v in (PASS, FAIL, NOT_MEASURED)}
