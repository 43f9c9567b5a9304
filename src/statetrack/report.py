"""Reports: renders what `statetrack.scoring` computes (the paper's figures and claims beside the
measured ones with a verdict per claim, the table after selection, the per-seed spread, the learning
rates, sequence accuracy where it says more than accuracy), plots (the models' own metrics too, e.g.
fixed-point iterations), Markdown and self-contained HTML, and an index of every experiment."""

from __future__ import annotations

import base64
import html
import math
import re
import statistics
import time
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter  # noqa: E402

from statetrack.scoring import (FAIL, MEASURE_TEXT, NOT_MEASURED, PASS, claim_verdicts, data_efficiency,  # noqa: E402
                                describe_selection, experiment_summary, paper_figures, paper_of, planned_ids, planned_names,
                                selection_of, verdict_counts)
from statetrack.store import Store  # noqa: E402


def model_label(model: str, dataset_size: int | None = None) -> str:
    """The model's name in tables and legends; runs on a fixed training set add "N=<size>"."""
    return model if dataset_size is None else f"{model} N={dataset_size}"


def _label(entry: dict) -> str:
    return model_label(entry["model"], entry.get("dataset_size"))


def _fmt(value) -> str:
    return "-" if value is None else f"{value:.3f}"


def _spread(mean, std, count: int) -> str:
    """mean ± std over seeds; the value alone when one seed measured it (a spread of one is no spread)."""
    if mean is None:
        return "-"
    return f"{mean:.3f}" if count < 2 else f"{mean:.3f} ± {std:.3f}"


def _score_header(summary: list[dict]) -> str:
    criterion = summary[0]["selection"]["criterion"] if summary else "mean_scaled"
    return "extrapolates to" if criterion == "extrapolation" else "score"


def _fmt_score(entry: dict, score: float) -> str:
    return f"{score:g}" if entry["selection"]["criterion"] == "extrapolation" else f"{score:.3f}"


def table_rows(summary: list[dict], which: str = "headline") -> tuple[list[str], list[list[str]]]:
    """The paper-style table: `headline` (after selection, with the score), `best` (best seed) or
    `mean` (mean ± std over seeds); scaled accuracy per evaluation length."""
    lengths = sorted(set().union(*[set(e["lengths"]) for e in summary])) if summary else []
    header = ["task", "model", "lr"] + ([_score_header(summary)] if which == "headline" else []) + [str(n) for n in lengths]
    body = []
    for e in summary:
        spread = which == "mean" or (which == "headline" and e["selection"]["seeds"] == "mean")
        if spread:
            cells = [_spread(e["mean"].get(n), e["std"].get(n), _seeds_at(e, "scaled", n)) for n in lengths]
        else:
            cells = [_fmt(e["best"].get(n)) for n in lengths]
        body.append([e["task"], _label(e), f"{e['lr']:g}"] + ([_fmt_score(e, e["score"])] if which == "headline" else []) + cells)
    return header, body


def _seeds_at(entry: dict, key: str, length: int) -> int:
    """How many seeds (at the selected lr) measured `key` ('scaled' or 'sequence') at `length`."""
    return sum(1 for r in entry["per_seed"].values() if length in r[key])


def seed_rows(summary: list[dict]) -> tuple[list[str], list[list[str]]]:
    """One row per seed at the selected lr: the spread behind the headline."""
    lengths = sorted(set().union(*[set(e["lengths"]) for e in summary])) if summary else []
    header = ["task", "model", "lr", "seed", _score_header(summary)] + [str(n) for n in lengths]
    body = [[e["task"], _label(e), f"{e['lr']:g}", str(seed) + (" *" if seed == e["best_seed"] else ""), _fmt_score(e, r["score"])]
            + [_fmt(r["scaled"].get(n)) for n in lengths]
            for e in summary for seed, r in e["per_seed"].items()]
    return header, body


def lr_rows(summary: list[dict]) -> tuple[list[str], list[list[str]]]:
    """Each learning rate's score under the lr rule; the selected one is marked."""
    lrs = sorted(set().union(*[set(e["lr_scores"]) for e in summary])) if summary else []
    header = ["task", "model"] + [f"lr {lr:g}" for lr in lrs]
    body = [[e["task"], _label(e)] + ["-" if lr not in e["lr_scores"] else _fmt_score(e, e["lr_scores"][lr]) + (" *" if lr == e["lr"] else "")
                                       for lr in lrs] for e in summary]
    return header, body


def sequence_rows(summary: list[dict]) -> tuple[list[str], list[list[str]], int]:
    """Sequence accuracy (examples right at every supervised position) per evaluation length, mean ±
    std over the seeds at the selected lr; the last item: the first two columns are text."""
    lengths = sorted(set().union(*[set(e["lengths"]) for e in summary])) if summary else []
    header = ["task", "model", "lr"] + [str(n) for n in lengths]
    body = [[e["task"], _label(e), f"{e['lr']:g}"]
            + [_spread(e["sequence_mean"].get(n), e["sequence_std"].get(n), _seeds_at(e, "sequence", n)) for n in lengths]
            for e in summary]
    return header, body, 2


CHECK, CROSS = "✓", "✗"


def extrapolation_caption(selection: dict) -> str:
    """What a ✓ means under `selection` (the check-mark table's note, in the report and `statetrack results`)."""
    return (f"{CHECK}: {selection['metric'].replace('_', ' ')} >= {selection['threshold']:g} at that length and at every "
            f"shorter one (mean over seeds at the selected lr; Anonymous 2025), {CROSS}: not")


