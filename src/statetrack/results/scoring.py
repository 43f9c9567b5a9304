"""Scoring an experiment once: its plan, its stored runs and their results become a `Scored` (the
summary under the selection rule, `statetrack.results.selection`; the claims' verdicts,
`statetrack.results.claims`; the fit table; the runs not done), which the report, the index, the
book and `statetrack results` render without scoring again.
"""

from __future__ import annotations

from dataclasses import dataclass

from statetrack.errors import StatetrackError
from statetrack.experiments.spec import by_settings, paper_of
from statetrack.results.claims import claim_verdicts, fit_figure, planned_names, trained_entry
from statetrack.results.selection import SummaryEntry, summarize, with_train_lengths
from statetrack.schema import FIT_THRESHOLD, selection_of
from statetrack.store import Plan
from statetrack.training.evaluate import PREDICTED_CLASSES


def fit_table(scored: Scored, learning: set[str] | None) -> list[dict]:
    """Whether each model learned what it was trained on, one entry per task and model (and
    training-set size) at the selected lr: {task, model, dataset_size, lr, length (the task's
    longest training length), measure and threshold (the fit gate's: `paper.measure` and
    `paper.fit`, else scaled accuracy and FIT_THRESHOLD), figures ({seed: figure at length}),
    fitted (the seeds at or above the threshold), steps ({seed: steps trained}), budget (the plan's
    steps), learning (the seeds whose runs are in `learning`, see `learning_runs`; None where
    that was not recorded, as in a snapshot exported before it was) and collapsed (the seeds that
    predicted one class there, `collapsed_seeds`; None where not recorded)}. The figure
    is read on `paper.fit_variant` where the spec names one, as the fit gate reads it."""
    paper = scored.paper or {}
    measure = paper.get("measure", "scaled")
    measure = measure if measure in ("scaled", "sequence", "extrapolation") else "scaled"
    threshold = paper.get("fit") or FIT_THRESHOLD
    variant = (paper.get("claims") or [{}])[0].get("fit_variant") if paper else None
    plan_by_key = {(p["task"], p["model"], p.get("dataset_size"), p["lr"], p["seed"]): p for p in scored.plan.runs}
    stored = {r["id"]: r for r in scored.runs}
    out = []
    for e in scored.summary:
        length = e.get("train_length")
        if e["variant"] or length is None:
            continue
        trained = trained_entry(e, scored.summary, variant)
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
                "collapsed": collapsed_seeds(trained, length, threshold, measure),
            }
        )
    return out


def collapsed_seeds(entry: SummaryEntry, length: int, threshold: float, measure: str) -> list[int] | None:
    """The seeds of `entry` that did not fit `length` and predicted one class at every supervised
    position there (PREDICTED_CLASSES): the model collapsed to a constant answer, so its figures
    say nothing of what it tracks. None where no seed recorded the count (runs evaluated before it was)."""
    counts = {s: r["metrics"].get(PREDICTED_CLASSES, {}).get(length) for s, r in entry["per_seed"].items()}
    if all(c is None for c in counts.values()):
        return None
    return [
        s
        for s, c in counts.items()
        if c == 1 and (fit_figure(entry["per_seed"][s], measure, length) or 0.0) < threshold - 1e-9
    ]


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
    plan: Plan
    runs: list[dict]
    selection: dict
    summary: list[SummaryEntry]
    planned: dict
    paper: dict | None
    verdicts: list[dict]
    missing: list[dict]
    others: int = 0  # runs of this experiment in the store that the latest plan does not hold
    data: RunData | None = None

    @property
    def spec(self) -> dict:
        return self.plan.spec

    @property
    def scale(self) -> str | None:
        return self.plan.scale

    @property
    def description(self) -> str:
        return self.spec.get("description", "")

    @property
    def train_length(self) -> dict[str, int]:
        """{task: its longest training length}, every curriculum stage counted (as the plan records it)."""
        return self.planned["train_length"]


def missing_runs(plan: Plan, runs: list[dict]) -> list[dict]:
    """The plan's runs that are not done: the plan's entry with status 'not started', 'running or
    interrupted' or 'failed' and the error of a failed one."""
    stored = {r["id"]: r for r in runs}
    missing = []
    for r in plan.runs:
        row = stored.get(r["id"])
        if row is None or row["status"] != "done":
            status = (
                "not started" if row is None else "running or interrupted" if row["status"] == "running" else "failed"
            )
            missing.append({**r, "status": status, "error": row.get("error") if row else None})
    return missing


def score(
    experiment: str,
    plan: Plan,
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
    spec = plan.spec
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
    store,
    experiment: str,
    *,
    plan: Plan | None = None,
    paper: dict | None = None,
    selection: dict | None = None,
    run_data: bool = False,
) -> Scored:
    """`score` of the experiment's latest plan in `store` (`plan`: the one `statetrack run` just
    stored, not read again), each table read once; `run_data`: also read the per-run records the
    report's plots draw (`RunData`)."""
    plan = plan or store.plan(experiment)
    if plan is None:
        raise StatetrackError(
            f"experiment {experiment!r} has no plan in {store.path}: `statetrack run {experiment}` records one"
        )
    ids = plan.ids
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
