"""Reports: the paper-style table (scaled accuracy per model x length), plots, Markdown and HTML.

Selection (papers/001 protocol, "best over learning rates, mean and max over seeds"): for each
model and task, the learning rate with the highest mean scaled accuracy (over seeds and lengths)
is kept; the "best seed" row is that lr's run with the highest mean scaled accuracy over lengths.
"""

from __future__ import annotations

import base64
import html
import statistics
from collections import defaultdict
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from statetrack.store import Store  # noqa: E402


def summarize(rows: list[dict]) -> list[dict]:
    """Rows of `Store.results` -> one entry per (task, model) with the selected figures.

    Each entry: task, model, lr, lengths, best (per-length scaled accuracy of the best seed),
    best_seed, mean and std (per length, over seeds at the selected lr), seeds.
    """
    runs: dict = defaultdict(dict)  # (task, model, lr, seed) -> {length: scaled}
    for r in rows:
        runs[(r["task"], r["model"], r["lr"], r["seed"])][r["length"]] = r["scaled_accuracy"]
    groups: dict = defaultdict(lambda: defaultdict(dict))  # (task, model) -> lr -> seed -> {length: s}
    for (task, model, lr, seed), per_length in runs.items():
        groups[(task, model)][lr][seed] = per_length
    summary = []
    for (task, model), by_lr in groups.items():
        def lr_score(lr):
            return statistics.mean(statistics.mean(v.values()) for v in by_lr[lr].values())

        lr = max(by_lr, key=lr_score)
        seeds = by_lr[lr]
        best_seed = max(seeds, key=lambda s: statistics.mean(seeds[s].values()))
        lengths = sorted(set().union(*[set(v) for v in seeds.values()]))
        per_length = {n: [seeds[s][n] for s in seeds if n in seeds[s]] for n in lengths}
        summary.append({
            "task": task, "model": model, "lr": lr, "lengths": lengths, "seeds": sorted(seeds), "best_seed": best_seed,
            "best": {n: seeds[best_seed].get(n) for n in lengths},
            "mean": {n: statistics.mean(v) for n, v in per_length.items()},
            "std": {n: statistics.pstdev(v) for n, v in per_length.items()},
        })
    return sorted(summary, key=lambda e: (e["task"], e["model"]))


def _fmt(value) -> str:
    return "-" if value is None else f"{value:.3f}"


def table_rows(summary: list[dict], which: str = "best") -> tuple[list[str], list[list[str]]]:
    lengths = sorted(set().union(*[set(e["lengths"]) for e in summary])) if summary else []
    header = ["task", "model", "lr"] + [str(n) for n in lengths]
    body = []
    for e in summary:
        if which == "best":
            cells = [_fmt(e["best"].get(n)) for n in lengths]
        else:
            cells = ["-" if n not in e["mean"] else f"{e['mean'][n]:.3f} ± {e['std'][n]:.3f}" for n in lengths]
        body.append([e["task"], e["model"], f"{e['lr']:g}"] + cells)
    return header, body


def markdown_table(header: list[str], body: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(" --- " for _ in header) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in body]
    return "\n".join(lines)


def text_table(header: list[str], body: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in [header] + body) for i in range(len(header))]
    line = lambda r: "  ".join(c.ljust(w) if i < 2 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths)))  # noqa: E731
    return "\n".join([line(header), "  ".join("-" * w for w in widths)] + [line(r) for r in body])