def extrapolation_rows(summary: list[dict]) -> tuple[list[str], list[list[str]], int]:
    """The paper's check-mark table (Anonymous 2025, Tables 2-5): per (task, model), ✓ at each test
    length the model extrapolates to (selection.metric, mean over seeds at the selected lr, >= the
    threshold there and at every shorter length), ✗ elsewhere; the last item: two text columns."""
    lengths = sorted(set().union(*[set(e["lengths"]) for e in summary])) if summary else []
    header = ["task", "model"] + [str(n) for n in lengths]
    body = [[e["task"], _label(e)] + ["" if n not in e["extrapolates"] else CHECK if e["extrapolates"][n] else CROSS for n in lengths]
            for e in summary]
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
    line = lambda r: "  ".join(c.ljust(w) if text[i] else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths))).rstrip()  # noqa: E731
    return "\n".join([line(header), "  ".join("-" * w for w in widths)] + [line(r) for r in body])


def html_table(header: list[str], body: list[list[str]], left: int | None = None) -> str:
    """Text columns get class "text" (left-aligned); cells are right-aligned by default. `left`: see `text_columns`."""
    text = text_columns(header, body, left)
    cls = lambda i: ' class="text"' if text[i] else ""  # noqa: E731
    mark = {PASS: ' class="pass"', FAIL: ' class="fail"'}
    head = "".join(f"<th{cls(i)}>{html.escape(h)}</th>" for i, h in enumerate(header))
    rows = "".join("<tr>" + "".join(f"<td{mark.get(c, cls(i))}>{html.escape(c)}</td>" for i, c in enumerate(r)) + "</tr>" for r in body)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>"


# Curves that coincide (three models exact at every short length) must stay told apart: each model
# gets a colour, a line style and a hollow marker of its own, markers shrinking so that one inside
# another shows.
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "<", ">", "*")
LINE_STYLES = ("-", "--", "-.", ":")


def curve_style(i: int) -> dict:
    """The i-th model's line: colour, line style and a hollow marker (sizes 9, 7.5, 6, 4.5 in turn)."""
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    return {"color": colors[i % len(colors)], "ls": LINE_STYLES[i % len(LINE_STYLES)], "marker": MARKERS[i % len(MARKERS)],
            "markersize": 9 - 1.5 * (i % 4), "markerfacecolor": "none", "markeredgewidth": 1.4, "lw": 1.4}


def train_ranges(runs: list[dict]) -> dict:
    """{run task: (shortest, longest) training length} from the runs' configurations."""
    from statetrack.train import TrainConfig

    out = {}
    for r in runs:
        train = (r.get("config") or {}).get("train") or {}
        out.setdefault(r["task"], (train.get("min_length", TrainConfig.min_length), train.get("max_length", TrainConfig.max_length)))
    return out


def _mark_training(ax, lengths: tuple[int, int] | None) -> None:
    """Shade the training lengths (a dashed line when there is one), labelled for the legend."""
    if not lengths:
        return
    lo, hi = lengths
    if lo == hi:
        ax.axvline(lo, color="0.55", ls="--", lw=1, zorder=0, label=f"training length {lo}")
    else:
        ax.axvspan(lo, hi, color="0.93", zorder=0, label=f"training lengths {lo}..{hi}")


def _shared_legend(fig, axes) -> None:
    """One legend for the figure, below the plots: every label once, in the order first drawn."""
    seen = {}
    for ax in axes:
        for handle, label in zip(*ax.get_legend_handles_labels()):
            seen.setdefault(label, handle)
    fig.legend(list(seen.values()), list(seen), loc="outside lower center", ncol=min(3, max(1, len(seen))), fontsize=8, frameon=False)


def plot_accuracy_vs_length(summary: list[dict], path: Path, training: dict | None = None) -> Path:
    """Per task: each model's headline line, its mean ± std band and faint per-seed lines; the chance
    level and the training lengths (`training`: {run task: (shortest, longest)}) marked."""
    tasks = sorted({e["task"] for e in summary})
    models = list(dict.fromkeys(_label(e) for e in summary))
    fig, axes = plt.subplots(1, len(tasks), figsize=(6 * len(tasks), 4.2 + 0.22 * (len(models) + 2) / 3), squeeze=False,
                             layout="constrained")
    for ax, task in zip(axes[0], tasks):
        entries = [e for e in summary if e["task"] == task]
        for e in entries:
            xs = e["lengths"]
            style = curve_style(models.index(_label(e)))
            ax.plot(xs, [e["headline"][n] for n in xs], label=_label(e), zorder=3, **style)
            for r in e["per_seed"].values():
                if len(e["per_seed"]) > 1:
                    ax.plot(xs, [r["scaled"].get(n, float("nan")) for n in xs], color=style["color"], lw=0.6, alpha=0.35)
            if len(e["seeds"]) > 1:
                lo = [e["mean"][n] - e["std"][n] for n in xs]
                hi = [e["mean"][n] + e["std"][n] for n in xs]
                ax.fill_between(xs, lo, hi, color=style["color"], alpha=0.12)
        _mark_training(ax, (training or {}).get(entries[0].get("run_task", task)))
        ax.set_xscale("log")
        lengths = sorted({n for e in entries for n in e["lengths"]})
        headline = "mean over seeds" if entries[0]["selection"]["seeds"] == "mean" else "best seed"
        _score_axes(ax, lengths, "evaluation length", f"scaled accuracy ({headline})", task)
    _shared_legend(fig, axes[0])
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def _score_axes(ax, ticks: list[int], xlabel: str, ylabel: str, title: str) -> None:
    """The axes every scaled-accuracy plot shares: a tick per measured x, y from just below chance
    (0) to 1, the chance line (labelled), labels; the legend is the figure's."""
    ax.set_xticks(ticks, [str(n) for n in ticks])
    ax.minorticks_off()
    ax.set_ylim(-0.1, 1.05)
    ax.axhline(0.0, color="0.35", ls=":", lw=1, zorder=1, label="chance (scaled accuracy 0)")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(axis="y", color="0.92", lw=0.6)


