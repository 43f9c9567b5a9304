"""Tables: the rows each report table shows, read off `summarize`'s entries and the fit table
(headline, per seed, learning rates, sequence accuracy, extrapolation, fit, data efficiency, the
models' metrics), and the renderers that print any table as text, Markdown, HTML or LaTeX."""

from __future__ import annotations

import html
import re
import statistics

from statetrack.results.claims import (
    FAIL,
    INCONCLUSIVE,
    PASS,
)
from statetrack.results.plots import (
    METRIC_NAMES,
    entry_label,
)
from statetrack.results.selection import SummaryEntry


def _fmt(value) -> str:
    return "-" if value is None else f"{value:.3f}"


def _spread(mean, std, count: int) -> str:
    """mean ± std over seeds; the value alone when one seed measured it (a spread of one is no spread)."""
    if mean is None:
        return "-"
    return f"{mean:.3f}" if count < 2 else f"{mean:.3f} ± {std:.3f}"


def _score_header(summary: list[SummaryEntry]) -> str:
    criterion = summary[0]["selection"]["criterion"] if summary else "mean_scaled"
    return "extrapolates to" if criterion == "extrapolation" else "score"


def _fmt_score(entry: SummaryEntry, score: float) -> str:
    return f"{score:g}" if entry["selection"]["criterion"] == "extrapolation" else f"{score:.3f}"


def table_rows(summary: list[SummaryEntry], which: str = "headline") -> tuple[list[str], list[list[str]]]:
    """The paper-style table: `headline` (after selection, with the score), `best` (best seed) or
    `mean` (mean ± std over seeds); scaled accuracy per evaluation length."""
    lengths = sorted(set().union(*[set(e["lengths"]) for e in summary])) if summary else []
    header = (
        ["task", "model", "lr"]
        + ([_score_header(summary)] if which == "headline" else [])
        + [length_header(summary, n) for n in lengths]
    )
    body = []
    for e in summary:
        spread = which == "mean" or (which == "headline" and e["selection"]["seeds"] == "mean")
        if spread:
            cells = [_spread(e["mean"].get(n), e["std"].get(n), _seeds_at(e, "scaled", n)) for n in lengths]
        else:
            cells = [_fmt(e["best"].get(n)) for n in lengths]
        body.append(
            [e["task"], entry_label(e), f"{e['lr']:g}"]
            + ([_fmt_score(e, e["score"])] if which == "headline" else [])
            + cells
        )
    return header, body


def length_header(summary: list[SummaryEntry], length: int) -> str:
    """A length's column header, "40 (train)" where it lies within the training lengths of every
    entry evaluated there (each entry's `train_length`, see `selection.with_train_lengths`)."""
    trains = [e.get("train_length") for e in summary if length in e["lengths"]]
    return f"{length} (train)" if trains and all(t is not None and length <= t for t in trains) else str(length)


def _seeds_at(entry: SummaryEntry, key: str, length: int) -> int:
    """How many seeds (at the selected lr) measured `key` ('scaled' or 'sequence') at `length`."""
    return sum(1 for r in entry["per_seed"].values() if length in r[key])


def seed_rows(summary: list[SummaryEntry]) -> tuple[list[str], list[list[str]]]:
    """One row per seed at the selected lr: the spread behind the headline."""
    lengths = sorted(set().union(*[set(e["lengths"]) for e in summary])) if summary else []
    header = ["task", "model", "lr", "seed", _score_header(summary)] + [str(n) for n in lengths]
    body = [
        [
            e["task"],
            entry_label(e),
            f"{e['lr']:g}",
            str(seed) + (" *" if seed == e["best_seed"] else ""),
            _fmt_score(e, r["score"]),
        ]
        + [_fmt(r["scaled"].get(n)) for n in lengths]
        for e in summary
        for seed, r in e["per_seed"].items()
    ]
    return header, body


def lr_rows(summary: list[SummaryEntry]) -> tuple[list[str], list[list[str]]]:
    """Each learning rate's score under the lr rule; the selected one is marked."""
    lrs = sorted(set().union(*[set(e["lr_scores"]) for e in summary])) if summary else []
    header = ["task", "model"] + [f"lr {lr:g}" for lr in lrs]
    body = [
        [e["task"], entry_label(e)]
        + [
            "-" if lr not in e["lr_scores"] else _fmt_score(e, e["lr_scores"][lr]) + (" *" if lr == e["lr"] else "")
            for lr in lrs
        ]
        for e in summary
    ]
    return header, body


def sequence_rows(summary: list[SummaryEntry]) -> tuple[list[str], list[list[str]], int]:
    """Sequence accuracy (examples right at every supervised position) per evaluation length, mean ±
    std over the seeds at the selected lr; the last item: the first two columns are text."""
    lengths = sorted(set().union(*[set(e["lengths"]) for e in summary])) if summary else []
    header = ["task", "model", "lr"] + [str(n) for n in lengths]
    body = [
        [e["task"], entry_label(e), f"{e['lr']:g}"]
        + [_spread(e["sequence_mean"].get(n), e["sequence_std"].get(n), _seeds_at(e, "sequence", n)) for n in lengths]
        for e in summary
    ]
    return header, body, 2