def plot_accuracy_vs_length(summary: list[dict], path: Path) -> Path:
    tasks = sorted({e["task"] for e in summary})
    fig, axes = plt.subplots(1, len(tasks), figsize=(6 * len(tasks), 4), squeeze=False)
    for ax, task in zip(axes[0], tasks):
        for e in (e for e in summary if e["task"] == task):
            xs = e["lengths"]
            ax.plot(xs, [e["best"][n] for n in xs], marker="o", label=f"{e['model']} (best seed)")
            lo = [e["mean"][n] - e["std"][n] for n in xs]
            hi = [e["mean"][n] + e["std"][n] for n in xs]
            ax.fill_between(xs, lo, hi, alpha=0.15)
        ax.set_xscale("log")
        ax.set_ylim(-0.1, 1.05)
        ax.axhline(0.0, color="grey", lw=0.5)
        ax.set_xlabel("evaluation length")
        ax.set_ylabel("scaled accuracy")
        ax.set_title(task)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def plot_curves(store: Store, runs: list[dict], path: Path) -> Path:
    fig, ax = plt.subplots(figsize=(6, 4))
    for run in runs:
        curve = store.curves(run["id"])
        if curve:
            ax.plot([c["step"] for c in curve], [c["loss"] for c in curve], lw=1, label=f"{run['model']} s{run['seed']} lr{run['lr']:g}")
    ax.set_yscale("log")
    ax.set_xlabel("step")
    ax.set_ylabel("training loss")
    ax.legend(fontsize=6)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def write_report(experiment: str, store: Store, results_dir: str | Path = "results", description: str = "") -> Path:
    """Write results/<experiment>/report.md, report.html and the PNG plots; returns the folder."""
    out = Path(results_dir) / experiment
    out.mkdir(parents=True, exist_ok=True)
    summary = summarize(store.results(experiment))
    runs = store.runs(experiment)
    plots = [plot_accuracy_vs_length(summary, out / "accuracy_vs_length.png")] if summary else []
    if runs:
        plots.append(plot_curves(store, [r for r in runs if r["status"] == "done"], out / "training_curves.png"))
    best = table_rows(summary, "best")
    mean = table_rows(summary, "mean")
    unfinished = [r for r in runs if r["status"] != "done"]
    run_rows = [
        [r["model"], r["task"], f"{r['lr']:g}", str(r["seed"]), r["status"], str(r["steps"] or "-"),
         f"{r['train_seconds']:.0f}" if r["train_seconds"] else "-", str(r["num_parameters"] or "-"), r["git_rev"] or "-"]
        for r in runs
    ]
    run_header = ["model", "task", "lr", "seed", "status", "steps", "train s", "params", "git"]

    md = [f"# {experiment}", "", description.strip(), "",
          "## Scaled accuracy, best seed (lr selected on mean scaled accuracy)", "", markdown_table(*best), "",
          "## Scaled accuracy, mean ± std over seeds", "", markdown_table(*mean), ""]
    md += [f"![{p.stem}]({p.name})" for p in plots] + [""]
    if unfinished:
        md += ["## Unfinished runs", ""] + [f"- {r['model']} / {r['task']} lr={r['lr']:g} seed={r['seed']}: {r['status']}"
                                            + (f" ({r['error'].splitlines()[0]})" if r["error"] else "") for r in unfinished] + [""]
    md += ["## Runs", "", markdown_table(run_header, run_rows), ""]
    (out / "report.md").write_text("\n".join(md))

    def html_table(header, body):
        head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
        rows = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in r) + "</tr>" for r in body)
        return f"<table><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>"

    images = "".join(
        f'<img alt="{p.stem}" src="data:image/png;base64,{base64.b64encode(p.read_bytes()).decode()}">' for p in plots
    )
    unfinished_html = "".join(f"<li>{html.escape(r['model'])} / {html.escape(r['task'])} seed={r['seed']}: {r['status']}</li>" for r in unfinished)
    page = f"""<!doctype html><html><head><meta charset="utf-8"><title>{html.escape(experiment)}</title>
<style>body{{font-family:sans-serif;max-width:1100px;margin:2em auto}}table{{border-collapse:collapse;margin:1em 0}}
td,th{{border:1px solid #ccc;padding:3px 8px;text-align:right}}img{{max-width:100%}}</style></head><body>
<h1>{html.escape(experiment)}</h1><p>{html.escape(description)}</p>
<h2>Scaled accuracy, best seed</h2>{html_table(*best)}
<h2>Scaled accuracy, mean ± std over seeds</h2>{html_table(*mean)}
{images}
{"<h2>Unfinished runs</h2><ul>" + unfinished_html + "</ul>" if unfinished else ""}
<h2>Runs</h2>{html_table(run_header, run_rows)}
</body></html>"""
    (out / "report.html").write_text(page)
    return out