def data_efficiency_rows(efficiency: list[dict]) -> tuple[list[str], list[list[str]]]:
    """`scoring.data_efficiency` as a table: one row per (task, model), mean ± std per N."""
    sizes = sorted({n for e in efficiency for n in e["by_size"]})
    header = ["task", "model", "length"] + [f"N={n}" for n in sizes]
    body = []
    for e in efficiency:
        cells = [e["by_size"].get(n, {}).get("mean") for n in sizes]
        body.append([e["task"], e["model"], str(e["length"])]
                    + [_spread(m, e["by_size"].get(n, {}).get("std"), e["by_size"].get(n, {}).get("seeds", 0)) for n, m in zip(sizes, cells)])
    return header, body


def plot_accuracy_vs_dataset_size(efficiency: list[dict], path: Path) -> Path:
    """Per task: each model's scaled accuracy at the longest test length against the training-set
    size N (log scale), mean ± std over seeds (Ebrahimi & Memisevic 2025, Fig. 2)."""
    tasks = sorted({e["task"] for e in efficiency})
    models = list(dict.fromkeys(e["model"] for e in efficiency))
    fig, axes = plt.subplots(1, len(tasks), figsize=(6 * len(tasks), 4.2 + 0.22 * (len(models) + 1) / 3), squeeze=False,
                             layout="constrained")
    for ax, task in zip(axes[0], tasks):
        entries = [e for e in efficiency if e["task"] == task]
        for e in entries:
            xs = [n for n, v in e["by_size"].items() if v["mean"] is not None]
            mean = [e["by_size"][n]["mean"] for n in xs]
            std = [e["by_size"][n]["std"] for n in xs]
            style = curve_style(models.index(e["model"]))
            ax.plot(xs, mean, label=e["model"], zorder=3, **style)
            ax.fill_between(xs, [m - d for m, d in zip(mean, std)], [m + d for m, d in zip(mean, std)], color=style["color"], alpha=0.12)
        ax.set_xscale("log")
        _score_axes(ax, sorted({n for e in entries for n in e["by_size"]}), "training-set size N",
                    f"scaled accuracy at length {entries[0]['length']}", task)
    _shared_legend(fig, axes[0])
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def _run_label(run: dict) -> str:
    """A stored run's model label (N from its configuration)."""
    return model_label(run["model"], ((run.get("config") or {}).get("train") or {}).get("dataset_size", run.get("dataset_size")))


def log_axis(axis, low: float, high: float) -> None:
    """A log-scale axis with plain tick labels (0.01, 0.1, 1 rather than 10^-2...): 1-2-5 ticks
    within three decades, one per decade beyond, no labelled minor ticks."""
    decades = math.log10(high / low) if low > 0 and high > low else 0.0
    axis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0) if decades <= 3 else (1.0,)))
    axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    axis.set_minor_formatter(NullFormatter())


def stage_starts(store: Store, runs: list[dict]) -> list[tuple[int, int]]:
    """(step, stage) where each curriculum stage after the first begins, from the first run that
    trained with a curriculum (its curve points carry their stage); [] without one."""
    for run in runs:
        curve = store.curves(run["id"])
        if any("stage" in c for c in curve):
            starts, last = [], None
            previous_step = 0
            for point in curve:
                if last is not None and point["stage"] != last:
                    starts.append((previous_step, point["stage"]))
                last, previous_step = point["stage"], point["step"]
            return starts
    return []


def plot_curves(store: Store, runs: list[dict], path: Path) -> Path:
    """Training loss against step (log scale, plain tick labels), one line per run: the model's
    colour and style (`curve_style`), seeds of one model in the same colour; dotted lines where
    curriculum stages begin."""
    models = list(dict.fromkeys(_run_label(r) for r in runs))
    fig, ax = plt.subplots(figsize=(7, 4.2 + 0.2 * (len(runs) + 2) / 3), layout="constrained")
    low, high = math.inf, 0.0
    for run in runs:
        curve = [c for c in store.curves(run["id"]) if c["loss"] > 0]
        if curve:
            style = curve_style(models.index(_run_label(run)))
            losses = [c["loss"] for c in curve]
            low, high = min(low, *losses), max(high, *losses)
            ax.plot([c["step"] for c in curve], losses, color=style["color"], ls=style["ls"], lw=1,
                    label=f"{_run_label(run)} seed {run['seed']} lr {run['lr']:g}")
    ax.set_yscale("log")
    if high > 0:
        log_axis(ax.yaxis, low, high)
    for step, stage in stage_starts(store, runs):
        ax.axvline(step, color="0.5", ls=":", lw=1)
        ax.text(step, 1.0, f" stage {stage + 1}", transform=ax.get_xaxis_transform(), fontsize=7, va="top", color="0.35")
    ax.set_xlabel("step")
    ax.set_ylabel("training loss (log scale)")
    ax.grid(axis="y", which="major", color="0.92", lw=0.6)
    fig.legend(loc="outside lower center", ncol=3, fontsize=7, frameon=False)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


# ---- a model's own metrics (e.g. fixed-point iterations) ----------------------------------------
# A metric `X_<stat>` belongs to family X (one plot per family); its statistic sets the line style.
STAT_STYLES = {"median": "-", "mean": "-", "min": ":", "max": "--"}
METRIC_NAMES = {"iterations": "fixed-point iterations", "tv_distance": "total-variation distance to the exact belief"}  # a family's name on the axes, when not its key


