"""Claims: the paper's figures and claims beside the measured ones, and their verdicts.

A spec's `paper:` states what the paper reports, so that the report answers "did it reproduce?": each
claim is tested seed by seed at the selected learning rate on `summarize`'s entries
(`statetrack.results.selection`), behind the fit gate (a model that did not learn its training
lengths decides no extrapolation claim). Like `selection`, `paper:` is no part of any run's id:
adding or editing a claim retrains nothing.
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from collections.abc import Callable, Mapping

from statetrack.checks import check_value
from statetrack.experiments.spec import covers
from statetrack.labels import split_variant_label, variant_label
from statetrack.results.selection import SummaryEntry, at_rate
from statetrack.schema import extrapolation_length
from statetrack.store import Plan

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


# ---- one rule for every kind of claim ----------------------------------------------------------------
# What a claim says decides how the fit of its model enters its verdict (`claim_kind`, `gate_length`).
FITS, FAILS, BEHAVES, COMPARES = "fits", "fails", "behaves", "compares"
KIND_TEXT = {  # each completes "A claim is ..." (the book's rules)
    FITS: "that a model fits its training lengths (succeeds there): decided by the fit itself, on every seed, "
    "so it is ✗ when most seeds do not fit at this budget (the budget is named)",
    FAILS: "that a model fails at its training lengths, or cannot learn the task at all (`fit: 0` in its spec): "
    "not gated, failing there is the claim",
    BEHAVES: "about how a model behaves beyond its training lengths, on another input distribution (an evaluation "
    "variant), or by an analysis figure (fixed-point iterations, a distance) at any length: read only on the "
    "seeds that fit",
    COMPARES: "a comparison: read on the seeds where the model it says wins fits; a rival that does not fit "
    "simply loses",
}


def claim_kind(claim: dict, lengths: list[int] | None, train: int | None, variant: str = "") -> str:
    """The kind of a claim, the one rule that says how fit enters its verdict:

    - `compares` (`beats`): read on the seeds where the model it says wins fits; the rivals are
      not gated (a rival that does not fit simply loses).
    - `fits`: a claim that a model learns its training lengths (`at_least` on an accuracy measure,
      scaled or sequence, every length of its range within the training lengths): decided by
      whether it fits, on every seed, so that it is ✗ when most seeds do not fit at this budget.
      Read on the training task, or on the evaluation variant the fit is read on (`fit_variant`);
      on another evaluation variant (`variant`) the same figure is a behaviour.
    - `fails`: a claim that a model fails at its training lengths (`below`, every length within
      them), or one whose `fit` is 0 (the model cannot learn the task at all): not gated, failing
      there is the claim itself.
    - `behaves`: every other claim, about how a model behaves beyond its training lengths (or by
      the measure `extrapolation`) or by an analysis figure (`metric:NAME`, e.g. fixed-point
      iterations) at any length: read only on the seeds that fit.
    Where the plan does not record the training lengths (`train` None), a claim is read as
    `behaves` within them: nothing tells a fit from a behaviour there, and no seed is set aside."""
    if claim["test"] == "beats":
        return COMPARES
    if claim["fit"] <= 0:
        return FAILS
    accuracy = claim["measure"] in ("scaled", "sequence")
    within = train is not None and lengths is not None and max(lengths) <= train
    if accuracy and within and variant in ("", claim.get("fit_variant") or ""):
        return FITS if claim["test"] == "at_least" else FAILS
    return BEHAVES


def gate_length(entry: SummaryEntry, claim: dict, lengths: list[int], planned: dict | None = None) -> int | None:
    """The longest training length at which the claim's model must have fit before the claim is
    read over `lengths` (the fit gate), or None where the claim is decided without it: the claims
    `claim_kind` calls `behaves` and `compares` are gated, `fits` and `fails` are not (a claim that
    a model fits is decided by the fit, and one that it fails needs no fit). A plan that does not
    record its training lengths gates nothing."""
    train = (planned or {}).get("train_length", {}).get(entry.get("run_task", entry["task"]))
    if train is None:
        return None
    return train if claim_kind(claim, lengths, train, entry.get("variant", "")) in (BEHAVES, COMPARES) else None


def fit_figure(record: dict, measure: str, length: int) -> float | None:
    """One seed's in-distribution figure at `length` on the claim's measure: scaled accuracy for
    `scaled` (and for a claim on a metric, whose own scale says nothing of fit), sequence accuracy
    for `sequence`, the selection's metric for `extrapolation`; None when that length was not
    evaluated."""
    return {"sequence": record["sequence"], "extrapolation": record["measured"]}.get(measure, record["scaled"]).get(
        length
    )


def claim_lengths(
    entry: SummaryEntry, measure: str, lengths, planned: dict | None = None
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


def measured(entry: SummaryEntry, measure: str = "scaled", lengths=None, planned: dict | None = None) -> float | None:
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
    values: Mapping[int, float | None]
    if measure.startswith("metric:"):
        values = entry.get("metrics_mean", {}).get(measure[len("metric:") :], {})
    else:
        values = entry["headline"] if measure == "scaled" else entry["sequence_mean"]
    figures = [values.get(n) for n in picked]
    if any(v is None for v in figures):
        return None
    return statistics.mean(v for v in figures if v is not None)


def seed_spread(entry: SummaryEntry, paper: dict, planned: dict | None = None) -> list[float]:
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


def paper_figures(paper: dict, summary: list[SummaryEntry], planned: dict | None = None) -> list[dict]:
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


def planned_names(plan: Plan | None) -> dict | None:
    """What the experiment's latest plan runs, for the claims: {models (labels), tasks (training
    tasks), scale, lengths ({task: evaluation lengths}), train_length ({task: longest training
    length}), seeds ({(model, task, dataset_size, lr): seeds}), budget ({(model, task, dataset_size,
    lr): the plan's steps}), left_out (the model and task names of
    this scale that the run's overrides took out)}; None without a plan."""
    if plan is None:
        return None
    lengths: defaultdict[str, set[int]] = defaultdict(set)
    train: dict[str, int] = {}
    seeds: defaultdict[tuple, set[int]] = defaultdict(set)
    budget: dict[tuple, int] = {}
    for r in plan.runs:
        lengths[r["task"]].update(r.get("lengths") or [])
        if r.get("train_length") is not None:
            train[r["task"]] = max(train.get(r["task"], 0), r["train_length"])
        key = (r["model"], r["task"], r.get("dataset_size"), r["lr"])
        seeds[key].add(r["seed"])
        if r.get("steps") is not None:
            budget[key] = max(budget.get(key, 0), r["steps"])
    return {
        "models": {r["model"] for r in plan.runs},
        "tasks": {r["task"] for r in plan.runs},
        "scale": plan.scale,
        "lengths": {t: sorted(v) for t, v in lengths.items() if v},
        "train_length": train,
        "seeds": dict(seeds),
        "budget": budget,
        "left_out": set(plan.spec.get("left_out") or ()),
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


def _entry_figure(
    entry: SummaryEntry, claim: dict, lengths: list[int], planned: dict | None
) -> tuple[dict, float | None]:
    """({seed: its figure or None} over the seeds the plan runs at the entry's lr, mean of those measured)."""
    seeds = sorted((planned or {}).get("seeds", {}).get(_plan_key(entry)) or entry["seeds"])
    threshold = entry["selection"]["threshold"]
    figures = {
        s: seed_figure(entry["per_seed"][s], claim["measure"], lengths, claim["test"], threshold)
        if s in entry["per_seed"]
        else None
        for s in seeds
    }
    values = [v for v in figures.values() if v is not None]
    return figures, statistics.mean(values) if values else None


def claim_verdicts(paper: dict, summary: list[SummaryEntry], planned: dict | None = None) -> list[dict]:
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
    no runs: its scale decides whether it is tested, then `check_verdict`. `protocol`: the same
    claim's verdict under the paper's own reporting protocol (`protocol_verdicts`), None where the
    paper states none."""
    readings: list[dict | None] = [None] * len(paper["claims"])
    readings = list(protocol_verdicts(paper, summary, planned) or readings)
    return [
        {**_claim_verdict(claim, summary, planned), "protocol": reading}
        for claim, reading in zip(paper["claims"], readings)
    ]


def _claim_verdict(claim: dict, summary: list[SummaryEntry], planned: dict | None, pick: Pick | None = None) -> dict:
    """One claim's verdict (`claim_verdicts`); with `pick`, each entry (and each rival) is read at
    the rate `pick` gives it instead of the selected one and its ties (`protocol_verdicts`)."""
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
            if pick is None:
                result, rivals_missing = _entry_result(claim, e, summary, rivals, planned)
                result = _with_ties(result, claim, e, summary, rivals, planned)
            else:
                result, rivals_missing = _entry_result(claim, pick(claim, e), summary, rivals, planned, pick)
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
    claim: dict,
    e: SummaryEntry,
    summary: list[SummaryEntry],
    rivals: list[str],
    planned: dict | None,
    pick: Pick | None = None,
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
            trained = trained_entry(e, summary, claim["fit_variant"])
            fits = {
                s: fit_figure(trained["per_seed"][s], claim["measure"], gate)
                for s in figures
                if s in trained["per_seed"]
            }  # a seed not finished yet is "not measured", not unfit
            unfit = {s: v for s, v in fits.items() if v is None or v < claim["fit"] - 1e-9}
    if claim["test"] == "beats" and lengths is not None:
        against = {
            name: [
                _entry_figure(r if pick is None else pick(claim, r), claim, lengths, planned)[1]
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
        "kind": claim_kind(claim, lengths, _train_length(e, planned), e.get("variant", "")),
        "lr": e["lr"],
        "budget": (planned or {}).get("budget", {}).get(_plan_key(e)),
    }
    return result, missing


def _plan_key(e: SummaryEntry) -> tuple:
    return (e["model"], e.get("run_task", e["task"]), e["dataset_size"], e["lr"])


def _train_length(e: SummaryEntry, planned: dict | None) -> int | None:
    return (planned or {}).get("train_length", {}).get(e.get("run_task", e["task"]))


Pick = Callable[[dict, SummaryEntry], SummaryEntry]  # (claim, entry) -> the entry at the rate it is read at


def protocol_verdicts(paper: dict, summary: list[SummaryEntry], planned: dict | None = None) -> list[dict] | None:
    """Each claim of `paper` read under the paper's own reporting protocol (`paper.protocol`), as
    `claim_verdicts` gives them, or None where the paper states none. Under `rates: best` each
    model is read at the rate whose runs do best on the claim's own figure (`best_rate`: the paper
    picks its best model, which may select on the test lengths); under `selected` at the strict
    reading's rate, ties not read. The protocol's seed rule replaces the claim's: `best` (the best
    seed) for a claim that a model reaches or beats a level, and for one that it stays below a
    level `all` (the best seed below it means every seed is). The kinds' fit rule is the same."""
    protocol = paper.get("protocol")
    if protocol is None:
        return None
    pick: Pick = best_rate if protocol["rates"] == "best" else (lambda claim, e: e)
    out = []
    for claim in paper["claims"]:
        seeds = "all" if protocol["seeds"] == "best" and claim["test"] == "below" else protocol["seeds"]
        out.append(_claim_verdict({**claim, "seeds": seeds}, summary, planned, pick))
    return out


def best_rate(claim: dict, e: SummaryEntry) -> SummaryEntry:
    """The entry at the rate (among those it trained) whose mean figure on the claim is highest
    (`extrapolation`: the longest length reached), its runs' best; a claim on a metric, whose
    better direction the claim does not say, stays at the selected rate. Ties go to the selected
    rate, then to the smallest."""
    if claim["measure"].startswith("metric:") or not e.get("rates"):
        return e
    candidates = [e] + [at_rate(e, lr) for lr in sorted(e["rates"])]

    def figure(entry: SummaryEntry) -> float:
        lengths, _ = claim_lengths(entry, claim["measure"], claim["lengths"])
        if lengths is None:
            return -math.inf
        value = _entry_figure(entry, {**claim, "test": "beats"}, lengths, None)[1]
        return -math.inf if value is None else value

    return max(candidates, key=figure)  # max keeps the first of equals: the selected rate


def _with_ties(
    result: dict, claim: dict, e: SummaryEntry, summary: list[SummaryEntry], rivals: list[str], planned: dict | None
) -> dict:
    """The entry's result with `ties` ({lr: {holds, passed, of, value}} at every rate that ties with
    the selected one on the training lengths): the strict reading holds only where it holds at each
    of them, and fails where it fails at one (`holds` then says so, and `reason` which rate)."""
    ties = {lr: _entry_result(claim, at_rate(e, lr), summary, rivals, planned)[0] for lr in e.get("ties") or []}
    if not ties:
        return {**result, "ties": {}}
    outcomes = {e["lr"]: result["holds"], **{lr: r["holds"] for lr, r in ties.items()}}
    holds = False if False in outcomes.values() else None if None in outcomes.values() else True
    tie = {lr: {k: r[k] for k in ("holds", "passed", "of", "value")} for lr, r in ties.items()}
    reason, inconclusive = result["reason"], result["inconclusive"]
    if holds is False and result["holds"] is not False:
        failing = ", ".join(f"{lr:g}" for lr, h in outcomes.items() if h is False)
        reason = f"a tie on the training lengths, and it fails at the tied lr {failing}"
    elif holds is None and result["holds"] is not None:
        undecided = [(lr, r) for lr, r in ties.items() if r["holds"] is None]
        inconclusive = any(r["inconclusive"] for _, r in undecided)
        reason = "; ".join(f"at the tied lr {lr:g}: {r['reason']}" for lr, r in undecided)
    return {**result, "holds": holds, "ties": tie, "reason": reason, "inconclusive": inconclusive}


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
    """The verdict of a claim on a check (`measure: check:NAME`, `statetrack.checks`): the
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
        "kind": claim_kind(claim, None, None),
        "lr": None,
        "budget": None,
        "ties": {},
    }
    return {
        "claim": claim,
        "verdict": PASS if holds else FAIL,
        "results": [result],
        "missing": [],
        "unplanned": [],
        "reason": "",
    }


def trained_entry(entry: SummaryEntry, summary: list[SummaryEntry], variant: str | None = None) -> SummaryEntry:
    """The summary entry on which the fit of `entry`'s runs is read: the same runs scored on the task
    they trained on, or on the evaluation variant `variant` (`paper.fit_variant`) where that task's
    own targets are partly unpredictable; `entry` itself when it is that one or none is found."""
    task = variant_label(entry.get("run_task", entry["task"]), variant)
    found = next(
        (
            e
            for e in summary
            if (e["task"], e["model"], e["dataset_size"]) == (task, entry["model"], entry["dataset_size"])
            and (e["lr"] == entry["lr"] or entry["lr"] in (e.get("rates") or {}))
        ),
        None,
    )
    return entry if found is None else at_rate(found, entry["lr"])


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
