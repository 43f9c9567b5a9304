"""Reports: renders what `statetrack.results.scoring` computes (the paper's figures and claims
beside the measured ones with a verdict per claim, the table after selection, the per-seed spread,
the learning rates, sequence accuracy where it says more than accuracy, the models' and tasks' own
metrics) in the tables of `statetrack.results.tables`, with the plots of `statetrack.results.plots`,
as Markdown and self-contained HTML, and an index of every experiment."""

from __future__ import annotations

import base64
import html
import time
from pathlib import Path

from statetrack.checks import get_check
from statetrack.errors import StatetrackError
from statetrack.paths import under, write_text
from statetrack.results.claims import (
    FAIL,
    FITS,
    INCONCLUSIVE,
    MEASURE_TEXT,
    NOT_IN_RUN,
    NOT_MEASURED,
    NOT_RUN,
    PASS,
    paper_figures,
    unfit_text,
    verdict_counts,
)
from statetrack.results.plots import (
    also_save,
    answer_labels,
    entry_label,
    metrics_by_length,
    model_label,
    plot_accuracy_vs_dataset_size,
    plot_accuracy_vs_length,
    plot_curves,
    plot_metrics,
    plot_position_accuracy,
    plot_traces,
    position_series,
    run_label,
    train_ranges,
)
from statetrack.results.scoring import Scored, fit_table, score_store
from statetrack.results.selection import SummaryEntry, data_efficiency, describe_selection, learning_runs
from statetrack.results.tables import (
    data_efficiency_rows,
    extrapolation_caption,
    extrapolation_rows,
    fit_rows,
    html_table,
    latex_table,
    lr_rows,
    markdown_table,
    metric_rows,
    seed_rows,
    sequence_rows,
    table_rows,
    text_columns,
    text_table,
)
from statetrack.store import Store


def _missing_line(r: dict) -> str:
    error = f" ({r['error'].splitlines()[0]})" if r.get("error") else ""
    return f"{run_label(r)} / {r['task']} lr={r['lr']:g} seed={r['seed']}: {r['status']}{error}"


# ---- the paper beside the measured figures -------------------------------------------------------
MEASURE_SHORT = {"scaled": "scaled acc.", "sequence": "seq. acc.", "extrapolation": "extrapolates to"}
OPERATORS = {"at_least": ">=", "below": "<", "beats": ">"}
FIT_GATE_TEXT = (
    "the claim is about how a model behaves (beyond the training lengths, on another evaluation variant, or by an "
    "analysis figure) or compares models, and too few seeds of its model fit their longest training length (its "
    "figure there below the claim's fit threshold, 0.9 unless the spec sets another) to decide it; the seeds that "
    "did not fit are set aside, never counted for or against (a claim that a model fits is decided by the fit)"
)
PROTOCOL_TEXT = (
    "The paper's protocol: the same claim read as the paper reports ({quote}): at each model's best rate on the "
    "claim's own figure (which may select on the test lengths, as the strict reading never does) and {seeds}"
)
MEASURED_KEY = (
    "per model and task, how many seeds pass, then the mean over the seeds of each seed's own figure: its worst "
    "length in the claim's range under >= and < (its lowest and its highest value), its mean over the range under > "
    "(beside the rival's), the length it extrapolates to under 'extrapolates to'"
)
QUICK_NOTE = (
    "The quick scale is a small CPU version of the paper's setting: a ✗ there says what the small run shows, "
    "not that the paper is wrong (the paper scale has the paper's sizes)."
)


def figure_text(value, measure: str) -> str:
    """A paper's or a measured figure: text as given, a length as an integer ("none" for 0; a mean of
    lengths over seeds to one decimal), else 3 decimals."""
    if value is None:
        return "-"
    if isinstance(value, str):
        return value
    if measure == "extrapolation":
        return "none" if not value else f"{value:g}" if float(value).is_integer() else f"{value:.1f}"
    return f"{value:.3f}"


def _over(lengths) -> str:
    if lengths is None:
        return " (mean over test lengths)"
    return f" at {lengths}" if isinstance(lengths, int) else f" over {lengths[0]}..{lengths[1]}"


SEED_RULE_TEXT = {
    "majority": "in most seeds",
    "all": "in every seed",
    "best": "in the best seed (the paper reports a best-of)",
}