def metric_family(name: str) -> tuple[str, str]:
    """`iterations_median` -> ('iterations', 'median'); a name without a known statistic is its own family ('')."""
    family, _, stat = name.rpartition("_")
    return (family, stat) if family and stat in STAT_STYLES else (name, "")


def metric_series(points_by_run: list[list[tuple[int, dict]]]) -> dict:
    """[(x, {metric: value}) per point, per run] -> {family: {stat: {x: value}}} over the runs (seeds):
    the max of `max`, the min of `min`, the mean of the others."""
    values: dict = {}
    for points in points_by_run:
        for x, metrics in points:
            for name, value in metrics.items():
                family, stat = metric_family(name)
                values.setdefault(family, {}).setdefault(stat, {}).setdefault(x, []).append(value)
    agg = {"max": max, "min": min}
    return {family: {stat: {x: agg.get(stat, statistics.mean)(v) for x, v in sorted(by_x.items())} for stat, by_x in stats.items()}
            for family, stats in values.items()}


def _run_size(run: dict):
    return ((run.get("config") or {}).get("train") or {}).get("dataset_size")


def selected_runs(summary: list[dict], runs: list[dict]) -> list[tuple[dict, list[dict]]]:
    """Each summary entry with its done runs at the selected lr (one per seed)."""
    return [(e, [r for r in runs if r["status"] == "done" and (r["task"], r["model"], _run_size(r), r["lr"]) ==
                 (e.get("run_task", e["task"]), e["model"], e["dataset_size"], e["lr"]) and r["seed"] in e["seeds"]]) for e in summary]


def plot_metric(series: list[tuple[dict, dict]], family: str, xlabel: str, path: Path, log_x: bool = False) -> Path:
    """One metric family against x (evaluation length or training step), per task: one colour per
    model, one line style per statistic (median solid, max dashed, min dotted)."""
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    name = METRIC_NAMES.get(family, family)
    tasks = sorted({e["task"] for e, s in series if family in s})
    order = list(STAT_STYLES)
    fig, axes = plt.subplots(1, len(tasks), figsize=(6 * len(tasks), 4), squeeze=False)
    for ax, task in zip(axes[0], tasks):
        xs_all: set = set()
        for i, (e, s) in enumerate(series):
            if e["task"] != task or family not in s:
                continue
            for stat, values in sorted(s[family].items(), key=lambda kv: (order.index(kv[0]) if kv[0] in order else len(order), kv[0])):
                xs = sorted(values)
                xs_all.update(xs)
                ax.plot(xs, [values[x] for x in xs], ls=STAT_STYLES.get(stat, "-"), color=colors[i % len(colors)],
                        marker="o" if log_x else None, lw=1.2, label=f"{_label(e)} lr={e['lr']:g} {stat}".rstrip())
        if log_x:
            ax.set_xscale("log")
            ticks = sorted(xs_all)
            ax.set_xticks(ticks, [str(n) for n in ticks])
            ax.minorticks_off()
        ax.set_xlabel(xlabel)
        ax.set_ylabel(name)
        ax.set_title(task)
        ax.legend(fontsize=7)
    fig.suptitle(f"{name} vs {xlabel}")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def metrics_by_length(store: Store, summary: list[dict], runs: list[dict]) -> list[tuple[dict, dict]]:
    """Per summary entry, its evaluations' metrics over the seeds at the selected lr:
    (entry, {family: {stat: {length: value}}}) (`metric_series`)."""
    return [(e, metric_series([[(row["length"], row["metrics"]) for row in store.evals(r["id"], e.get("variant", ""))] for r in rs]))
            for e, rs in selected_runs(summary, runs)]


def metric_rows(series: list[tuple[dict, dict]]) -> list[tuple[str, tuple[list[str], list[list[str]]]]]:
    """One table per metric family and statistic measured at evaluation lengths (e.g. the
    total-variation distance to the exact belief on `pfsa`): rows task and model, a column per length."""
    tables = []
    for family in sorted({f for _, s in series for f in s}):
        for stat in sorted({st for _, s in series for st in s.get(family, {})}):
            lengths = sorted({n for _, s in series for n in s.get(family, {}).get(stat, {})})
            body = [[e["task"], _label(e)] + [_fmt(s[family][stat].get(n)) for n in lengths]
                    for e, s in series if stat in s.get(family, {})]
            title = METRIC_NAMES.get(family, family) + (f" ({stat})" if stat else "")
            tables.append((title, (["task", "model"] + [str(n) for n in lengths], body)))
    return tables


def plot_metrics(store: Store, summary: list[dict], runs: list[dict], out: Path) -> list[Path]:
    """The models' own metrics at the selected lr, over the seeds: per family (e.g. `iterations`
    from iterations_median and iterations_max), `<family>_vs_length.png` when evaluations carry it
    and `<family>_vs_step.png` when training-curve points do. None when no run reports metrics."""
    selected = selected_runs(summary, runs)
    by_length = metrics_by_length(store, summary, runs)
    by_step = [(e, metric_series([[(c["step"], c["metrics"]) for c in store.curves(r["id"])] for r in rs])) for e, rs in selected]
    plots = []
    for series, xlabel, suffix, log_x in ((by_length, "evaluation length", "length", True), (by_step, "training step", "step", False)):
        for family in sorted({f for _, s in series for f in s}):
            stem = re.sub(r"[^A-Za-z0-9_.-]+", "_", family)
            plots.append(plot_metric(series, family, xlabel, out / f"{stem}_vs_{suffix}.png", log_x=log_x))
    return plots


def _mean_lists(lists: list[list]) -> list:
    """Element-wise mean of equal-length lists, None where every list has None."""
    out = []
    for values in zip(*lists):
        present = [v for v in values if v is not None]
        out.append(statistics.mean(present) if present else None)
    return out