CHECK, CROSS = "✓", "✗"


def extrapolation_caption(selection: dict) -> str:
    """What a ✓ means under `selection` (the check-mark table's note, in the report and `statetrack results`)."""
    seeds = "mean over seeds" if selection["seeds"] == "mean" else "the best seed"
    return (
        f"{CHECK}: {selection['metric'].replace('_', ' ')} >= {selection['threshold']:g} at that length and at every "
        f"shorter one ({seeds} at the selected lr, as in the headline; Anonymous 2025), {CROSS}: not"
    )


def extrapolation_rows(summary: list[SummaryEntry]) -> tuple[list[str], list[list[str]], int]:
    """The paper's check-mark table (Anonymous 2025, Tables 2-5): per (task, model), ✓ at each test
    length the model extrapolates to (selection.metric, mean over seeds at the selected lr, >= the
    threshold there and at every shorter length), ✗ elsewhere; the last item: two text columns."""
    lengths = sorted(set().union(*[set(e["lengths"]) for e in summary])) if summary else []
    header = ["task", "model"] + [str(n) for n in lengths]
    body = [
        [e["task"], entry_label(e)]
        + ["" if n not in e["extrapolates"] else CHECK if e["extrapolates"][n] else CROSS for n in lengths]
        for e in summary
    ]
    return header, body, 2


# A cell that reads as a figure: a number (maybe "± spread", maybe "*" for selected), "-", a check mark.
_FIGURE = re.compile(r"^(-|[-+]?(\d+(\.\d*)?|\.\d+)(e[-+]?\d+)?( ± \S+)?( \*)?|[✓✗])?$")


def text_columns(header: list[str], body: list[list[str]], left: int | None = None) -> list[bool]:
    """Which columns are text (left-aligned): the `left` leading ones when given, else every column
    with a cell that is not a figure (names, claims, descriptions); figures are right-aligned."""
    if left is not None:
        return [i < left for i in range(len(header))]
    return [any(not _FIGURE.match(row[i]) for row in body) if body else i == 0 for i in range(len(header))]


def markdown_table(header: list[str], body: list[list[str]], left: int | None = None) -> str:
    """Text columns left-aligned (`:---`), figures right-aligned (`---:`); `left`: see `text_columns`."""
    marks = [" :--- " if text else " ---: " for text in text_columns(header, body, left)]
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(marks) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in body]
    return "\n".join(lines)


def text_table(header: list[str], body: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in [header] + body) for i in range(len(header))]
    text = text_columns(header, body)
    line = lambda r: "  ".join(
        c.ljust(w) if text[i] else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths))
    ).rstrip()  # noqa: E731
    return "\n".join([line(header), "  ".join("-" * w for w in widths)] + [line(r) for r in body])