def _seed_range(figures: list[float], measure: str) -> str:
    """The lowest and highest seed's figure ("0.473..1.000 (3 seeds)"); "-" for fewer than two seeds."""
    if len(figures) < 2:
        return "-"
    return f"{figure_text(min(figures), measure)}..{figure_text(max(figures), measure)} ({len(figures)} seeds)"


def claim_test(claim: dict) -> str:
    """A claim's test in words: "scaled acc. at each length in 40..256 >= 0.9, in most seeds"."""
    if claim["measure"].startswith("check:"):  # one figure computed without training: say what it is
        measures = get_check(claim["measure"].removeprefix("check:")).measures
        return f"{measures} {OPERATORS[claim['test']]} {claim['bound']:g} (computed without training)"
    name = MEASURE_SHORT.get(claim["measure"], claim["measure"].removeprefix("metric:").replace("_", " "))
    lengths = claim["lengths"]
    if claim["measure"] == "extrapolation":
        where = ""
    elif claim["test"] == "beats":
        where = " (mean over test lengths)" if lengths is None else _over(lengths).replace(" over", " mean over")
    else:
        where = (
            " at each test length"
            if lengths is None
            else f" at {lengths}"
            if isinstance(lengths, int)
            else f" at each length in {lengths[0]}..{lengths[1]}"
        )
    bound = " and ".join(f"{name}'s" for name in claim["bound"]) if claim["test"] == "beats" else f"{claim['bound']:g}"
    return f"{name}{where} {OPERATORS[claim['test']]} {bound}, {SEED_RULE_TEXT[claim['seeds']]}"


def claim_measured(verdict: dict) -> str:
    """What was measured for a claim: per model / task it covers, how many seeds pass and the mean
    figure ("2 of 3 seeds, 0.951"; with the rival's under `beats`), why it is not measured, and what
    the plan does not run."""
    claim, results = verdict["claim"], verdict["results"]
    name_models = len({(r["model"], r["dataset_size"]) for r in results}) > 1
    name_tasks = len({r["task"] for r in results}) > 1
    parts = []
    for r in results:
        who = " ".join(
            x
            for x in (
                model_label(r["model"], r["dataset_size"]) if name_models else "",
                f"on {r['task']}" if name_tasks else "",
            )
            if x
        )
        if r["value"] is None and r["reason"]:
            value = r["reason"]
        elif claim["measure"].startswith("check:"):
            value = f"computed: {r['value']:.4g}"
        else:
            value = f"{r['passed']} of {r['of']} seeds, {figure_text(r['value'], claim['measure'])}"
            if claim["test"] == "beats":
                value += f" vs {figure_text(r['rival'], claim['measure'])}"
            if r["holds"] is None and r["reason"]:
                value += f" ({r['reason']})"
            elif r.get("unfit"):  # decided on the seeds that fit; say which did not
                value += f" ({unfit_text(r['model'], r['unfit'], r['train_length'])}: not counted)"
            if r.get("kind") == FITS and r["holds"] is False and r.get("budget"):
                value += f" (did not fit at this budget, {r['budget']} steps)"
            value += ties_text(r, claim["measure"])
        if r["holds"] is False and len(results) > 1:
            value += f" {FAIL}"
        parts.append(f"{who}: {value}" if who else value)
    if verdict["missing"]:
        parts.append("not run yet: " + ", ".join(verdict["missing"]))
    if verdict["unplanned"]:
        parts.append("not in this run: " + ", ".join(verdict["unplanned"]))
    if not parts and verdict["reason"]:
        parts.append(verdict["reason"])
    return "; ".join(parts) or "-"


def protocol_text(protocol: dict) -> str:
    """The paper's protocol in words, under a claims table that has its column."""
    seeds = {"best": "its best seed", "all": "every seed", "majority": "most seeds"}[protocol["seeds"]]
    rates = "" if protocol["rates"] == "best" else " (at the strict reading's rate)"
    return PROTOCOL_TEXT.format(quote=f'"{protocol["quote"]}"', seeds=seeds + rates) + "."


def protocol_cell(verdict: dict) -> str:
    """A claim's verdict under the paper's protocol with what it read ("✓: 1 of 3 seeds, 1.000 (lr
    0.01)"), "-" where the paper states no protocol."""
    reading = verdict.get("protocol")
    if reading is None:
        return "-"
    rates = sorted({r["lr"] for r in reading["results"] if r.get("lr") is not None})
    at = f" (lr {', '.join(f'{lr:g}' for lr in rates)})" if rates else ""
    return f"{reading['verdict']}: {claim_measured(reading)}{at}"