def _position_label(run: dict) -> str:
    """What the run's task counts per-position accuracy along (`Task.position_label`)."""
    from statetrack.tasks import TASKS

    cls = TASKS.get((run["config"].get("task") or {}).get("name"))
    return cls.position_label if cls is not None else "input position"


def position_series(store: Store, summary: list[dict], runs: list[dict]) -> list[tuple[dict, int, list, str]]:
    """(entry, length, per-position accuracy, mean over the seeds at the selected lr, what a position
    is) at the entry's longest length that has a per-position accuracy with more than one supervised
    position (a task supervised once per example, at its end, has nothing to show along the input)."""
    out = []
    for e, rs in selected_runs(summary, runs):
        by_length: dict = {}
        for r in rs:
            for row in store.evals(r["id"], e.get("variant", "")):
                positions = row.get("position_accuracy")
                if positions and sum(v is not None for v in positions) > 1:
                    by_length.setdefault(row["length"], []).append(positions)
        if by_length:
            length = max(by_length)
            values = _mean_lists([p for p in by_length[length] if len(p) == len(by_length[length][0])])
            out.append((e, length, values, _position_label(rs[0])))
    return out


def plot_position_accuracy(series: list[tuple[dict, int, list, str]], path: Path, train_length: int | None = None) -> Path:
    """Per task: accuracy at each position at the longest evaluation length, one line per model
    (positions never supervised are skipped; a position is an input token, or the k-th supervised
    answer such as a REPL trace's k-th reveal); a dotted line marks the longest training length
    where positions are tokens."""
    tasks = sorted({x[0]["task"] for x in series})
    models = list(dict.fromkeys(_label(x[0]) for x in series))
    fig, axes = plt.subplots(len(tasks), 1, figsize=(9, 3.2 * len(tasks)), squeeze=False)
    for ax, task in zip(axes[:, 0], tasks):
        lengths, unit = set(), "input position"
        for e, length, values, unit in (x for x in series if x[0]["task"] == task):
            xs = [i for i, v in enumerate(values) if v is not None]
            style = curve_style(models.index(_label(e)))
            ax.plot(xs, [values[i] for i in xs], color=style["color"], ls=style["ls"], lw=1, label=_label(e))
            lengths.add(length)
        if train_length and unit == "input position":
            ax.axvline(train_length, color="grey", ls=":", lw=1, label=f"longest training length {train_length}")
        ax.set_ylim(-0.05, 1.05)
        ax.set_xlabel(unit)
        ax.set_ylabel("accuracy")
        ax.set_title(f"{task}, length {', '.join(map(str, sorted(lengths)))}")
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def plot_traces(store: Store, summary: list[dict], runs: list[dict], answers: dict, out: Path) -> list[Path]:
    """Model output against the input (Anonymous 2025, Fig. 2-3), one PNG per task (and evaluation
    variant) whose runs kept traces (`eval.traces`): per model, the first traced example at the
    shortest traced length of its best seed at the selected lr. Grey: the input tokens (scaled to
    [0, 1]); dashed: the target; solid: the model's probability of the last answer class when there
    are two (e.g. the signal being on, for `counting`), else of the target class."""
    by_task: dict = {}
    for e, rs in selected_runs(summary, runs):
        seeded = sorted(rs, key=lambda r: r["seed"] != e["best_seed"])
        for r in seeded[:1]:
            traced = [t for t in store.traces(r["id"]) if t["variant"] == e.get("variant", "")]
            if traced:
                by_task.setdefault(e["task"], []).append((e, min(traced, key=lambda t: t["length"])))
    paths = []
    for task, entries in sorted(by_task.items()):
        fig, axes = plt.subplots(len(entries), 1, figsize=(10, 1.9 * len(entries) + 0.6), squeeze=False, sharex=True)
        for ax, (e, traced) in zip(axes[:, 0], entries):
            example = traced["examples"][0]
            inputs, targets, mask, probs = example["inputs"], example["targets"], example["mask"], example["probabilities"]
            lo, hi = min(inputs), max(inputs)
            xs = range(len(inputs))
            ax.fill_between(xs, [(v - lo) / ((hi - lo) or 1) for v in inputs], step="mid", color="0.85", label="input")
            binary = len(probs[0]) == 2
            names = answers.get(e.get("run_task", task))
            if binary:
                ax.plot(xs, [t if m else float("nan") for t, m in zip(targets, mask)], ls="--", color="k", lw=1, label="target")
                ax.plot(xs, [p[1] for p in probs], color="C0", lw=1.2, label=f"p({names[1] if names else 'class 1'})")
            else:
                ax.plot(xs, [p[t] if m else float("nan") for p, t, m in zip(probs, targets, mask)], color="C0", lw=1.2, label="p(target)")
            ax.set_ylim(-0.05, 1.05)
            ax.set_ylabel(_label(e), fontsize=8)
            ax.legend(fontsize=6, loc="upper right")
        axes[-1, 0].set_xlabel("time step")
        fig.suptitle(f"{task}: model output against the input (length {entries[0][1]['length']})")
        fig.tight_layout()
        path = out / f"traces_{re.sub(r'[^A-Za-z0-9_.-]+', '_', task).strip('_')}.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        paths.append(path)
    return paths


def _answers(runs: list[dict]) -> dict:
    """Each run task's answer classes (for legends), where the task can be built here."""
    from statetrack.tasks import make_task

    out = {}
    for r in runs:
        if r["task"] not in out:
            try:
                out[r["task"]] = make_task(**r["config"]["task"]).answers
            except Exception:  # a task registered by a module not imported here: generic legend
                pass
    return out


