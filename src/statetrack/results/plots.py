"""Plots of the report: accuracy against length and training-set size, training curves (with
curriculum stages), the models' and tasks' own metrics, accuracy per position and the model's output
against the input. Each function writes one PNG and returns its path; `statetrack.results.report` places
them in the page."""

from __future__ import annotations

import contextlib
import contextvars
import json
import math
import re
import statistics
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter  # noqa: E402

from statetrack.experiments.spec import train_range  # noqa: E402
from statetrack.paths import open_for_write  # noqa: E402
from statetrack.results.scoring import RunData  # noqa: E402
from statetrack.results.selection import SummaryEntry
from statetrack.training.evaluate import PREDICTED_CLASSES  # noqa: E402

FORMATS = ("png", "svg", "pdf")  # what a report's plots can be written as; PNG is always written (the HTML embeds it)
_also: contextvars.ContextVar[tuple[str, ...]] = contextvars.ContextVar("statetrack_plot_formats", default=())


def check_formats(text: str) -> tuple[str, ...]:
    """'png,svg,pdf' -> ('png', 'svg', 'pdf'); an unknown format names the ones there are."""
    formats = tuple(dict.fromkeys(part.strip().lower() for part in str(text).split(",") if part.strip()))
    unknown = [f for f in formats if f not in FORMATS]
    if unknown or not formats:
        from statetrack.errors import StatetrackError

        raise StatetrackError(f"--format {text!r}: expected a comma-separated list of {', '.join(FORMATS)}")
    return formats


@contextlib.contextmanager
def also_save(formats: tuple[str, ...]):
    """Within it, every figure `save_figure` writes as PNG is written in `formats` too, beside it
    (accuracy_vs_length.svg, .pdf): vector figures for a paper."""
    token = _also.set(tuple(f for f in formats if f != "png"))
    try:
        yield
    finally:
        _also.reset(token)


def save_figure(fig, path: str | Path, dpi: int = 120, metadata: dict | None = None) -> None:
    """Save `fig` to `path` in the format its suffix names (and in the formats of an enclosing
    `also_save`), through `paths.open_for_write` (no link or FIFO at the name is written through);
    `metadata`: text for the file itself (PNG text chunks)."""
    with open_for_write(path, binary=True) as f:
        fig.savefig(f, format=Path(path).suffix[1:] or "png", dpi=dpi, metadata=metadata)
    for extra in _also.get():
        with open_for_write(Path(path).with_suffix(f".{extra}"), binary=True) as f:
            fig.savefig(f, format=extra, dpi=dpi)


def model_label(model: str, dataset_size: int | None = None) -> str:
    """The model's name in tables and legends; runs on a fixed training set add "N=<size>"."""
    return model if dataset_size is None else f"{model} N={dataset_size}"


def entry_label(entry: Mapping[str, Any]) -> str:
    return model_label(entry["model"], entry.get("dataset_size"))


MARKERS = ("o", "s", "^", "D", "v", "P", "X", "<", ">", "*")
LINE_STYLES = ("-", "--", "-.", ":")


def curve_style(i: int) -> dict:
    """The i-th model's line: colour, line style and a hollow marker (sizes 9, 7.5, 6, 4.5 in turn)."""
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    return {
        "color": colors[i % len(colors)],
        "ls": LINE_STYLES[i % len(LINE_STYLES)],
        "marker": MARKERS[i % len(MARKERS)],
        "markersize": 9 - 1.5 * (i % 4),
        "markerfacecolor": "none",
        "markeredgewidth": 1.4,
        "lw": 1.4,
    }


def train_ranges(runs: list[dict]) -> dict:
    """{run task: (shortest, longest) training length} from the runs' configurations (`spec.train_range`:
    every curriculum stage counted, defaults filled in)."""
    return {r["task"]: train_range((r.get("config") or {}).get("train") or {}) for r in runs}


def _mark_training(ax, lengths: tuple[int, int] | None, shown: list[int]) -> None:
    """Mark the training lengths on an axis that spans the evaluated lengths `shown`: the part of the
    training range inside it shaded, and a dashed line at the longest training length when that lies
    inside it or at its left edge, labelled for the legend."""
    if not lengths or not shown:
        return
    lo, hi = lengths
    left, right = min(shown), max(shown)
    label = f"training length {hi}" if lo == hi else f"training lengths {lo}..{hi}"
    if lo < hi and hi > left:
        ax.axvspan(max(lo, left), min(hi, right), color="0.93", zorder=0)
    if hi <= right:
        ax.axvline(max(hi, left), color="0.45", ls="--", lw=1, zorder=1, label=label)