def ties_text(result: dict, measure: str) -> str:
    """ "; tied on the training lengths with lr 0.01: 3 of 3 seeds, 1.000" for each rate that ties
    with the selected one (the strict reading holds only where it holds at each); "" without ties."""
    return "".join(
        f"; tied on the training lengths with lr {lr:g}: "
        f"{t['passed']} of {t['of']} seeds, {figure_text(t['value'], measure)}"
        + (f" {FAIL}" if t["holds"] is False else "")
        for lr, t in sorted((result.get("ties") or {}).items())
    )


def verdict_line(verdicts: list[dict]) -> str:
    """ "2/3 claims ✓, 1 ✗" (and how many could not be checked); "" without claims."""
    counts = verdict_counts(verdicts)
    if not verdicts:
        return ""
    return (
        f"{counts[PASS]}/{len(verdicts)} claims {PASS}"
        + (f", {counts[FAIL]} {FAIL}" if counts[FAIL] else "")
        + "".join(f", {counts[v]} {v}" for v in (INCONCLUSIVE, NOT_MEASURED, NOT_RUN, NOT_IN_RUN) if counts[v])
    )


def paper_tables(scored: Scored, rules: str | None = None) -> list[tuple]:
    """The "Paper vs measured" (the paper's figure beside the measured one per task and model) and
    "Claims" (each claim's test, what was measured, its verdict) sections as (title, note, table).
    The claims' note states how a verdict is read, or, given `rules` (a sentence that points to
    where the rules are stated, as the book's pages do), says that instead."""
    paper, summary, planned, scale, verdicts = (
        scored.paper,
        scored.summary,
        scored.planned,
        scored.scale,
        scored.verdicts,
    )
    assert paper is not None  # called for an experiment with a paper section
    sections = []
    measured_text = MEASURE_TEXT.get(
        paper["measure"], paper["measure"].removeprefix("metric:").replace("_", " ") + " (mean over seeds)"
    ) + (
        ""
        if paper["measure"] == "extrapolation"
        else _over(paper["lengths"]).replace(" (mean over test lengths)", ", mean over test lengths")
    )
    if summary and paper["measure"] in ("scaled", "extrapolation"):
        measured_text += ", the best seed" if summary[0]["selection"]["seeds"] == "max" else ", mean over seeds"
    scale_text = f", {scale} scale" if scale else ""
    if any(paper["figures"].values()):
        rows = paper_figures(paper, summary, planned)
        with_task = len({r["task"] for r in rows}) > 1
        header = (["task"] if with_task else []) + ["model", "paper", "measured", "seeds (lowest..highest)"]
        body = [
            ([r["task"] or "-"] if with_task else [])
            + [
                model_label(r["model"], r["dataset_size"]),
                figure_text(r["paper"], paper["measure"]),
                figure_text(r["measured"], paper["measure"]) if r["run"] else "not run",
                _seed_range(r["seeds"], paper["measure"]),
            ]
            for r in rows
        ]
        note = (
            f"Paper: {paper['source']}"
            + (f"; {paper['metric']}" if paper["metric"] else "")
            + f". Measured: {measured_text}{scale_text}"
            "; seeds: the lowest and the highest seed's figure."
        )
        sections.append(("Paper vs measured", note, (header, body)))
    if verdicts:
        header = ["claim", "test", "measured", "verdict"]
        body = [[v["claim"]["text"], claim_test(v["claim"]), claim_measured(v), v["verdict"]] for v in verdicts]
        if paper.get("protocol"):
            header.append("paper's protocol")
            for row, v in zip(body, verdicts):
                row.append(protocol_cell(v))
        stated = rules or (
            "Each claim is tested seed by seed at the selected lr, "
            "at every planned length of its range, and its seed rule decides; "
            f"{PASS}: it holds; {FAIL}: it does not; {INCONCLUSIVE}: {FIT_GATE_TEXT}; "
            f"{NOT_MEASURED}: a run or a planned length it needs is missing (not finished, or failed); "
            f"{NOT_RUN}: it names a model, task or scale this scale of the spec does not run; "
            f"{NOT_IN_RUN}: it names a model or task that this run's overrides left out. "
            f"Measured: {MEASURED_KEY}." + (f" {QUICK_NOTE}" if scale == "quick" else "")
        )
        note = f"{verdict_line(verdicts)}. {stated}" + (
            f" {protocol_text(paper['protocol'])}" if paper.get("protocol") else ""
        )
        sections.append(("Claims: did it reproduce?", note, (header, body)))
    return sections