def missing_runs(store: Store, experiment: str) -> list[dict]:
    """Planned runs that are not done: {model, task, lr, seed, status, error}, status one of
    'not started', 'running or interrupted', 'failed'."""
    plan = store.plan(experiment)
    if plan is None:
        return [{**r, "status": "running or interrupted" if r["status"] == "running" else r["status"]}
                for r in store.runs(experiment) if r["status"] != "done"]
    stored = {r["id"]: r for r in store.runs(experiment)}
    missing = []
    for r in plan["runs"]:
        row = stored.get(r["id"])
        if row is None or row["status"] != "done":
            status = "not started" if row is None else "running or interrupted" if row["status"] == "running" else "failed"
            size = row["config"].get("train", {}).get("dataset_size") if row else r.get("dataset_size")
            missing.append({**r, "status": status, "error": row["error"] if row else None,
                            **({"dataset_size": size} if size is not None else {})})
    return missing


def _missing_line(r: dict) -> str:
    error = f" ({r['error'].splitlines()[0]})" if r.get("error") else ""
    return f"{_run_label(r)} / {r['task']} lr={r['lr']:g} seed={r['seed']}: {r['status']}{error}"


# ---- the paper beside the measured figures -------------------------------------------------------
MEASURE_SHORT = {"scaled": "scaled acc.", "sequence": "seq. acc.", "extrapolation": "extrapolates to"}
OPERATORS = {"at_least": ">=", "below": "<", "beats": ">"}
QUICK_NOTE = ("The quick scale is a small CPU version of the paper's setting: a ✗ there says what the small run shows, "
              "not that the paper is wrong (the paper scale has the paper's sizes).")


def spec_paper(experiment: str, scale: str | None = None) -> dict | None:
    """The `paper` section of the experiment's spec as it is now (a shipped experiment, or a spec
    file of that name), at `scale`; None when there is no such spec or it has none. `statetrack
    report` uses it, so that figures added to a spec reach reports of runs made before."""
    from statetrack.errors import StatetrackError
    from statetrack.experiments.spec import deep_merge, read_spec

    try:
        raw = read_spec(experiment)
    except StatetrackError:
        return None
    paper, override = raw.get("paper"), ((raw.get("scales") or {}).get(scale or "quick") or {}).get("paper")
    if isinstance(paper, dict) and isinstance(override, dict):
        return deep_merge(paper, override)
    return paper if override is None else override


def _figure(value, measure: str) -> str:
    """A paper's or a measured figure: text as given, a length as an integer ("none" for 0), else 3 decimals."""
    if value is None:
        return "-"
    if isinstance(value, str):
        return value
    if measure == "extrapolation":
        return f"{value:g}" if value else "none"
    return f"{value:.3f}"


def _over(lengths) -> str:
    if lengths is None:
        return " (mean over test lengths)"
    return f" at {lengths}" if isinstance(lengths, int) else f" over {lengths[0]}..{lengths[1]}"


def claim_test(claim: dict) -> str:
    """A claim's test in words: "scaled acc. over 40..256 >= 0.9", "extrapolates to > LSTM's"."""
    over = "" if claim["measure"] == "extrapolation" else _over(claim["lengths"])
    bound = " and ".join(f"{name}'s" for name in claim["bound"]) if claim["test"] == "beats" else f"{claim['bound']:g}"
    name = MEASURE_SHORT.get(claim["measure"], claim["measure"].removeprefix("metric:").replace("_", " "))
    return f"{name}{over} {OPERATORS[claim['test']]} {bound}"


def claim_measured(verdict: dict) -> str:
    """What was measured for a claim: one figure, or "who: figure" per model / task it covers, a ✗
    after each that fails when it covers several, and what was not run."""
    claim, results = verdict["claim"], verdict["results"]
    name_models = len({(r["model"], r["dataset_size"]) for r in results}) > 1
    name_tasks = len({r["task"] for r in results}) > 1
    parts = []
    for r in results:
        who = " ".join(x for x in (model_label(r["model"], r["dataset_size"]) if name_models else "",
                                   f"on {r['task']}" if name_tasks else "") if x)
        value = _figure(r["value"], claim["measure"])
        if claim["test"] == "beats":
            value += f" vs {_figure(r['rival'], claim['measure'])}"
        if r["holds"] is False and len(results) > 1:
            value += f" {FAIL}"
        parts.append(f"{who}: {value}" if who else value)
    if verdict["missing"]:
        parts.append("not run yet: " + ", ".join(verdict["missing"]))
    if verdict["unplanned"]:
        parts.append("not in this run: " + ", ".join(verdict["unplanned"]))
    return "; ".join(parts) or "-"


def verdict_line(verdicts: list[dict]) -> str:
    """"2/3 claims ✓, 1 ✗" (and how many could not be checked); "" without claims."""
    counts = verdict_counts(verdicts)
    if not verdicts:
        return ""
    return (f"{counts[PASS]}/{len(verdicts)} claims {PASS}" + (f", {counts[FAIL]} {FAIL}" if counts[FAIL] else "")
            + (f", {counts[NOT_MEASURED]} {NOT_MEASURED}" if counts[NOT_MEASURED] else ""))