def _shared_legend(fig, axes) -> None:
    """One legend for the figure, below the plots: every label once, in the order first drawn."""
    seen: dict[str, Any] = {}  # label -> the first artist drawn with it
    for ax in axes:
        for handle, label in zip(*ax.get_legend_handles_labels()):
            seen.setdefault(label, handle)
    columns = max(1, min(3, len(seen), int(fig.get_size_inches()[0] // 2.7)))  # about 2.7 inches per column of labels
    fig.legend(list(seen.values()), list(seen), loc="outside lower center", ncol=columns, fontsize=8, frameon=False)


FIT = 0.9  # the level a seed's legend count is taken at: "k/N seeds >= 0.9 at every length"


def dodge(xs: list, index: int, count: int) -> list[float]:
    """`xs` moved a little along a log axis for the index-th of `count` models, so that lines and
    markers of different models at the same value stay visible side by side (at most +-15% in all)."""
    step = min(0.07, 0.3 / max(count, 1))
    factor = 1 + step * (index - (count - 1) / 2)
    return [x * factor for x in xs]


def seeds_reaching(entry: SummaryEntry, level: float = FIT) -> int:
    """How many of the entry's seeds score at least `level` at every length they were evaluated at."""
    return sum(1 for r in entry["per_seed"].values() if r["scaled"] and min(r["scaled"].values()) >= level)


def plot_accuracy_vs_length(summary: list[SummaryEntry], path: Path, training: dict | None = None) -> Path:
    """Per task, over the evaluated lengths: each model's headline (the aggregate the tables report,
    bold), every seed as a thin line with markers in the model's colour, and the range over the seeds
    (lowest to highest) as a band. Each model's lines sit a little apart along the length axis
    (`dodge`), so a seed that lies on another model's line stays visible, and the legend says how many
    of a model's seeds score at least 0.9 at every length ("2/3 seeds >= 0.9"). The chance level and
    the training lengths (`training`: {run task: (shortest, longest)}) are marked."""

    tasks = sorted({e["task"] for e in summary})
    models = list(dict.fromkeys(entry_label(e) for e in summary))
    fig, axes = plt.subplots(
        1, len(tasks), figsize=(6 * len(tasks), 4.6 + 0.22 * (len(models) + 4) / 3), squeeze=False, layout="constrained"
    )
    several = any(len(e["per_seed"]) > 1 for e in summary)
    for ax, task in zip(axes[0], tasks):
        entries = [e for e in summary if e["task"] == task]
        for k, e in enumerate(entries):
            xs = e["lengths"]
            shifted = dodge(xs, k, len(entries))
            style = curve_style(models.index(entry_label(e)))
            seeds = len(e["per_seed"])
            label = entry_label(e) + (f" ({seeds_reaching(e)}/{seeds} seeds \u2265 {FIT:g})" if seeds > 1 else "")
            ax.plot(shifted, [e["headline"][n] for n in xs], label=label, zorder=3, **{**style, "lw": 2.2})
            if seeds > 1:
                per_seed = [[r["scaled"].get(n, float("nan")) for n in xs] for r in e["per_seed"].values()]
                for values in per_seed:
                    ax.plot(
                        shifted,
                        values,
                        color=style["color"],
                        ls="-",
                        lw=0.8,
                        alpha=0.75,
                        zorder=4,
                        marker=style["marker"],
                        markersize=4.5,
                        markeredgewidth=0,
                    )
                lo = [min(v[i] for v in per_seed) for i in range(len(xs))]
                hi = [max(v[i] for v in per_seed) for i in range(len(xs))]
                ax.fill_between(shifted, lo, hi, color=style["color"], alpha=0.10, lw=0)
        lengths = sorted({n for e in entries for n in e["lengths"]})
        ax.set_xscale("log")
        if len(lengths) > 1:
            pad = (lengths[-1] / lengths[0]) ** 0.06
            ax.set_xlim(lengths[0] / pad, lengths[-1] * pad)
        _mark_training(ax, (training or {}).get(entries[0].get("run_task", task)), lengths)
        headline = "mean over seeds" if entries[0]["selection"]["seeds"] == "mean" else "best seed"
        _score_axes(ax, lengths, "evaluation length", f"scaled accuracy (bold: {headline})", task)
    if several:  # how to read the thin lines and the bands, once
        axes[0][-1].plot(
            [], [], color="0.4", lw=0.8, marker="o", markersize=4.5, label="one seed (thin, filled markers)"
        )
        axes[0][-1].fill_between([], [], [], color="0.4", alpha=0.15, lw=0, label="range over seeds (lowest..highest)")
    fig.suptitle("Scaled accuracy against evaluation length" + (", every seed shown" if several else ""))
    _shared_legend(fig, axes[0])
    save_figure(fig, path, dpi=120)
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


def plot_accuracy_vs_dataset_size(efficiency: list[dict], path: Path) -> Path:
    """Per task: each model's scaled accuracy at the longest test length against the training-set
    size N (log scale), mean ± sample std over seeds (Ebrahimi & Memisevic 2025, Fig. 2)."""
    tasks = sorted({e["task"] for e in efficiency})
    models = list(dict.fromkeys(e["model"] for e in efficiency))
    fig, axes = plt.subplots(
        1, len(tasks), figsize=(6 * len(tasks), 4.2 + 0.22 * (len(models) + 1) / 3), squeeze=False, layout="constrained"
    )
    for ax, task in zip(axes[0], tasks):
        entries = [e for e in efficiency if e["task"] == task]
        for e in entries:
            xs = [n for n, v in e["by_size"].items() if v["mean"] is not None]
            mean = [e["by_size"][n]["mean"] for n in xs]
            std = [e["by_size"][n]["std"] for n in xs]
            style = curve_style(models.index(e["model"]))
            ax.plot(xs, mean, label=e["model"], zorder=3, **style)
            ax.fill_between(
                xs,
                [m - d for m, d in zip(mean, std)],
                [m + d for m, d in zip(mean, std)],
                color=style["color"],
                alpha=0.12,
            )
        ax.set_xscale("log")
        _score_axes(
            ax,
            sorted({n for e in entries for n in e["by_size"]}),
            "training-set size N",
            f"scaled accuracy at length {entries[0]['length']}",
            task,
        )
    fig.suptitle("Scaled accuracy against training-set size N: mean over seeds ± sample std (band)")
    _shared_legend(fig, axes[0])
    save_figure(fig, path, dpi=120)
    plt.close(fig)
    return path


def run_label(run: dict) -> str:
    """A stored run's model label (N from its configuration)."""
    return model_label(
        run["model"], ((run.get("config") or {}).get("train") or {}).get("dataset_size", run.get("dataset_size"))
    )


def log_axis(axis, low: float, high: float) -> None:
    """A log-scale axis with plain tick labels (0.01, 0.1, 1 rather than 10^-2...): 1-2-5 ticks
    within three decades, one per decade beyond, no labelled minor ticks."""
    decades = math.log10(high / low) if low > 0 and high > low else 0.0
    axis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0) if decades <= 3 else (1.0,)))
    axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    axis.set_minor_formatter(NullFormatter())