def _without_constant_columns(note: str, table: tuple) -> tuple[str, tuple]:
    """The table without its `task` and `lr` columns where every row holds the same value (two rows
    or more), each such value named in the note instead; a table's count of leading text columns
    (its third item, when it has one) shrinks with them."""
    header, body, *left = table  # (header, body) or (header, body, the number of text columns first)
    dropped = [
        i
        for i, name in enumerate(header)
        if name in ("task", "lr") and len(body) > 1 and len({row[i] for row in body}) == 1
    ]
    if not dropped:
        return note, table
    named = "; ".join(f"{header[i]} {body[0][i]}" for i in dropped)
    keep = [i for i in range(len(header)) if i not in dropped]
    left = [n - sum(1 for i in dropped if i < n) for n in left]
    return (f"{note}; {named}" if note else named[0].upper() + named[1:]), (
        [header[i] for i in keep],
        [[row[i] for i in keep] for row in body],
        *left,
    )


def alike_lines(summary: list[SummaryEntry]) -> list[str]:
    """A line for each group of models whose figures are the same at every length and seed on one
    task: they answer alike on the shared evaluation inputs, as models that give one class for every
    input do, which would otherwise read like a bug."""
    groups: dict[tuple, list[str]] = {}
    for e in summary:
        figures = tuple(sorted((seed, tuple(sorted(r["scaled"].items()))) for seed, r in e["per_seed"].items()))
        groups.setdefault((e["task"], figures), []).append(entry_label(e))
    return [
        f"{', '.join(names[:-1])} and {names[-1]} have the same figures at every length and seed"
        + (f" on {task}" if len({e["task"] for e in summary}) > 1 else "")
        + ": they answer alike on the shared evaluation inputs (typically one class for every input)"
        for (task, _), names in groups.items()
        if len(names) > 1
    ]


def results_text(scored: Scored) -> str:
    """`statetrack results`: the headline table, then the sequence-accuracy, extrapolation and metric
    tables where the experiment has them, as plain text."""
    summary = scored.summary
    parts = [text_table(*table_rows(summary, "headline"))]
    if any(e["sequence_differs"] for e in summary):
        header, body, _ = sequence_rows(summary)
        parts.append(
            f"sequence accuracy (all supervised positions right), mean ± std over seeds:\n{text_table(header, body)}"
        )
    if summary and scored.selection["criterion"] == "extrapolation":
        header, body, _ = extrapolation_rows(summary)
        parts.append(f"extrapolation ({extrapolation_caption(scored.selection)}):\n{text_table(header, body)}")
    if scored.data is not None:
        for title, table in metric_rows(metrics_by_length(scored.data, summary, scored.runs)):
            parts.append(f"{title}, mean over seeds:\n{text_table(*table)}")
    return "\n\n".join(parts)


def write_report(scored: Scored, results_dir: str | Path = "results", formats: tuple[str, ...] = ("png",)) -> Path:
    """Write results/<experiment>/report.md, report.html, the plots (PNG, and each further format of
    `formats`: svg, pdf) and LaTeX tables (headline.tex, and paper_vs_measured.tex where the spec
    gives the paper's figures) of a scored experiment (`scoring.score_store` with `run_data=True`);
    returns the folder.

    The report covers the runs of the experiment's latest plan (what the last `statetrack run`
    expanded) and lists those that are missing; the paper's figures beside the measured ones and a
    verdict per claim come near the top.
    Data-driven extras: a sequence-accuracy table when some run's sequence accuracy differs from its
    accuracy, a plot per family of the models' own metrics (`plot_metrics`, e.g. fixed-point
    iterations against evaluation length and training step) when runs report them, the check-mark
    table when the selection criterion is `extrapolation`, accuracy per input position
    (`plot_position_accuracy`) and the model's output against the input where runs kept traces.
    A run whose training loss became non-finite is done, scored as chance, and its status in the
    runs table reads "diverged at step N".
    """
    if scored.data is None:
        raise ValueError("write_report draws the runs' records: score with run_data=True")
    with also_save(formats):
        return _write_report(scored, results_dir)