def paper_tables(paper: dict, summary: list[dict], plan: dict | None = None) -> tuple[list[tuple], list[dict]]:
    """The report's "Paper vs measured" (the paper's figure beside the measured one per task and
    model) and "Claims" (each claim's test, what was measured, ✓ / ✗ / not measured) sections as
    (title, note, table), and the verdicts; `plan`: the experiment's (what it runs, at what scale)."""
    planned, scale = planned_names(plan), (plan or {}).get("scale")
    verdicts = claim_verdicts(paper, summary, planned)
    sections = []
    measured_text = MEASURE_TEXT.get(paper["measure"], paper["measure"].removeprefix("metric:").replace("_", " ")) + ("" if paper["measure"] == "extrapolation" else _over(paper["lengths"]))
    scale_text = f", {scale} scale" if scale else ""
    if any(paper["figures"].values()):
        rows = paper_figures(paper, summary, planned)
        with_task = len({r["task"] for r in rows}) > 1
        header = (["task"] if with_task else []) + ["model", "paper", "measured"]
        body = [([r["task"] or "-"] if with_task else []) + [model_label(r["model"], r["dataset_size"]), _figure(r["paper"], paper["measure"]),
                _figure(r["measured"], paper["measure"]) if r["run"] else "not run"]
                for r in rows]
        note = (f"Paper: {paper['source']}" + (f"; {paper['metric']}" if paper["metric"] else "") + f". Measured: {measured_text}{scale_text}.")
        sections.append(("Paper vs measured", note, (header, body)))
    if verdicts:
        body = [[v["claim"]["text"], claim_test(v["claim"]), claim_measured(v), v["verdict"]] for v in verdicts]
        note = (f"{verdict_line(verdicts)}. {PASS}: the measured figures pass the claim's test; {FAIL}: they do not; "
                f"{NOT_MEASURED}: nothing it names has finished runs here (runs missing, or its models are not in this scale)."
                + (f" {QUICK_NOTE}" if scale == "quick" else ""))
        sections.append(("Claims: did it reproduce?", note, (["claim", "test", "measured", "verdict"], body)))
    return sections, verdicts


def write_report(experiment: str, store: Store, results_dir: str | Path = "results", description: str = "",
                 selection: dict | None = None, paper: dict | None = None) -> Path:
    """Write results/<experiment>/report.md, report.html and the PNG plots; returns the folder.

    The report covers the runs of the experiment's latest plan (what the last `statetrack run`
    expanded) and lists those that are missing; the selection rule is the spec's unless given, and
    so is `paper` (the spec's `paper:` section: the paper's figures beside the measured ones and a
    ✓ / ✗ / not measured verdict per claim, near the top).
    Data-driven extras: a sequence-accuracy table when some run's sequence accuracy differs from its
    accuracy, a plot per family of the models' own metrics (`plot_metrics`, e.g. fixed-point
    iterations against evaluation length and training step) when runs report them, the check-mark
    table when the selection criterion is `extrapolation`, accuracy per input position
    (`plot_position_accuracy`) and the model's output against the input where runs kept traces.
    """
    out = Path(results_dir) / experiment
    out.mkdir(parents=True, exist_ok=True)
    plan = store.plan(experiment)
    if plan is not None:
        description = description or plan["spec"].get("description", "")
        selection = selection or selection_of(plan["spec"])
    summary = experiment_summary(store, experiment, selection)
    ids = planned_ids(store, experiment)
    all_runs = store.runs(experiment)
    runs = [r for r in all_runs if ids is None or r["id"] in ids]
    others = len(all_runs) - len(runs)
    missing = missing_runs(store, experiment)
    expected = len(plan["runs"]) if plan else len(runs)
    plots = [plot_accuracy_vs_length(summary, out / "accuracy_vs_length.png", train_ranges(runs))] if summary else []
    efficiency = data_efficiency(summary)
    if efficiency:
        plots.append(plot_accuracy_vs_dataset_size(efficiency, out / "accuracy_vs_dataset_size.png"))
    if any(r["status"] == "done" for r in runs):
        plots.append(plot_curves(store, [r for r in runs if r["status"] == "done"], out / "training_curves.png"))
    plots += plot_metrics(store, summary, runs, out)
    positions = position_series(store, summary, runs)
    if positions:
        train_length = ((plan or {}).get("spec", {}).get("train") or {}).get("max_length")
        plots.append(plot_position_accuracy(positions, out / "position_accuracy.png", train_length))
    plots += plot_traces(store, summary, runs, _answers(runs), out)
    rule = describe_selection(selection)
    tables = [
        ("Headline: scaled accuracy after selection", rule, table_rows(summary, "headline")),
        ("Scaled accuracy, best seed", "", table_rows(summary, "best")),
        ("Scaled accuracy, mean ± std over seeds", "", table_rows(summary, "mean")),
        ("Per seed at the selected lr", "* marks the best seed", seed_rows(summary)),
        ("Learning rates", "score of each lr under the lr rule; * marks the selected one", lr_rows(summary)),
    ]
    if any(e["sequence_differs"] for e in summary):
        tables.insert(3, ("Sequence accuracy", "fraction of examples right at every supervised position (string accuracy on copy), "
                          "mean ± std over seeds at the selected lr", sequence_rows(summary)))
    for title, table in metric_rows(metrics_by_length(store, summary, runs)):
        tables.insert(3, (title[0].upper() + title[1:] + " at each evaluation length",
                          "mean over seeds at the selected lr (max and min: over seeds and batches)", table))
    if summary and summary[0]["selection"]["criterion"] == "extrapolation":
        tables.insert(1, ("Extrapolation", extrapolation_caption(summary[0]["selection"]), extrapolation_rows(summary)))
    if efficiency:
        tables.insert(1, ("Data efficiency: scaled accuracy at the test length vs training-set size N",
                          "mean ± std over seeds at the lr selected for each N; N = fixed training examples (train.dataset_size)",
                          data_efficiency_rows(efficiency)))
    run_header = ["model", "task", "lr", "seed", "status", "steps", "train s", "params", "host", "git"]
    run_rows = [
        [_run_label(r), r["task"], f"{r['lr']:g}", str(r["seed"]), r["status"], str(r["steps"] or "-"),
         f"{r['train_seconds']:.0f}" if r["train_seconds"] else "-", str(r["num_parameters"] or "-"), r["host"] or "-", r["git_rev"] or "-"]
        for r in runs
    ]
    scale = f" at scale {plan['scale']}" if plan and plan.get("scale") else ""
    status_line = (f"{expected - len(missing)} of {expected} runs done{scale}"
                   + (f"; {others} other runs of this experiment in the store belong to other configurations" if others else ""))

    if not summary:
        tables = [("Results", "No finished runs yet.", ([], []))]
    paper = paper_of({"name": experiment, "paper": paper if paper is not None else (plan or {}).get("spec", {}).get("paper")})
    verdicts = []
    if paper:
        sections, verdicts = paper_tables(paper, summary, plan)
        tables = sections + tables
    if verdicts:
        status_line += f". Did it reproduce? {verdict_line(verdicts)}"
    md = [f"# {experiment}", "", description.strip(), "", status_line, ""]
    for title, note, table in tables:
        md += [f"## {title}", ""] + ([note, ""] if note else []) + ([markdown_table(*table), ""] if table[0] else [])
    md += [f"![{p.stem}]({p.name})" for p in plots] + [""]
    if missing:
        md += [f"## Missing runs ({len(missing)})", ""] + [f"- {_missing_line(r)}" for r in missing] + [""]
    md += ["## Runs", "", markdown_table(run_header, run_rows), ""]
    (out / "report.md").write_text("\n".join(md))

    images = "".join(
        f'<img alt="{p.stem}" src="data:image/png;base64,{base64.b64encode(p.read_bytes()).decode()}">' for p in plots
    )
    sections = "".join(f"<h2>{html.escape(title)}</h2>" + (f"<p>{html.escape(note)}</p>" if note else "")
                       + (html_table(*table) if table[0] else "") for title, note, table in tables)
    missing_html = "".join(f"<li>{html.escape(_missing_line(r))}</li>" for r in missing)
    page = f"""<!doctype html><html><head><meta charset="utf-8"><title>{html.escape(experiment)}</title>
<style>{STYLE}</style></head><body>
<h1>{html.escape(experiment)}</h1><p>{html.escape(description)}</p><p>{html.escape(status_line)}</p>
{sections}
{images}
{f"<h2>Missing runs ({len(missing)})</h2><ul>" + missing_html + "</ul>" if missing else ""}
<h2>Runs</h2>{html_table(run_header, run_rows)}
</body></html>"""
    (out / "report.html").write_text(page)
    return out