def stage_starts(data: RunData, runs: list[dict]) -> list[tuple[int, int]]:
    """(step, stage) where each curriculum stage after the first begins, from the first run that
    trained with a curriculum (its curve points carry their stage); [] without one."""
    for run in runs:
        curve = data.curves(run["id"])
        if any("stage" in c for c in curve):
            starts, last = [], None
            previous_step = 0
            for point in curve:
                if last is not None and point["stage"] != last:
                    starts.append((previous_step, point["stage"]))
                last, previous_step = point["stage"], point["step"]
            return starts
    return []


def chance_loss(runs: list[dict]) -> float | None:
    """ln C, the cross-entropy of a uniform guess over the C classes of the runs' task, when every run
    has the same C; None otherwise (or when the task cannot be built here)."""
    from statetrack.tasks import make_task

    tasks = {
        json.dumps((run.get("config") or {}).get("task") or {}, sort_keys=True) for run in runs
    }  # each task built once
    classes = set()
    for task in tasks:
        try:
            classes.add(make_task(**json.loads(task)).num_classes)
        except Exception:
            return None
    return math.log(classes.pop()) if len(classes) == 1 else None


def plot_curves(data: RunData, runs: list[dict], path: Path) -> Path:
    """Training loss against step (log scale, plain tick labels), one panel per model (small
    multiples, shared axes): each of its runs a line coloured by seed, so that a seed stuck at the
    uniform guess shows in its model's panel instead of hiding under another model's line; the loss
    of a uniform guess (ln C) dotted; dotted lines where curriculum stages begin."""
    models = list(dict.fromkeys(run_label(r) for r in runs))
    columns = min(4, len(models))
    rows = math.ceil(len(models) / columns)
    fig, axes = plt.subplots(
        rows,
        columns,
        figsize=(3.6 * columns + 0.6, 2.8 * rows + 1.0),
        squeeze=False,
        sharex=True,
        sharey=True,
        layout="constrained",
    )
    flat = [ax for row in axes for ax in row]
    seeds = sorted({r["seed"] for r in runs})
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    low, high = math.inf, 0.0
    chance = chance_loss(runs)
    starts = stage_starts(data, runs)
    for ax, model in zip(flat, models):
        mine = [r for r in runs if run_label(r) == model]
        for run in mine:
            curve = [c for c in data.curves(run["id"]) if c["loss"] > 0]
            if curve:
                losses = [c["loss"] for c in curve]
                low, high = min(low, *losses), max(high, *losses)
                ax.plot(
                    [c["step"] for c in curve],
                    losses,
                    color=colors[seeds.index(run["seed"]) % len(colors)],
                    lw=1.1,
                    alpha=0.85,
                    label=f"seed {run['seed']}",
                )
        if chance:
            ax.axhline(chance, color="0.35", ls=":", lw=1, label=f"uniform guess (ln C = {chance:.3g})")
        for step, stage in starts:
            ax.axvline(step, color="0.5", ls=":", lw=1)
            ax.text(
                step, 1.0, f" stage {stage + 1}", transform=ax.get_xaxis_transform(), fontsize=7, va="top", color="0.35"
            )
        ax.set_title(f"{model} ({len(mine)} run{'s' if len(mine) > 1 else ''})", fontsize=9)
        ax.grid(axis="y", which="major", color="0.92", lw=0.6)
    for ax in flat[len(models) :]:
        ax.set_visible(False)
    if chance and high > 0:
        low, high = min(low, chance), max(high, chance)
    flat[0].set_yscale("log")
    if high > 0:
        log_axis(flat[0].yaxis, low, high)
    for ax in axes[-1]:
        ax.set_xlabel("step")
    for row in axes:
        row[0].set_ylabel("training loss (log scale)")
    fig.suptitle("Training loss against step, one panel per model, a colour per seed")
    _shared_legend(fig, flat[: len(models)])
    save_figure(fig, path, dpi=120)
    plt.close(fig)
    return path