def _write_report(scored: Scored, results_dir) -> Path:
    data = scored.data
    assert data is not None  # checked by write_report
    out = under(results_dir, scored.experiment)
    out.mkdir(parents=True, exist_ok=True)
    plots = _report_plots(scored, out)
    learning = learning_runs(scored.runs, scored.plan, data.curves)
    tables = _report_tables(scored, learning)
    status_line = _status_line(scored, learning)
    # verdicts first, then the accuracy plot, then the tables (columns that hold one value named in
    # the note), then the other plots
    tables = [(title, *_without_constant_columns(note, table)) for title, note, table in tables]
    claims_first = sorted(range(len(tables)), key=lambda i: not tables[i][0].startswith("Claims"))
    tables = [tables[i] for i in claims_first]
    runs_table = _runs_table(scored.runs, learning)
    _write_markdown(scored, out, status_line, tables, plots, runs_table)
    for title, note, table in tables:  # the tables a paper quotes, as LaTeX
        name = (
            "paper_vs_measured.tex"
            if title == "Paper vs measured"
            else "headline.tex"
            if title.startswith("Headline")
            else None
        )
        if name and table[0]:
            write_text(out / name, latex_table(table[0], table[1], f"{scored.experiment}: {title}. {note}", *table[2:]))
    _write_html(scored, out, status_line, tables, plots, runs_table)
    return out


def _report_plots(scored: Scored, out: Path) -> list[Path]:
    """The report's plots, the accuracy against length first (`write_report` lists them)."""
    summary, runs, data = scored.summary, scored.runs, scored.data
    assert data is not None
    plots = [plot_accuracy_vs_length(summary, out / "accuracy_vs_length.png", train_ranges(runs))] if summary else []
    efficiency = data_efficiency(summary)
    if efficiency:
        plots.append(plot_accuracy_vs_dataset_size(efficiency, out / "accuracy_vs_dataset_size.png"))
    if any(r["status"] == "done" for r in runs):
        plots.append(plot_curves(data, [r for r in runs if r["status"] == "done"], out / "training_curves.png"))
    plots += plot_metrics(data, summary, runs, out)
    positions = position_series(data, summary, runs)
    if positions:
        plots.append(plot_position_accuracy(positions, out / "position_accuracy.png", scored.train_length))
    return plots + plot_traces(data, summary, runs, answer_labels(runs), out)


def _report_tables(scored: Scored, learning: set) -> list[tuple[str, str, tuple]]:
    """The report's tables, each (title, note, (header, body) or (header, body, the number of text
    columns first)): the paper's and the claims' first, then the headline, the fit table and the
    data-driven ones."""
    summary, selection = scored.summary, scored.selection
    first = paper_tables(scored) if scored.paper else []
    if not summary:
        return first + [("Results", "No finished runs yet.", ([], []))]
    rule = describe_selection(selection) + "".join(f". {line}" for line in alike_lines(summary))
    several_seeds = any(len(e["per_seed"]) > 1 for e in summary)
    tables: list[tuple[str, str, tuple]] = [
        ("Headline: scaled accuracy after selection", rule, table_rows(summary, "headline"))
    ]
    fit_note, fit = fit_rows(fit_table(scored, learning))
    if fit[0]:
        tables.append(("Fit: the figure at the longest training length", fit_note, fit))
    efficiency = data_efficiency(summary)
    if efficiency:
        tables.append(
            (
                "Data efficiency: scaled accuracy at the test length vs training-set size N",
                "mean ± sample std over seeds at the lr selected for each N; "
                "N = fixed training examples (train.dataset_size)",
                data_efficiency_rows(efficiency),
            )
        )
    if selection["criterion"] == "extrapolation":
        tables.append(("Extrapolation", extrapolation_caption(selection), extrapolation_rows(summary)))
    if several_seeds and selection["seeds"] != "mean":  # the best seed is the headline, or a row of the per-seed table
        tables.append(
            (
                "Scaled accuracy, mean ± std over seeds",
                "mean over the seeds at the selected lr ± their sample standard deviation",
                table_rows(summary, "mean"),
            )
        )
    assert scored.data is not None
    for title, table in reversed(metric_rows(metrics_by_length(scored.data, summary, scored.runs))):
        tables.append(
            (
                title[0].upper() + title[1:] + " at each evaluation length",
                "mean over seeds at the selected lr (max and min: over seeds and batches)",
                table,
            )
        )
    if any(e["sequence_differs"] for e in summary):
        tables.append(
            (
                "Sequence accuracy",
                "fraction of examples right at every supervised position (string accuracy on copy), "
                "mean ± sample std over seeds at the selected lr",
                sequence_rows(summary),
            )
        )
    if several_seeds:
        tables.append(
            (
                "Per seed at the selected lr",
                "each seed's scaled accuracy at each length, at the selected lr; * marks the best seed",
                seed_rows(summary),
            )
        )
    if any(len(e["lr_scores"]) > 1 for e in summary):
        tables.append(
            ("Learning rates", "score of each lr under the lr rule; * marks the selected one", lr_rows(summary))
        )
    return first + tables