STYLE = ("body{font-family:sans-serif;max-width:1100px;margin:2em auto}table{border-collapse:collapse;margin:1em 0}"
         "td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}td.text,th.text{text-align:left}img{max-width:100%}"
         "td.pass{color:#1a7f37;font-weight:bold}td.fail{color:#c62828;font-weight:bold}"
         "table.index td{white-space:nowrap}table.index td:last-child{white-space:normal}")


def index_verdicts(store: Store, experiment: str, paper: dict | None = None) -> str:
    """An experiment's verdicts in one cell ("2/3 claims ✓, 1 ✗"); "-" without claims. `paper`: as
    in `write_report` (default: its plan's)."""
    from statetrack.errors import StatetrackError

    plan = store.plan(experiment)
    try:
        paper = paper_of({"name": experiment, "paper": paper if paper is not None else (plan or {}).get("spec", {}).get("paper")})
        return (verdict_line(claim_verdicts(paper, experiment_summary(store, experiment), planned_names(plan))) or "-") if paper else "-"
    except StatetrackError as error:
        return f"({error})"


def write_index(store: Store, results_dir: str | Path = "results", papers: dict | None = None) -> Path:
    """results/index.html (and index.md): every experiment in the store, linked to its report, with
    how many of its planned runs are done, failed and missing and its claims' verdicts (`papers`:
    {experiment: its spec's `paper`} where it differs from the one its plan holds)."""
    results_dir = Path(results_dir)
    header = ["experiment", "scale", "done", "expected", "failed", "missing", "claims", "planned", "description"]
    rows, links = [], []
    for name in store.experiments():
        plan = store.plan(name)
        claims = index_verdicts(store, name, (papers or {}).get(name))
        missing = missing_runs(store, name)
        runs = store.runs(name)
        expected = len(plan["runs"]) if plan else len(runs)
        failed = sum(1 for r in missing if r["status"] == "failed")
        when = time.strftime("%Y-%m-%d %H:%M", time.localtime(plan["created_at"])) if plan and plan["created_at"] else "-"
        description = " ".join(str((plan["spec"] if plan else {}).get("description", "")).split())
        rows.append([name, (plan or {}).get("scale") or "-", str(expected - len(missing)), str(expected), str(failed),
                     str(len(missing) - failed), claims, when, description])
        links.append(f"{name}/report.html")
    md = ["# statetrack results", ""] + [markdown_table(header, [[f"[{r[0]}]({link})"] + r[1:] for r, link in zip(rows, links)]), ""]
    (results_dir / "index.md").write_text("\n".join(md))
    text = text_columns(header, rows)
    cls = lambda i: ' class="text"' if text[i] else ""  # noqa: E731
    body = "".join(
        f'<tr><td class="text"><a href="{html.escape(link)}">{html.escape(r[0])}</a></td>'
        + "".join(f"<td{cls(i)}>{html.escape(c)}</td>" for i, c in enumerate(r[1:], 1)) + "</tr>"
        for r, link in zip(rows, links)
    )
    head = "".join(f"<th{cls(i)}>{html.escape(h)}</th>" for i, h in enumerate(header))
    page = f"""<!doctype html><html><head><meta charset="utf-8"><title>statetrack results</title>
<style>{STYLE}</style></head><body><h1>statetrack results</h1>
<table class="index"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></body></html>"""
    path = results_dir / "index.html"
    path.write_text(page)
    return path