# ---- a model's own metrics (e.g. fixed-point iterations) ----------------------------------------
# A metric `X_<stat>` belongs to family X (one plot per family); its statistic sets the line style.
STAT_STYLES = {"median": "-", "mean": "-", "min": ":", "max": "--"}
METRIC_NAMES = {
    "iterations": "fixed-point iterations",
    "tv_distance": "total-variation distance to the exact belief",
}  # a family's name on the axes, when not its key


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
    return {
        family: {
            stat: {x: agg.get(stat, statistics.mean)(v) for x, v in sorted(by_x.items())}
            for stat, by_x in stats.items()
        }
        for family, stats in values.items()
    }


def _run_size(run: dict):
    return ((run.get("config") or {}).get("train") or {}).get("dataset_size")


def selected_runs(summary: list[SummaryEntry], runs: list[dict]) -> list[tuple[SummaryEntry, list[dict]]]:
    """Each summary entry with its done runs at the selected lr (one per seed)."""
    return [
        (
            e,
            [
                r
                for r in runs
                if r["status"] == "done"
                and (r["task"], r["model"], _run_size(r), r["lr"])
                == (e.get("run_task", e["task"]), e["model"], e["dataset_size"], e["lr"])
                and r["seed"] in e["seeds"]
            ],
        )
        for e in summary
    ]