def html_table(header: list[str], body: list[list[str]], left: int | None = None) -> str:
    """Text columns get class "text" (left-aligned); cells are right-aligned by default. `left`: see `text_columns`."""
    text = text_columns(header, body, left)
    cls = lambda i: ' class="text"' if text[i] else ""  # noqa: E731
    mark = {PASS: ' class="pass"', FAIL: ' class="fail"', INCONCLUSIVE: ' class="inconclusive"'}
    head = "".join(f"<th{cls(i)}>{html.escape(h)}</th>" for i, h in enumerate(header))
    rows = "".join(
        "<tr>" + "".join(f"<td{mark.get(c, cls(i))}>{html.escape(c)}</td>" for i, c in enumerate(r)) + "</tr>"
        for r in body
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>"


# Curves that coincide (three models exact at every short length) must stay told apart: each model
# gets a colour, a line style and a hollow marker of its own, markers shrinking so that one inside
# another shows.
FIT_MEASURE_TEXT = {"scaled": "scaled accuracy", "sequence": "sequence accuracy", "extrapolation": "accuracy"}


def flag_text(fit: dict, flag: str) -> str:
    """A fit table's flag cell ("learning": still learning, "collapsed"): k of N seeds, "no", or "-"
    where it was not recorded."""
    seeds = fit.get(flag)
    return "-" if seeds is None else f"{len(seeds)} of {len(fit['figures'])}" if seeds else "no"


def fit_rows(fits: list[dict]) -> tuple[str, tuple[list[str], list[list[str]]]]:
    """(the note, the table) of `scoring.fit_table`: per task and model, the figure at the longest
    training length (mean over seeds, and the lowest and highest seed), how many seeds reached the
    fit threshold, the median steps trained against the budget, and the runs still learning."""
    if not fits:
        return "", ([], [])
    header = [
        "task",
        "model",
        "lr",
        "at the longest training length",
        "fitted seeds",
        "median steps",
        "still learning",
        "collapsed",
    ]
    body = []
    for f in fits:
        values = [v for v in f["figures"].values() if v is not None]
        figure = (
            "-"
            if not values
            else f"{sum(values) / len(values):.3f} ({min(values):.3f} to {max(values):.3f}) at {f['length']}"
            if len(values) > 1
            else f"{values[0]:.3f} at {f['length']}"
        )
        steps = sorted(f["steps"].values())
        median = statistics.median(steps) if steps else 0
        body.append(
            [
                f["task"] + (f" N={f['dataset_size']}" if f["dataset_size"] else ""),
                f["model"],
                f"{f['lr']:g}",
                figure,
                f"{len(f['fitted'])} of {len(f['figures'])}",
                (f"{median:g} of {f['budget']}" if f["budget"] else f"{median:g}") if steps else "-",
                flag_text(f, "learning"),
                flag_text(f, "collapsed"),
            ]
        )
    first = fits[0]
    note = (
        f"Did each model learn what it was trained on? Its {FIT_MEASURE_TEXT[first['measure']]} at its task's "
        f"longest training length on the test examples, at the selected lr: mean over seeds (lowest to highest); "
        f"fitted: the seeds at or above the fit threshold {first['threshold']:g}, the only ones a claim beyond the "
        "training lengths is decided on; median steps trained of the budget (a run stops once it fits); still "
        "learning: runs whose training loss was still falling when their budget ended (steps weighed by their "
        "learning rate); collapsed: unfitted runs that predicted one class at every supervised position there."
    )
    return note, (header, body)


def data_efficiency_rows(efficiency: list[dict]) -> tuple[list[str], list[list[str]]]:
    """`selection.data_efficiency` as a table: one row per (task, model), mean ± std per N."""
    sizes = sorted({n for e in efficiency for n in e["by_size"]})
    header = ["task", "model", "length"] + [f"N={n}" for n in sizes]
    body = []
    for e in efficiency:
        cells = [e["by_size"].get(n, {}).get("mean") for n in sizes]
        body.append(
            [e["task"], e["model"], str(e["length"])]
            + [
                _spread(m, e["by_size"].get(n, {}).get("std"), e["by_size"].get(n, {}).get("seeds", 0))
                for n, m in zip(sizes, cells)
            ]
        )
    return header, body


def metric_rows(
    series: list[tuple[SummaryEntry, dict]],
) -> list[tuple[str, tuple[list[str], list[list[str]]]]]:
    """One table per metric family and statistic measured at evaluation lengths (e.g. the
    total-variation distance to the exact belief on `pfsa`): rows task and model, a column per length."""
    tables = []
    for family in sorted({f for _, s in series for f in s}):
        for stat in sorted({st for _, s in series for st in s.get(family, {})}):
            lengths = sorted({n for _, s in series for n in s.get(family, {}).get(stat, {})})
            body = [
                [e["task"], entry_label(e)] + [_fmt(s[family][stat].get(n)) for n in lengths]
                for e, s in series
                if stat in s.get(family, {})
            ]
            title = METRIC_NAMES.get(family, family) + (f" ({stat})" if stat else "")
            tables.append((title, (["task", "model"] + [str(n) for n in lengths], body)))
    return tables


LATEX_SPECIAL = {
    "\\": r"\textbackslash{}",
    "&": r"\&",
    "%": r"\%",
    "$": r"\$",
    "#": r"\#",
    "_": r"\_",
    "{": r"\{",
    "}": r"\}",
    "~": r"\textasciitilde{}",
    "^": r"\textasciicircum{}",
    "±": r"$\pm$",
    "≥": r"$\geq$",
    "≤": r"$\leq$",
    PASS: r"\checkmark{}",
    FAIL: r"$\times$",
    "…": r"\ldots{}",
    "—": "---",
    "–": "--",
    "×": r"$\times$",
}


def latex_escape(text: str) -> str:
    return "".join(LATEX_SPECIAL.get(c, c) for c in str(text))


def latex_table(header: list[str], body: list[list[str]], caption: str = "", left: int | None = None) -> str:
    """A booktabs table (\\toprule, \\midrule, \\bottomrule; text columns left-aligned, figures
    right-aligned) with its caption, ready for \\input in a paper that loads booktabs (and amssymb for
    the check mark)."""
    text = text_columns(header, body, left)
    spec = "".join("l" if t else "r" for t in text)
    row = lambda cells: " & ".join(latex_escape(c) for c in cells) + r" \\"  # noqa: E731
    lines = [
        r"\begin{table}[t]",
        r"\centering",
        r"\small",
        f"\\begin{{tabular}}{{{spec}}}",
        r"\toprule",
        row(header),
        r"\midrule",
        *[row(r) for r in body],
        r"\bottomrule",
        r"\end{tabular}",
    ]
    if caption:
        lines.append(f"\\caption{{{latex_escape(caption)}}}")
    lines.append(r"\end{table}")
    return "\n".join(lines) + "\n"