def _runs_table(runs: list[dict], learning: set) -> tuple[list[str], list[list[str]]]:
    """The runs table: one row per run of the plan, with its status ("diverged at step N", "done,
    still learning", ...)."""
    header = ["run", "model", "task", "lr", "seed", "status", "steps", "train s", "params", "host", "git"]
    rows = [
        [
            r["id"],
            run_label(r),
            r["task"],
            f"{r['lr']:g}",
            str(r["seed"]),
            (
                f"diverged at step {r['diverged_at']}"
                if r.get("diverged_at") is not None
                else "done, still learning"
                if r["id"] in learning
                else r["status"]
            ),
            str(r["steps"] or "-"),
            f"{r['train_seconds']:.0f}" if r["train_seconds"] else "-",
            str(r["num_parameters"] or "-"),
            r["host"] or "-",
            r["git_rev"] or "-",
        ]
        for r in runs
    ]
    return header, rows


def _status_line(scored: Scored, learning: set) -> str:
    """The report's first line: runs done of those planned, still learning, other configurations, verdicts."""
    expected, missing, others = len(scored.plan.runs), scored.missing, scored.others
    scale = f" at scale {scored.scale}" if scored.scale else ""
    line = (
        f"{expected - len(missing)} of {expected} runs done{scale}"
        + (
            f" ({len(learning)} still learning when their budget ended: training loss still falling over the "
            "last fifth of their learning, steps weighed by their learning rate)"
            if learning
            else ""
        )
        + (f"; {others} other runs of this experiment in the store belong to other configurations" if others else "")
    )
    return line + (f". Did it reproduce? {verdict_line(scored.verdicts)}" if scored.verdicts else "")


def _lead(tables: list) -> int:
    """The index of the table the accuracy plot comes before: after the claims, where there are claims."""
    return 1 if tables and tables[0][0].startswith("Claims") else 0


def _write_markdown(scored: Scored, out: Path, status_line: str, tables: list, plots: list[Path], runs_table) -> None:
    lead, first_plots, other_plots = _lead(tables), plots[:1], plots[1:]
    md = [f"# {scored.experiment}", "", scored.description.strip(), "", status_line, ""]
    for number, (title, note, table) in enumerate(tables):
        if number == lead:
            md += [f"![{p.stem}]({p.name})" for p in first_plots] + [""]
        md += [f"## {title}", ""] + ([note, ""] if note else []) + ([markdown_table(*table), ""] if table[0] else [])
    md += [f"![{p.stem}]({p.name})" for p in other_plots] + [""]
    if scored.missing:
        md += (
            [f"## Missing runs ({len(scored.missing)})", ""] + [f"- {_missing_line(r)}" for r in scored.missing] + [""]
        )
    md += ["## Runs", "", markdown_table(*runs_table), ""]
    write_text(out / "report.md", "\n".join(md))