def plot_metric(
    series: list[tuple[SummaryEntry, dict]], family: str, xlabel: str, path: Path, log_x: bool = False
) -> Path:
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
            for stat, values in sorted(
                s[family].items(), key=lambda kv: (order.index(kv[0]) if kv[0] in order else len(order), kv[0])
            ):
                xs = sorted(values)
                xs_all.update(xs)
                ax.plot(
                    xs,
                    [values[x] for x in xs],
                    ls=STAT_STYLES.get(stat, "-"),
                    color=colors[i % len(colors)],
                    marker="o" if log_x else None,
                    lw=1.2,
                    label=f"{entry_label(e)} lr={e['lr']:g} {stat}".rstrip(),
                )
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
    save_figure(fig, path, dpi=120)
    plt.close(fig)
    return path


def _shown_metrics(metrics: dict) -> dict:
    """An evaluation's metrics as tables and plots show them: without the count of classes predicted,
    which the fit table reads (a collapsed run) instead."""
    return {name: value for name, value in metrics.items() if name != PREDICTED_CLASSES}


def metrics_by_length(data: RunData, summary: list[SummaryEntry], runs: list[dict]) -> list[tuple[SummaryEntry, dict]]:
    """Per summary entry, its evaluations' metrics over the seeds at the selected lr:
    (entry, {family: {stat: {length: value}}}) (`metric_series`)."""

    def evals(run: dict, entry: SummaryEntry) -> list[dict]:
        return data.evals(run["id"], entry.get("variant", ""))

    return [
        (
            e,
            metric_series([[(row["length"], _shown_metrics(row["metrics"])) for row in evals(r, e)] for r in rs]),
        )
        for e, rs in selected_runs(summary, runs)
    ]


def plot_metrics(data: RunData, summary: list[SummaryEntry], runs: list[dict], out: Path) -> list[Path]:
    """The models' own metrics at the selected lr, over the seeds: per family (e.g. `iterations`
    from iterations_median and iterations_max), `<family>_vs_length.png` when evaluations carry it
    and `<family>_vs_step.png` when training-curve points do. None when no run reports metrics."""
    selected = selected_runs(summary, runs)
    by_length = metrics_by_length(data, summary, runs)
    by_step = [
        (e, metric_series([[(c["step"], c["metrics"]) for c in data.curves(r["id"])] for r in rs]))
        for e, rs in selected
    ]
    plots = []
    for series, xlabel, suffix, log_x in (
        (by_length, "evaluation length", "length", True),
        (by_step, "training step", "step", False),
    ):
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

    name = (run["config"].get("task") or {}).get("name")
    cls = TASKS.get(name) if name is not None else None
    return cls.position_label if cls is not None else "input position"


def position_series(
    data: RunData, summary: list[SummaryEntry], runs: list[dict]
) -> list[tuple[SummaryEntry, int, list, str]]:
    """(entry, length, per-position accuracy, mean over the seeds at the selected lr, what a position
    is) at the entry's longest length that has a per-position accuracy with more than one supervised
    position (a task supervised once per example, at its end, has nothing to show along the input)."""
    out = []
    for e, rs in selected_runs(summary, runs):
        by_length: dict = {}
        for r in rs:
            for row in data.evals(r["id"], e.get("variant", "")):
                positions = row.get("position_accuracy")
                if positions and sum(v is not None for v in positions) > 1:
                    by_length.setdefault(row["length"], []).append(positions)
        if by_length:
            length = max(by_length)
            values = _mean_lists([p for p in by_length[length] if len(p) == len(by_length[length][0])])
            out.append((e, length, values, _position_label(rs[0])))
    return out


def plot_position_accuracy(
    series: list[tuple[SummaryEntry, int, list, str]], path: Path, train_lengths: dict | None = None
) -> Path:
    """Per task: accuracy at each position at the longest evaluation length, one line per model
    (positions never supervised are skipped; a position is an input token, or the k-th supervised
    answer such as a REPL trace's k-th reveal); a dotted line marks the longest training length
    (`train_lengths`: {run task: length}) where positions are tokens."""
    tasks = sorted({x[0]["task"] for x in series})
    models = list(dict.fromkeys(entry_label(x[0]) for x in series))
    columns = -(-(len(models) + 1) // 12)  # legend columns beside each panel, 12 entries a column at most
    fig, axes = plt.subplots(len(tasks), 1, figsize=(9 + 2.4 * columns, 3.2 * len(tasks)), squeeze=False)
    for ax, task in zip(axes[:, 0], tasks):
        of_task = [x for x in series if x[0]["task"] == task]
        unit = of_task[-1][3] if of_task else "input position"  # what a position is, on the x axis
        lengths, train_length = set(), None
        for e, length, values, _ in of_task:
            train_length = (train_lengths or {}).get(e.get("run_task", task))
            xs = [i for i, v in enumerate(values) if v is not None]
            style = curve_style(models.index(entry_label(e)))
            ax.plot(xs, [values[i] for i in xs], color=style["color"], ls=style["ls"], lw=1, label=entry_label(e))
            lengths.add(length)
        if train_length and unit == "input position":
            ax.axvline(train_length, color="grey", ls=":", lw=1, label=f"longest training length {train_length}")
        ax.set_ylim(-0.05, 1.05)
        ax.set_xlabel(unit)
        ax.set_ylabel("accuracy")
        ax.set_title(f"{task}, length {', '.join(map(str, sorted(lengths)))}")
        ax.legend(fontsize=7, ncol=columns, loc="upper left", bbox_to_anchor=(1.01, 1))
    fig.suptitle("Accuracy at each position at the longest evaluation length, mean over seeds at the selected lr")
    fig.tight_layout()
    save_figure(fig, path, dpi=120)
    plt.close(fig)
    return path


def plot_traces(data: RunData, summary: list[SummaryEntry], runs: list[dict], answers: dict, out: Path) -> list[Path]:
    """Model output against the input (Anonymous 2025, Fig. 2-3), one PNG per task (and evaluation
    variant) whose runs kept traces (`eval.traces`): per model, the first traced example at the
    shortest traced length of its best seed at the selected lr. Grey: the input tokens (scaled to
    [0, 1]); dashed: the target; solid: the model's probability of the last answer class when there
    are two (e.g. the signal being on, for `counting`), else of the target class."""
    by_task: dict = {}
    for e, rs in selected_runs(summary, runs):
        seeded = sorted(rs, key=lambda r: r["seed"] != e["best_seed"])
        for r in seeded[:1]:
            traced = [t for t in data.traces(r["id"]) if t["variant"] == e.get("variant", "")]
            if traced:
                by_task.setdefault(e["task"], []).append((e, min(traced, key=lambda t: t["length"])))
    paths = []
    for task, entries in sorted(by_task.items()):
        fig, axes = plt.subplots(len(entries), 1, figsize=(10, 1.9 * len(entries) + 0.6), squeeze=False, sharex=True)
        for ax, (e, traced) in zip(axes[:, 0], entries):
            example = traced["examples"][0]
            inputs, targets, mask, probs = (
                example["inputs"],
                example["targets"],
                example["mask"],
                example["probabilities"],
            )
            lo, hi = min(inputs), max(inputs)
            xs = range(len(inputs))
            ax.fill_between(xs, [(v - lo) / ((hi - lo) or 1) for v in inputs], step="mid", color="0.85", label="input")
            binary = len(probs[0]) == 2
            names = answers.get(e.get("run_task", task))
            if binary:
                ax.plot(
                    xs,
                    [t if m else float("nan") for t, m in zip(targets, mask)],
                    ls="--",
                    color="k",
                    lw=1,
                    label="target",
                )
                ax.plot(xs, [p[1] for p in probs], color="C0", lw=1.2, label=f"p({names[1] if names else 'class 1'})")
            else:
                ax.plot(
                    xs,
                    [p[t] if m else float("nan") for p, t, m in zip(probs, targets, mask)],
                    color="C0",
                    lw=1.2,
                    label="p(target)",
                )
            ax.set_ylim(-0.05, 1.05)
            ax.set_ylabel(entry_label(e), fontsize=8)
            ax.legend(fontsize=6, loc="upper right")
        axes[-1, 0].set_xlabel("time step")
        fig.suptitle(f"{task}: model output against the input (length {entries[0][1]['length']})")
        fig.tight_layout()
        path = out / f"traces_{re.sub(r'[^A-Za-z0-9_.-]+', '_', task).strip('_')}.png"
        save_figure(fig, path, dpi=110)
        plt.close(fig)
        paths.append(path)
    return paths


def answer_labels(runs: list[dict]) -> dict:
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