def _write_html(scored: Scored, out: Path, status_line: str, tables: list, plots: list[Path], runs_table) -> None:
    lead, first_plots, other_plots = _lead(tables), plots[:1], plots[1:]
    experiment, missing = scored.experiment, scored.missing

    def images(paths):
        return "".join(
            f'<img alt="{p.stem}" src="data:image/png;base64,{base64.b64encode(p.read_bytes()).decode()}">'
            for p in paths
        )

    sections = "".join(
        (images(first_plots) if number == lead else "")
        + f"<h2>{html.escape(title)}</h2>"
        + (f"<p>{html.escape(note)}</p>" if note else "")
        + (html_table(*table) if table[0] else "")
        for number, (title, note, table) in enumerate(tables)
    )
    missing_html = "".join(f"<li>{html.escape(_missing_line(r))}</li>" for r in missing)
    page = f"""<!doctype html><html><head><meta charset="utf-8"><title>{html.escape(experiment)}</title>
<style>{STYLE}</style></head><body>
<h1>{html.escape(experiment)}</h1><p>{html.escape(scored.description)}</p><p>{html.escape(status_line)}</p>
{sections}
{images(other_plots)}
{f"<h2>Missing runs ({len(missing)})</h2><ul>" + missing_html + "</ul>" if missing else ""}
<h2>Runs</h2>{html_table(*runs_table)}
</body></html>"""
    write_text(out / "report.html", page)


STYLE = (
    "body{font-family:sans-serif;max-width:1100px;margin:2em auto}table{border-collapse:collapse;margin:1em 0}"
    "td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}td.text,th.text{text-align:left}img{max-width:100%}"
    "td.pass{color:#1a7f37;font-weight:bold}td.fail{color:#c62828;font-weight:bold}td.inconclusive{color:#8a6d00}"
    "body{padding:0 1em}div.wide{overflow-x:auto}table.index{width:100%}"
    "table.index td:first-child{overflow-wrap:anywhere;min-width:7em}table.index td:last-child{min-width:9em}"
)


def index_verdicts(scored: Scored) -> str:
    """An experiment's verdicts in one cell ("2/3 claims ✓, 1 ✗"); "-" without claims."""
    return verdict_line(scored.verdicts) or "-"


def write_index(store: Store, results_dir: str | Path = "results", scored: dict[str, Scored] | None = None) -> Path:
    """results/index.html (and index.md): every experiment in the store, linked to its report, with
    how many of its planned runs are done, failed and missing and its claims' verdicts. `scored`:
    {experiment: its `Scored`, as its report was scored (the spec's `paper` and `selection` as they
    are now)}, so that the index and the reports give the same verdicts; an experiment not in it is
    scored from its plan alone."""
    results_dir = Path(results_dir)
    header = ["experiment", "scale", "done", "expected", "failed", "missing", "claims", "planned", "description"]
    rows, links = [], []
    given = scored or {}
    for name in store.experiments():
        try:
            scored_here = given[name] if name in given else score_store(store, name)
        except StatetrackError as error:  # a spec's `paper:` that no longer reads: that error in its row
            rows.append([name, "-", "-", "-", "-", "-", f"({error})", "-", "-"])
            links.append(f"{name}/report.html")
            continue
        plan, missing = scored_here.plan, scored_here.missing
        expected = len(plan.runs)
        failed = sum(1 for r in missing if r["status"] == "failed")
        when = time.strftime("%Y-%m-%d %H:%M", time.localtime(plan.created_at)) if plan.created_at else "-"
        description = " ".join(str(scored_here.description).split())
        rows.append(
            [
                name,
                scored_here.scale or "-",
                str(expected - len(missing)),
                str(expected),
                str(failed),
                str(len(missing) - failed),
                index_verdicts(scored_here),
                when,
                description,
            ]
        )
        links.append(f"{name}/report.html")
    md = ["# statetrack results", ""] + [
        markdown_table(header, [[f"[{r[0]}]({link})"] + r[1:] for r, link in zip(rows, links)]),
        "",
    ]
    write_text(results_dir / "index.md", "\n".join(md))
    text = text_columns(header, rows)
    cls = lambda i: ' class="text"' if text[i] else ""  # noqa: E731
    body = "".join(
        f'<tr><td class="text"><a href="{html.escape(link)}">{html.escape(r[0])}</a></td>'
        + "".join(f"<td{cls(i)}>{html.escape(c)}</td>" for i, c in enumerate(r[1:], 1))
        + "</tr>"
        for r, link in zip(rows, links)
    )
    head = "".join(f"<th{cls(i)}>{html.escape(h)}</th>" for i, h in enumerate(header))
    page = (
        f"""<!doctype html><html><head><meta charset="utf-8"><title>statetrack results</title>
<style>{STYLE}</style></head><body><h1>statetrack results</h1>
<div class="wide"><table class="index"><thead><tr>{head}</tr></thead><tbody>{body}</tbody>"""
        "</table></div></body></html>"
    )
    path = results_dir / "index.html"
    write_text(path, page)
    return path
