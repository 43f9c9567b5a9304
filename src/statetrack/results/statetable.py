"""The state-tracking table (`statetrack table`): every registered model on a ladder of groups and
automata, theory's prediction (`statetrack.theory`) beside each measured cell.

The protocol, the same for the committed zoo rows and for a user's row:

1. a pilot picks each cell's learning rate on its training length: seed 0 at each of `PILOT_RATES`
   (the works' range, with warm-up and a cosine decay) on every task of the table; the rate whose
   run ends with the lowest training loss (`selection.final_loss`, the training length's own loss)
   wins, and every rate within `LOSS_TIE` (relative) of it ties with it (the table then trains each
   tied rate, and a cell's reading holds only if it holds at each);
2. the table trains three seeds at each cell's chosen rate(s) under the table's spec, its whole
   budget (no early stop: a stop never decides a reading); seed 0 at a chosen rate is the pilot's
   run of that cell and rate, recorded from it (`reuse_pilot_runs`), not trained twice;
3. every cell that step 2 leaves undecided (most seeds do not fit, or fit but do not hold at the
   headline ratio) trains again with `GROWTH` times the steps and no early stop, whatever theory
   predicts; the cell then reads the larger budget, its first reading kept beside it.

A cell reads, per model and task: the seeds that fit (scaled accuracy >= FIT_THRESHOLD at the
longest training length), and of those, how many hold >= `HOLD` at 4x (the works' test ratio: the
headline) and at 16x (the strict reading) that length, each read only where it was evaluated. The
cell *extrapolates* when most seeds fit and hold at 4x. Against theory: "can" but not extrapolating
is an optimisation finding (not learned at this budget); "cannot" but holding at 4x or 16x is a
defect or a discovery, and the notes must say which.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

from statetrack import theory, yamlio
from statetrack.errors import StatetrackError
from statetrack.paths import replace_atomically, under, write_text
from statetrack.paths import snapshot_file as committed_snapshot
from statetrack.results.claims import fit_figure
from statetrack.results.scoring import Scored, collapsed_seeds, score
from statetrack.results.selection import final_loss
from statetrack.results.tables import markdown_table, text_table
from statetrack.schema import FIT_THRESHOLD
from statetrack.store import Plan

TABLE = "state-table"
PILOT_RATES = (5.0e-4, 1.0e-3, 2.0e-3)  # the works' range (Deletang et al. 2023 to Terzić et al. 2025)
# a pilot rate whose final training loss is within this fraction of the lowest ties with it: a run's final loss
# moves about 1.4% between its last two windows of 150 steps (the median over the table's calibration runs)
LOSS_TIE = 0.02
HOLD = 0.9  # the scaled accuracy a fitted seed keeps to extrapolate
FACTORS = (4, 16)  # extrapolation read at these multiples of the longest training length
HEADLINE, STRICT = FACTORS  # 4x: the works' test ratio (the reading and the picture's colour); 16x beside it
GROWTH = 4  # an undecided cell trains again with this many times the steps
PAGE = Path("docs") / "state-table.md"
PICTURE = Path("docs") / "state-table.png"

# the agreement of a cell with theory
AGREES, NOT_LEARNED, SHORTCUT, CONTRADICTS, MEASURED, UNREAD, NOT_MEASURED = (
    "agrees",
    "can, not learned at this budget",
    "can, fits but does not extrapolate",
    "cannot, but extrapolates",
    "no prediction",
    "extrapolation not measured",
    "not measured yet",  # a model the table has, its committed snapshot not (no seeds)
)


def table_folder():
    return resources.files("statetrack.experiments") / "tables"


def spec_file() -> Path:
    return Path(str(table_folder() / f"{TABLE}.yaml"))


def snapshot_file(name: str = TABLE) -> Path:
    return committed_snapshot(name, "quick")


def measured_snapshot_file(results_dir: str | Path, name: str = TABLE) -> Path:
    """Where `table --zoo` and `--full-budget` keep the snapshot `name` while they measure it:
    RESULTS_DIR/table/, under the committed snapshot's file name (a link there out of the results
    folder refused); `install_snapshots` puts it in the package once every run of it is done."""
    return under(results_dir, "table", snapshot_file(name).name)


def not_done(snapshot: dict) -> int:
    """The runs of a snapshot's plan that are not done (not trained, interrupted or failed)."""
    done = {r["id"] for r in snapshot["runs"] if r["status"] == "done"}
    return sum(1 for p in snapshot["plan"] if p["id"] not in done)


def install_snapshots(results_dir: str | Path, names: list[str], drop: tuple[str, ...] = ()) -> list[Path]:
    """The measured snapshots `names` (`measured_snapshot_file`) installed as the committed ones
    (`snapshot_file`), each replaced in one step, and only when every one is complete: a one-line
    error naming the first that is not, with nothing installed. The committed snapshots `drop`
    (another measurement's, which the installed ones replace) are removed then. Returns the
    installed files."""
    measured = {name: measured_snapshot_file(results_dir, name) for name in names}
    for name, path in measured.items():
        left = not_done(load_snapshot(path))
        if left:
            raise StatetrackError(
                f"{path}: {left} runs of {name} are not done (not trained, interrupted or failed), so the committed "
                "snapshots are left as they were; run the same command again to finish them"
            )
    for name, path in measured.items():
        with replace_atomically(snapshot_file(name), binary=True) as f:
            f.write(path.read_bytes())
    for name in drop:
        snapshot_file(name).unlink(missing_ok=True)
    return [snapshot_file(name) for name in names]


def page_root() -> Path:
    """The root of the statetrack checkout whose package runs, when the working directory lies in
    it: the page (PAGE, PICTURE) is generated there from that package's snapshots. A one-line error
    otherwise (an installed package, or another folder)."""
    package = Path(__file__).resolve().parents[1]
    root = package.parents[1]
    project = root / "pyproject.toml"
    if package.parent.name != "src" or not project.is_file() or 'name = "statetrack"' not in project.read_text():
        raise StatetrackError(
            f"table: the page ({PAGE}) belongs to a statetrack checkout, and the package running is installed at "
            f"{package}, not in one; run the command from a clone of the repository (pip install -e .)"
        )
    if not Path.cwd().resolve().is_relative_to(root):
        raise StatetrackError(
            f"table: the page ({PAGE}) is written in the statetrack checkout at {root}; run the command from there, "
            f"not from {Path.cwd()}"
        )
    return root


def notes_file() -> Path:
    return Path(str(table_folder() / f"{TABLE}.notes.yaml"))


def read_notes() -> dict:
    """{"summary": text, "probes": [...], "cells": {"<model> | <task>": explanation}} of the notes file."""
    path = notes_file()
    return (yamlio.load(path.read_text()) or {}) if path.exists() else {}


# ---- reading a snapshot ----------------------------------------------------------------------------
def load_snapshot(path: Path) -> dict:
    if not path.exists():
        raise StatetrackError(f"no state-table snapshot at {path}: `statetrack table --zoo` measures it")
    try:
        return json.loads(path.read_text())
    except ValueError as error:
        raise StatetrackError(f"{path}: not a statetrack snapshot ({error})") from None


def scored_snapshot(snapshot: dict) -> Scored:
    plan = Plan(snapshot["experiment"], {**snapshot["spec"], "scale": snapshot["scale"]}, snapshot["plan"])
    return score(snapshot["experiment"], plan, snapshot["runs"], snapshot["results"])


def _models_and_tasks(spec: dict, plan: list[dict] | None = None) -> tuple[dict, dict]:
    """({model label: resolved model spec}, {task label: built task}) of a table spec, under the
    labels its plan's entries (`plan`, matched by run id) gave them where given."""
    from statetrack.experiments.spec import expand
    from statetrack.tasks import make_task

    label_of = {p["id"]: (p["model"], p["task"]) for p in plan or []}
    models: dict[str, dict] = {}
    tasks: dict = {}
    for run in expand(spec, check=False):
        model_label, task_label = label_of.get(run.id, (run.model_name, run.task_name))
        models.setdefault(model_label, run.model)
        if task_label not in tasks:
            params = {k: v for k, v in run.task.items() if k != "name"}
            tasks[task_label] = make_task(run.task["name"], **params)
    return models, tasks


def labelled(scored: Scored) -> tuple[dict, dict]:
    """`_models_and_tasks` of a scored table experiment, under its plan's labels."""
    return _models_and_tasks({**scored.spec, "scale": scored.scale or "quick"}, scored.plan.runs)


def task_title(task) -> str:
    """Z2, S3, A5 for a word problem; `automaton (6 states)` for the random machine."""
    if task.name == "word_problem":
        return task.group
    if task.name == "fsm":
        machine = f", machine {task.machine_seed}" if task.machine_seed else ""
        return f"automaton ({task.states} states{machine})"
    return task.name


def model_title(label: str) -> str:
    """The display name without the layer count the table shows in its own column."""
    return re.sub(r" \(num_layers=\d+\)$", "", label)


# ---- cells -------------------------------------------------------------------------------------------
@dataclass
class Cell:
    model: str  # the model's label in its experiment
    task: str  # the task's label
    layers: int
    prediction: theory.Prediction
    seeds: list[int]
    fitted: list[int]
    # factor -> the fitted seeds holding HOLD at factor x the training length; None: that length was not evaluated
    held: dict[int, list[int] | None]
    extrapolation: float  # mean over seeds of the scaled accuracy at 4x (unfitted seeds count 0), in [0, 1]
    lr: float
    ties: list[float] = field(default_factory=list)  # other rates the pilot tied, each read as well
    tie_differs: bool = False  # the reading differs between tied rates (the weakest is shown)
    collapsed: list[int] = field(default_factory=list)
    stopped: list[int] = field(default_factory=list)  # seeds that stopped before their budget
    task_index: int = 0  # the task's place in the spec's ladder
    stopped_reading: str | None = None  # read at the full budget: what the stopped runs read (`text`)
    steps: int = 0  # the budget the reading comes from
    first_reading: str | None = None  # read at the larger budget: what the first budget read (`text`)

    def holds(self, factor: int) -> bool:
        """Most seeds fit and hold factor x the training length (False where it was not evaluated)."""
        held = self.held.get(factor)
        return held is not None and len(held) * 2 > len(self.seeds)

    @property
    def extrapolates(self) -> bool:
        return self.holds(HEADLINE)

    @property
    def fits(self) -> bool:
        return len(self.fitted) * 2 > len(self.seeds)

    @property
    def decided(self) -> bool:
        """The cell needs no larger budget: most seeds fit and hold the headline ratio."""
        return self.fits and self.extrapolates

    @property
    def agreement(self) -> str:
        if not self.seeds:
            return NOT_MEASURED
        verdict = self.prediction.verdict
        if self.fits and self.held.get(HEADLINE) is None:
            return UNREAD
        if verdict == theory.CAN:
            return AGREES if self.extrapolates else SHORTCUT if self.fits else NOT_LEARNED
        if verdict == theory.CANNOT:
            return CONTRADICTS if any(self.holds(f) for f in FACTORS) else AGREES
        return MEASURED

    @property
    def text(self) -> str:
        """`fitted · held at 4x · held at 16x`, e.g. `3·3·2` (`–` where a length was not evaluated);
        `did not fit` where no seed fits."""
        if not self.seeds:
            return NOT_MEASURED
        if not self.fitted:
            return "did not fit"
        counts = _counts(self.fitted, self.held)
        return "·".join(str(n) if n >= 0 else "–" for n in counts)


def _reading(entry, length: int) -> tuple[list[int], dict[int, list[int] | None], float]:
    """(fitted seeds, {factor: fitted seeds holding factor x `length`, None where no seed was
    evaluated there}, the mean over seeds of the scaled accuracy at HEADLINE x `length`)."""
    per_seed = entry["per_seed"]
    fitted = [s for s in per_seed if (fit_figure(per_seed[s], "scaled", length) or 0.0) >= FIT_THRESHOLD - 1e-9]
    held: dict[int, list[int] | None] = {}
    for factor in FACTORS:
        test = factor * length
        if not any(per_seed[s]["scaled"].get(test) is not None for s in per_seed):
            held[factor] = None
            continue
        held[factor] = [s for s in fitted if (per_seed[s]["scaled"].get(test) or 0.0) >= HOLD - 1e-9]
    at = HEADLINE * length
    at_headline = [max(0.0, min(1.0, per_seed[s]["scaled"].get(at) or 0.0)) if s in fitted else 0.0 for s in per_seed]
    return fitted, held, sum(at_headline) / max(len(at_headline), 1)


def _counts(fitted: list[int], held: dict[int, list[int] | None]) -> tuple[int, ...]:
    """(fitted seeds, seeds holding each factor, -1 where that length was not evaluated)."""
    return (len(fitted), *(len(seeds) if (seeds := held.get(f)) is not None else -1 for f in FACTORS))


def cells(scored: Scored) -> list[Cell]:
    """The table's cells of a scored table experiment, in the plan's order of models and tasks."""
    models, tasks = labelled(scored)
    plan_order = {label: i for i, label in enumerate(models)}
    task_order = {label: i for i, label in enumerate(tasks)}
    stored = {r["id"]: r for r in scored.runs}
    out = []
    for entry in scored.summary:
        if entry["variant"] or entry["model"] not in models or entry["task"] not in tasks:
            continue
        length = entry.get("train_length")
        if length is None:
            continue
        model, task = models[entry["model"]], tasks[entry["task"]]
        fitted, held, extrapolation = _reading(entry, length)
        ties = sorted(entry.get("ties") or [])
        differs = False
        for rate in ties:  # a tied rate reads as well: the weakest reading is the cell's
            other = entry["rates"][rate]
            o_fitted, o_held, o_ex = _reading(other, length)
            if _counts(o_fitted, o_held) != _counts(fitted, held):
                differs = True
            # the weakest reading: fewer seeds holding the headline ratio, then the strict one, then fewer fitted
            mine, other_ = _counts(fitted, held), _counts(o_fitted, o_held)
            if (other_[1], other_[2], other_[0]) < (mine[1], mine[2], mine[0]):
                fitted, held, extrapolation = o_fitted, o_held, o_ex
        planned = {
            p["seed"]: p
            for p in scored.plan.runs
            if (p["model"], p["task"], p["lr"]) == (entry["model"], entry["task"], entry["lr"])
        }
        stopped = [
            s
            for s, p in planned.items()
            if stored.get(p["id"], {}).get("steps") and stored[p["id"]]["steps"] < p["steps"]
        ]
        out.append(
            Cell(
                entry["model"],
                entry["task"],
                int(model.get("num_layers", 1)),
                theory.predict(model, task, int(model.get("num_layers", 1))),
                sorted(entry["seeds"]),
                sorted(fitted),
                held,
                extrapolation,
                entry["lr"],
                ties,
                differs,
                collapsed_seeds(entry, length, FIT_THRESHOLD, "scaled") or [],
                sorted(stopped),
                task_order[entry["task"]],
                steps=int((scored.spec.get("train") or {}).get("steps") or 0),
            )
        )
    return sorted(out, key=lambda c: (c.layers, plan_order[c.model], c.task_index))


def grid(cells_: list[Cell]) -> tuple[list[str], list[str], dict]:
    """(row labels `model` / layers, task labels, {(row, task): cell}) in order."""
    rows: list[str] = []
    tasks: dict[str, int] = {}
    by: dict[tuple[str, str], Cell] = {}
    for c in cells_:
        if c.model not in rows:
            rows.append(c.model)
        tasks.setdefault(c.task, c.task_index)
        by[(c.model, c.task)] = c
    return rows, sorted(tasks, key=lambda t: tasks[t]), by


# ---- the pilot: one learning rate per cell, chosen on its training length ----------------------------
def run_losses(scored: Scored, curves=None) -> dict[str, float | None]:
    """{run id: its final training loss} of the done runs of `scored`: the snapshot's record
    (`final_loss`), or read from `curves` (a store's `curves`) where the runs come from a store."""
    out = {}
    for r in scored.runs:
        if r.get("status") != "done":
            continue
        out[r["id"]] = final_loss(curves(r["id"])) if curves is not None else r.get("final_loss")
    return out


def pilot_choice(scored: Scored, losses: dict[str, float | None]) -> dict[tuple[str, str], dict]:
    """{(model label, task label): {"losses": {lr: final training loss of the cell's seed-0 run},
    "chosen": [the rate with the lowest loss and every rate within LOSS_TIE of it]}} over the pilot's
    done runs (`losses`: `run_losses`; a run with no finite loss counts as the highest)."""
    out: dict[tuple[str, str], dict] = {}
    for p in scored.plan.runs:
        if p["id"] in losses:
            cell = out.setdefault((p["model"], p["task"]), {"losses": {}})
            cell["losses"][float(p["lr"])] = losses[p["id"]]
    for cell in out.values():
        finite = [v for v in cell["losses"].values() if v is not None]
        best = min(finite, default=None)
        cell["chosen"] = sorted(
            lr for lr, v in cell["losses"].items() if best is None or (v is not None and v <= best * (1 + LOSS_TIE))
        )
    return out


# ---- rendering -----------------------------------------------------------------------------------------
SYMBOL = {theory.CAN: "✓", theory.CANNOT: "✗", theory.UNKNOWN: "?"}


def cell_markdown(c: Cell) -> str:
    text = f"{c.text} {SYMBOL[c.prediction.verdict]}"
    if c.agreement in (CONTRADICTS, NOT_LEARNED, SHORTCUT):
        text = f"**{text}**"
    return text + (" (tie)" if c.tie_differs else "")


def table_markdown(cells_: list[Cell], titles: dict[str, str]) -> str:
    rows, tasks, by = grid(cells_)
    header = ["model", "layers", *(titles[t] for t in tasks)]
    layers = {c.model: c.layers for c in cells_}
    body = [
        [model_title(row), str(layers[row]), *(cell_markdown(by[(row, t)]) if (row, t) in by else "-" for t in tasks)]
        for row in rows
    ]
    return markdown_table(header, body, left=2)


def _cell_text(c: Cell) -> str:
    return f"{c.text} {SYMBOL[c.prediction.verdict]}"


def table_text(cells_: list[Cell], titles: dict[str, str]) -> str:
    rows, tasks, by = grid(cells_)
    header = ["model", "layers", *(titles[t] for t in tasks)]
    layers = {c.model: c.layers for c in cells_}
    body = [
        [
            model_title(row),
            str(layers[row]),
            *(_cell_text(by[(row, t)]) if (row, t) in by else "-" for t in tasks),
        ]
        for row in rows
    ]
    return text_table(header, body)


def cells_digest(cells_: list[Cell]) -> str:
    """A digest of what the picture shows, written into it and onto the page, so that `--check` can
    tell a picture drawn from other figures."""
    data = [
        (c.model, c.task, c.text, round(c.extrapolation, 3), c.prediction.verdict, c.agreement)
        for c in cells_
        if c.seeds
    ]
    return hashlib.sha1(json.dumps(data).encode()).hexdigest()[:16]


def draw_heatmap(cells_: list[Cell], titles: dict[str, str], path: Path) -> Path:
    """Models x tasks, colour = extrapolation (mean over seeds of the scaled accuracy at HEADLINE x
    the training length, unfitted seeds 0), the fitted-seed count in the cell, a corner x where theory
    says "cannot", a red frame where measurement and theory disagree."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from statetrack.results.plots import save_figure

    rows, tasks, by = grid([c for c in cells_ if c.seeds])  # the measured cells
    values = [[float("nan")] * len(tasks) for _ in rows]
    for (row, task), c in by.items():
        values[rows.index(row)][tasks.index(task)] = c.extrapolation
    fig, ax = plt.subplots(figsize=(1.3 * len(tasks) + 3.2, 0.27 * len(rows) + 1.6))
    image = ax.imshow(values, cmap="viridis", vmin=0, vmax=1, aspect="auto")
    for (row, task), c in by.items():
        i, j = rows.index(row), tasks.index(task)
        ax.text(
            j,
            i,
            f"{len(c.fitted)}/{len(c.seeds)}",
            ha="center",
            va="center",
            fontsize=7,
            color="black" if c.extrapolation > 0.55 else "white",
        )
        if c.prediction.verdict == theory.CANNOT:
            ax.text(j + 0.42, i - 0.3, "×", ha="right", va="top", fontsize=7, color="#ff6060")
        if c.agreement in (CONTRADICTS, NOT_LEARNED, SHORTCUT):
            ax.add_patch(
                plt.Rectangle(
                    (j - 0.48, i - 0.46),
                    0.96,
                    0.92,
                    fill=False,
                    lw=1.2,
                    ec="#ff3030" if c.agreement == CONTRADICTS else "#ffaa00",
                )
            )
    layers = {c.model: c.layers for c in cells_}
    labels = [f"{model_title(r)}{f' ({layers[r]} layers)' if layers[r] > 1 else ''}" for r in rows]
    ax.set_yticks(range(len(rows)), labels, fontsize=7)
    ax.set_xticks(range(len(tasks)), [titles[t] for t in tasks], fontsize=8)
    ax.xaxis.tick_top()
    ax.set_xlabel(
        f"cell: fitted seeds; colour: scaled accuracy at {HEADLINE}x the training length (mean over seeds)\n"
        "×: theory says one such layer cannot; frame: theory says can, but not learned or not extrapolating (orange); "
        "cannot, but extrapolates (red)",
        fontsize=7,
    )
    fig.colorbar(image, ax=ax, fraction=0.04, pad=0.02)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    save_figure(fig, path, metadata={"Comment": f"{STAMP} {cells_digest(cells_)}"})
    plt.close(fig)
    return path


STAMP = "statetrack state-table"


def picture_digest(path: Path) -> str | None:
    """The cells' digest a picture was drawn from (its PNG `Comment` text), None if it has none."""
    import struct

    if not path.exists():
        return None
    data = path.read_bytes()
    at = 8  # after the PNG signature: chunks of length, type, data, CRC
    while at + 8 <= len(data):
        (length,) = struct.unpack(">I", data[at : at + 4])
        kind, body = data[at + 4 : at + 8], data[at + 8 : at + 8 + length]
        if kind == b"tEXt" and body.startswith(b"Comment\0"):
            text = body[len(b"Comment\0") :].decode("latin-1")
            return text.split()[-1] if text.startswith(STAMP) else None
        at += 12 + length
    return None


# ---- the page ----------------------------------------------------------------------------------------
def _wall(snapshot: dict | None) -> str:
    """The snapshot's wall time and its runs ("42 min 17 s (1008 runs)"), saying how many of them its
    parts timed where a part went unrecorded (a slice trained in a store whose snapshot was lost)."""
    from statetrack.results.book import duration

    snapshot = snapshot or {}
    parts, planned = snapshot.get("parts", []), len(snapshot.get("plan", []))
    timed = sum(p["runs"] for p in parts)
    seconds = duration(sum(p["seconds"] for p in parts))
    workers = sorted({p["workers"] for p in parts if p.get("workers")})
    on = f", {' or '.join(map(str, workers))} worker{'s' if workers[-1] > 1 else ''}" if workers else ""
    return f"{seconds} ({planned} runs{on})" if timed >= planned else f"{seconds} for {timed} of its {planned} runs{on}"


def _revisions(table: dict, others: dict[str, dict | None]) -> str:
    """The words "measured at REV", naming the other snapshots' revisions where they differ."""
    rev = table.get("git_rev") or "an unknown revision"
    differ = [
        f"{what} at {snap.get('git_rev') or 'an unknown revision'}"
        for what, snap in others.items()
        if snap and snap.get("git_rev") != table.get("git_rev")
    ]
    return f"measured at {rev}" + (f" ({', '.join(differ)})" if differ else "")


def _settings(spec: dict) -> str:
    from statetrack.experiments.spec import train_lengths_text

    train, model = spec.get("train") or {}, spec.get("model_defaults") or {}
    warmup = f"{train.get('warmup')} warm-up steps, " if train.get("warmup") else ""
    budget = "for up to" if train.get("early_stop_fit") is not None else "for"
    return (
        f"width {model.get('d_model')}, trained on lengths {train_lengths_text(train)} {budget} {train.get('steps')} "
        f"steps (batch {train.get('batch_size')}, {warmup}{train.get('schedule', 'constant')} schedule), three seeds"
    )


def theory_markdown(scored: Scored) -> str:
    """One row per transition class present: its models, and per task what one layer (or two) of
    the class can represent, with the statement."""
    models, tasks = labelled(scored)
    models = {**models, **unmeasured(models, scored.spec)}
    keys: dict[str, str] = {}
    rows: dict[tuple, list[str]] = {}
    for label, model in models.items():
        kind = theory.transition_class(model) or "no class stated"
        layers = int(model.get("num_layers", 1))
        verdicts = []
        for task in tasks.values():
            p = theory.predict(model, task, layers)
            key = keys.setdefault(p.why, f"[{len(keys) + 1}]") if p.why else ""
            verdicts.append(f"{p.verdict} {key}".strip())
        rows.setdefault((kind, layers, tuple(verdicts)), []).append(model_title(label))
    header = ["transition (one layer's A(x_t))", "layers", "models", *(task_title(t) for t in tasks.values())]
    body = [
        [theory.TRANSITION_CLASSES.get(kind, kind), str(layers), ", ".join(names), *verdicts]
        for (kind, layers, verdicts), names in rows.items()
    ]
    legend = [f"{key} {why}" for why, key in keys.items()]
    return markdown_table(header, body, left=3) + "\n\n" + "\n".join(f"- {line}" for line in legend)


def pilot_markdown(pilot: Scored) -> str:
    """Each cell's rate(s) trained, with the final training loss of its seed-0 run there."""
    choice = pilot_choice(pilot, run_losses(pilot))
    models, tasks = labelled(pilot)
    header = ["model", *(task_title(t) for t in tasks.values())]
    body = []
    for model in models:
        row = []
        for task in tasks:
            cell = choice.get((model, task))
            if cell is None:
                row.append("-")
                continue
            loss = min((v for v in cell["losses"].values() if v is not None), default=None)
            rates = ", ".join(f"{lr:g}" for lr in cell["chosen"])
            row.append(rates + (f" ({loss:.1e})" if loss is not None else ""))
        body.append([model_title(model) + _layers_suffix(model), *row])
    return markdown_table(header, body, left=1)


def _layers_suffix(label: str) -> str:
    match = re.search(r"\(num_layers=(\d+)\)$", label)
    return f" ({match.group(1)} layers)" if match and match.group(1) != "1" else ""


def disagreements(cells_: list[Cell]) -> list[Cell]:
    return [c for c in cells_ if c.agreement in (CONTRADICTS, NOT_LEARNED, SHORTCUT)]


def explanation(agreement: str, key: str | None, notes: dict) -> str:
    """The notes' word on a cell (`cells`, by `cell_key`) or on every cell of its kind (`kinds`)."""
    if key is not None:
        return (notes.get("cells") or {}).get(key, "")
    return (notes.get("kinds") or {}).get(agreement, "Not yet explained.")


def _note(c: Cell, titles: dict[str, str], notes: dict) -> str:
    text = explanation(c.agreement, cell_key(c, titles), notes)
    return f": {text}" if text else ""


def unexplained(cells_: list[Cell], titles: dict[str, str], notes: dict) -> list[str]:
    """The cells that differ from theory without the notes' word: a "cannot, but extrapolates" cell
    needs its own (a defect or a discovery); the others, at least their kind's."""
    out = []
    for c in disagreements(cells_):
        key = cell_key(c, titles)
        own = explanation(c.agreement, key, notes)
        kind = (notes.get("kinds") or {}).get(c.agreement)
        if not own and (c.agreement == CONTRADICTS or not kind):
            out.append(key)
    return out


def cell_key(c: Cell, titles: dict[str, str]) -> str:
    return f"{model_title(c.model)}{_layers_suffix(c.model)} | {titles[c.task]}"


def page(table: dict, pilot: dict | None, notes: dict | None = None, picture: str = "state-table.png") -> str:
    """docs/state-table.md from the table's snapshot, the pilot's, the full-budget check's, the
    larger budget's and the notes."""
    from statetrack.results.book import probes_table

    notes = notes or {}
    scored = scored_snapshot(table)
    full, larger = (
        load_snapshot(snapshot_file(n)) if snapshot_file(n).exists() else None for n in (FULL_BUDGET, LARGER_BUDGET)
    )
    cells_, titles = committed_cells(table, full, larger)
    lines = [
        *_header(scored, table, {"pilot": pilot, "full": full, "larger": larger}, notes, picture, cells_),
        *_table_section(cells_, titles),
        "## What theory says",
        "",
        "The prediction of each cell follows from the model's transition class and the task's algebra "
        "(`statetrack.theory`: element orders, commutativity, solvability, the automaton's cycles).",
        "",
        theory_markdown(scored),
        "",
        *_differences(cells_, titles, notes),
        *_larger_budget_section(cells_, titles, larger),
        *_early_stopping_section(cells_, titles),
        "## Learning rates: the pilot",
        "",
    ]
    if pilot is not None:
        lines += [
            "Seed 0 at each rate on every task; each cell trains the rate whose run ends with the lowest training "
            "loss at the training length (the mean of its last logged windows; in brackets) and every rate within "
            f"{LOSS_TIE:.0%} of it, each then read as the cell's: a cell shows the weakest reading over its tied "
            "rates, marked `(tie)` where they differ.",
            "",
            pilot_markdown(scored_snapshot(pilot)),
        ]
    else:
        lines.append("No pilot snapshot.")
    lines += ["", "## Notes", "", (notes.get("summary") or "").strip(), ""]
    if notes.get("probes"):
        lines += [probes_table([{"verdict": None, **p} for p in notes["probes"]]), ""]
    return "\n".join(lines).rstrip() + "\n"


def _header(scored: Scored, table: dict, others: dict, notes: dict, picture: str, cells_: list[Cell]) -> list[str]:
    from statetrack.results.book import describe_machine

    parts = [p for s in (table, *others.values()) if s for p in s.get("parts", [])]
    machines = {describe_machine(p["machine"]) for p in parts if p.get("machine")}
    names = {"pilot": "its pilot", "full": "the full-budget check", "larger": "the larger budget"}
    walls = ", ".join(f"{names[k]} {_wall(v)}" for k, v in others.items() if v is not None)
    return [
        "# The state-tracking table",
        "",
        "Where each model stands in state tracking: every registered model, one layer (each eigenvalue range where it "
        "has one), on a ladder of groups and automata that the works' theorems separate, with theory's prediction "
        "beside each measured cell. Generated by `statetrack docs --write` from the committed snapshots "
        f"(`{TABLE}.quick.json`, `{PILOT_NAME}.quick.json` and `{LARGER_BUDGET}.quick.json` in the package's "
        "snapshots folder); [references.md](references.md) has the works cited.",
        "",
        f"Protocol: {_settings(scored.spec)}; every task in the word-problem form (the state at every position); "
        f"a seed *fits* at scaled accuracy >= {FIT_THRESHOLD:g} at the longest training length, and *holds* a length "
        f"at >= {HOLD:g}; a cell *extrapolates* when most seeds fit and hold {HEADLINE}x (the works' test ratio; "
        f"{STRICT}x is read beside it as the strict reading). Each cell's learning rate is chosen among "
        f"{_pilot_rates(others.get('pilot'))} on its training length by a pilot (below: the lowest final "
        "training loss), never on the test lengths. "
        f"A cell left undecided trains again with {GROWTH}x the steps, whatever theory predicts.",
        "",
        *([notes["protocol"].strip(), ""] if notes.get("protocol") else []),
        f"Wall time: the table {_wall(table)}"
        + (f", {walls}" if walls else "")
        + (f", on {'; '.join(sorted(machines))}" if machines else "")
        + f"; {_revisions(table, {names[k]: v for k, v in others.items()})}.",
        "",
        f"![models x tasks: fitted seeds, extrapolation colour, theory's cannot]({picture})",
        "",
        f"<!-- picture digest {cells_digest(cells_)} -->",
        "",
    ]


def _pilot_rates(pilot: dict | None) -> str:
    rates = sorted(
        {float(lr) for m in ((pilot or {}).get("spec") or {}).get("models", []) for lr in m.get("lrs") or []}
    )
    rates = rates or sorted(float(lr) for lr in ((pilot or {}).get("spec") or {}).get("lrs", PILOT_RATES))
    return ", ".join(f"{lr:g}" for lr in rates)


def _table_section(cells_: list[Cell], titles: dict[str, str]) -> list[str]:
    kinds = (AGREES, NOT_LEARNED, SHORTCUT, CONTRADICTS, MEASURED, UNREAD, NOT_MEASURED)
    counts = {a: sum(1 for c in cells_ if c.agreement == a) for a in kinds}
    return [
        "## The table",
        "",
        f"A cell reads `fitted · holding {HEADLINE}x · holding {STRICT}x` (seeds of three; `did not fit` where "
        "none fits), then what theory says one such layer (or two) can represent: ✓ can, ✗ cannot, ? not known "
        "(the statements: next section). Bold: measurement and theory differ (the cell is explained below). "
        + (
            f"`{NOT_MEASURED}`: a model the table has and its committed snapshot lacks (a model added since; "
            "`statetrack table --zoo` measures it). "
            if counts[NOT_MEASURED]
            else ""
        )
        + ", ".join(f"{n} cells {a}" for a, n in counts.items() if n)
        + ".",
        "",
        table_markdown(cells_, titles),
        "",
    ]


def _differences(cells_: list[Cell], titles: dict[str, str], notes: dict) -> list[str]:
    lines = ["## Where measurement and theory differ", ""]
    differ = disagreements(cells_)
    for agreement in (CONTRADICTS, SHORTCUT, NOT_LEARNED):
        group = [c for c in differ if c.agreement == agreement]
        if not group:
            continue
        lines += [f"**{agreement}** ({len(group)} cells). {explanation(agreement, None, notes)}", ""]
        lines += [f"- {cell_key(c, titles)} ({c.text}){_note(c, titles, notes)}" for c in group]
        lines.append("")
    if not differ:
        lines += ["None.", ""]
    return lines


def _larger_budget_section(cells_: list[Cell], titles: dict[str, str], larger: dict | None) -> list[str]:
    grown = [c for c in cells_ if c.first_reading is not None]
    if larger is None:
        return ["## The larger budget", "", "No larger-budget snapshot: every cell reads its first budget.", ""]
    changed = [c for c in grown if c.first_reading != c.text]
    steps = (larger.get("spec") or {}).get("train", {}).get("steps")
    return [
        "## The larger budget",
        "",
        f"{len(grown)} cells were undecided at the first budget (most seeds did not fit, or fit but did not hold "
        f"{HEADLINE}x) and trained again with {GROWTH}x the steps ({steps}) and no early stop; the table reads "
        f"them at the larger budget. {len(changed)} of them read otherwise than at the first budget:",
        "",
        *(f"- {cell_key(c, titles)}: first {c.first_reading}, larger {c.text}" for c in changed),
        "",
    ]


def _early_stopping_section(cells_: list[Cell], titles: dict[str, str]) -> list[str]:
    retrained = [c for c in cells_ if c.stopped_reading is not None]
    changed = [c for c in retrained if c.stopped_reading != c.text]
    if not retrained:
        resting = sum(1 for c in cells_ if c.stopped)
        said = (
            f"{resting} cells rest on a run that stopped early (fit and converged at three validations in a row); "
            "`statetrack table --full-budget` trains them again at the full budget with no stop."
            if resting
            else "No run the table reads stopped before its budget."
        )
        return ["## Early stopping", "", said, ""]
    return [
        "## Early stopping",
        "",
        f"{len(retrained)} cells had a run that stopped early (fit and converged at three validations in a row) "
        "and were not trained again at the larger budget; `statetrack table --full-budget` trained every run of "
        "those cells again at the full budget with no stop, and the table reads them from that measurement, so no "
        "cell rests on a stopped run. "
        + (
            f"{len(changed)} of them read otherwise than their stopped runs:"
            if changed
            else "Every one reads as its stopped runs did."
        ),
        "",
        *(f"- {cell_key(c, titles)}: stopped {c.stopped_reading}, full budget {c.text}" for c in changed),
        "",
    ]


# ---- training: the pilot, then the table -------------------------------------------------------------
PILOT_OVERRIDES = ("seeds=[0]", f"lrs=[{', '.join(f'{lr:.1e}'.replace('e-0', 'e-') for lr in PILOT_RATES)}]")


def parse_models(texts: list[str]) -> list[dict]:
    """`--models` entries: a registered name or preset (`my_mixer`, `deltanet-neg`) or a YAML
    mapping (`{name: deltanet, eig_range: "[-1,1]"}`), each checked against the registry."""
    from statetrack.models import zoo

    out = []
    for text in texts:
        entry = yamlio.load(text) if text.strip().startswith("{") else text.strip()
        if not isinstance(entry, (str, dict)) or (isinstance(entry, dict) and "name" not in entry):
            raise StatetrackError(f"table --models: {text!r} is neither a model name nor a mapping with a name")
        zoo.resolve(entry)  # an unknown name or parameter fails here, naming what is valid
        out.append({"name": entry} if isinstance(entry, str) else entry)
    return out


def _models_override(models: list[dict]) -> str:
    return "models=" + json.dumps(models)


def pilot_experiment(models: list[dict] | None = None, imports=(), overrides=()):
    """The pilot of the zoo (`models` None: the spec's, named PILOT_NAME) or of `models`: seed 0 at
    each pilot rate (`overrides`: other spec entries changed, e.g. a shorter budget to try the command)."""
    given = ([_models_override(models)] if models else []) + list(overrides) + list(PILOT_OVERRIDES)
    return _resolve(given, None if models or overrides else PILOT_NAME, imports)


def table_experiment(pilot_scored: Scored, pilot, name: str, imports=(), overrides=(), curves=None):
    """The table's experiment: each cell of the pilot at the rate(s) the pilot chose for it
    (`curves`: the store's, where `pilot_scored` was read from a store; see `run_losses`)."""
    from statetrack.experiments.spec import Experiment

    choice = pilot_choice(pilot_scored, run_losses(pilot_scored, curves))
    # a cell whose every pilot run failed tells no rate apart: it trains at each (its failures then show)
    every: dict[tuple[str, str], list[float]] = {(r.model_name, r.task_name): [] for r in pilot.runs}
    for r in pilot.runs:
        every[(r.model_name, r.task_name)].append(r.lr)
    chosen = {cell: choice[cell]["chosen"] if cell in choice else sorted(lrs) for cell, lrs in every.items()}
    models: dict[str, dict] = {}
    rates: dict[str, set[float]] = {}
    for run in pilot.runs:
        models.setdefault(run.model_name, run.model)
        rates.setdefault(run.model_name, set()).update(chosen[(run.model_name, run.task_name)])
    entries = [{**model, "lrs": sorted(rates[label])} for label, model in models.items()]
    table = _resolve([*overrides, _models_override(entries)], name, imports)
    kept = tuple(r for r in table.runs if r.lr in chosen[(r.model_name, r.task_name)])
    return Experiment(table.spec, kept, table.imports)


def reuse_pilot_runs(store, pilot, table) -> int:
    """Step 2's runs that the pilot trained already, recorded from the pilot's (`Store.copy_run`)
    rather than trained again: a cell's seed 0 at a rate the pilot chose is the pilot's run of that
    cell and rate, the same configuration under another experiment. Returns how many."""
    from statetrack.experiments.runner import git_revision

    def configuration(run) -> str:  # but for the experiment it belongs to
        return json.dumps({k: v for k, v in run.config.items() if k != "experiment"}, sort_keys=True)

    trained = {configuration(r): r.id for r in pilot.runs}
    revision = git_revision()
    return sum(
        store.copy_run(trained[key], run.claim(revision))
        for run in table.runs
        if (key := configuration(run)) in trained
    )


def _resolve(given: list[str], name: str | None, imports=()):
    """The table's spec under the overrides `given`. The reading's lengths follow the training
    lengths: unless `given` sets eval.lengths, the table evaluates at 1, HEADLINE and STRICT times the
    longest training length (a user's `train.max_length=8` is read at 8, 32 and 128); lengths the
    user gives must hold the longest training length, where a cell's fit is read (one line otherwise)."""
    from statetrack.experiments.spec import load_spec, resolve, train_range
    from statetrack.plugins import load_imports

    load_imports(imports, origin="--import")
    spec = load_spec(str(spec_file()), "quick", given, name)
    longest = train_range(spec["train"])[1]
    lengths = [longest * f for f in (1, *FACTORS)]
    if any(g.split("=", 1)[0].strip() in ("eval", "eval.lengths") for g in given):
        if longest not in spec["eval"]["lengths"]:
            raise StatetrackError(
                f"table: eval.lengths {spec['eval']['lengths']} leave out the longest training length {longest}, "
                f"where a cell's fit is read; add it (and {lengths[1]} and {lengths[2]}, where its extrapolation is "
                "read)"
            )
    elif not set(lengths) <= set(spec["eval"]["lengths"]):
        given = [*given, f"eval.lengths={lengths}"]
    return resolve(str(spec_file()), "quick", given, name, imports)


def told_apart(mine: list[Cell], committed: set[tuple[str, int]]) -> list[Cell]:
    """A user's cells, each model that the committed table also has (the same name and number of
    layers, `committed`: (label, layers) pairs) renamed `<model> (this run)`, so that both rows show."""
    known = {(model_title(m), layers) for m, layers in committed}
    for c in mine:
        if (model_title(c.model), c.layers) in known:
            c.model = re.sub(r"( \(num_layers=\d+\))?$", lambda m: " (this run)" + (m.group(1) or ""), c.model, count=1)
    return mine


def user_table_name(models: list[dict], overrides=()) -> str:
    from statetrack.experiments.spec import overrides_name

    return overrides_name(TABLE, ["models=" + "-".join(m["name"] for m in models), *overrides])


def committed_cells(
    table: dict | None = None, full: dict | None = None, larger: dict | None = None
) -> tuple[list[Cell], dict[str, str]]:
    """The table's cells and task titles (`table`, `full`, `larger`: snapshots; default the committed
    ones). A cell where a run stopped early is read from the full-budget snapshot (`statetrack table
    --full-budget`) where there is one, so that no cell rests on a stopped run (its stopped reading
    kept beside it); a cell the first budget left undecided is read from the larger budget's snapshot
    where it has the cell (its first reading kept beside it). A model the table has and its snapshot
    not (`unmeasured`) reads "not measured yet" in every cell."""
    scored = scored_snapshot(table or load_snapshot(snapshot_file()))
    models, tasks = labelled(scored)
    out = cells(scored)
    if full is None and snapshot_file(FULL_BUDGET).exists():
        full = load_snapshot(snapshot_file(FULL_BUDGET))
    if full is not None and trains_again(full, scored.spec):
        again = {(c.model, c.task): c for c in cells(scored_snapshot(full))}
        for i, c in enumerate(out):
            if c.stopped and (c.model, c.task) in again:
                out[i] = again[(c.model, c.task)]
                out[i].stopped_reading = c.text
    if larger is None and snapshot_file(LARGER_BUDGET).exists():
        larger = load_snapshot(snapshot_file(LARGER_BUDGET))
    if larger is not None and trains_again(larger, scored.spec):
        out = read_larger_budget(out, cells(scored_snapshot(larger)))
    order = {label: i for i, label in enumerate(tasks)}
    for label, model in unmeasured(models, scored.spec).items():
        layers = int(model.get("num_layers", 1))
        for task_label, task in tasks.items():
            prediction = theory.predict(model, task, layers)
            out.append(Cell(label, task_label, layers, prediction, [], [], {f: [] for f in FACTORS}, 0.0, 0.0))
            out[-1].task_index = order[task_label]
    out.sort(key=lambda c: c.layers)  # stable: the unmeasured rows after the measured ones of their depth
    return out, {label: task_title(t) for label, t in tasks.items()}


BUDGET_KEYS = ("steps", "warmup", "early_stop_fit")  # what `_again` changes of the table's spec


def trains_again(snapshot: dict, table_spec: dict) -> bool:
    """Whether `snapshot` (a full or larger budget's) trains cells of the table measured under
    `table_spec` again: its spec is the table's but for its name, scale and budget (`BUDGET_KEYS`).
    A snapshot of an earlier measurement of the table is not read beside a later one."""

    def protocol(spec: dict) -> dict:
        train = {k: v for k, v in (spec.get("train") or {}).items() if k not in BUDGET_KEYS}
        return {**{k: v for k, v in spec.items() if k not in ("name", "scale")}, "train": train}

    return protocol(snapshot.get("spec") or {}) == protocol(table_spec)


def unmeasured(measured: dict[str, dict], spec: dict) -> dict[str, dict]:
    """{label: resolved model} of each model the table has that a snapshot (its models `measured`, by
    label; its spec `spec`) lacks: the table spec's models and every packaged registered model the
    spec does not name (at each eig_range), each under the snapshot's settings. `statetrack table
    --zoo` measures them."""
    from statetrack.experiments.spec import model_entry, model_labels
    from statetrack.layers.common import EIG_RANGES
    from statetrack.models import zoo

    listed = [model_entry(m, spec)[0] for m in yamlio.load(spec_file().read_text())["models"]]
    named = {m["name"] for m in listed}
    registered = [
        model_entry({"name": name, **({"eig_range": r} if r else {})}, spec)[0]
        for name in zoo.packaged_models()
        if name not in named
        for r in (EIG_RANGES if "eig_range" in zoo.mixer_parameters(name) else (None,))
    ]
    missing: list[dict] = []
    for model in listed + registered:
        if model not in measured.values() and model not in missing:
            missing.append(model)
    labels = model_labels([*measured.values(), *missing])[len(measured) :]
    return dict(zip(labels, missing))


def read_larger_budget(first: list[Cell], larger: list[Cell]) -> list[Cell]:
    """`first`'s cells, each that the larger budget trained again read from it (its first reading kept)."""
    again = {(c.model, c.task): c for c in larger}
    out = []
    for c in first:
        grown = again.get((c.model, c.task))
        if grown is not None:
            grown.first_reading = c.text
            grown.task_index = c.task_index
        out.append(grown or c)
    return out


def write_page(check: bool = False, root: Path = Path(".")) -> list[Path]:
    """Write (or, with `check`, compare) docs/state-table.md and its picture from the committed
    snapshots; returns the files that differ from their generation."""
    table = load_snapshot(snapshot_file())
    pilot_path = snapshot_file(PILOT_NAME)
    pilot = load_snapshot(pilot_path) if pilot_path.exists() else None
    text = page(table, pilot, read_notes())
    page_path, picture = root / PAGE, root / PICTURE
    cells_, titles = committed_cells(table)
    differ = []
    if not page_path.exists() or page_path.read_text() != text:
        differ.append(page_path)
    if picture_digest(picture) != cells_digest(cells_):
        differ.append(picture)
    if not check:
        if page_path in differ:
            write_text(page_path, text)
        if picture in differ:
            draw_heatmap(cells_, titles, picture)
    return differ


PILOT_NAME = f"{TABLE}-pilot"


LEGEND = (
    f"cell: seeds fitted · holding {HEADLINE}x · holding {STRICT}x the training length (of three; "
    "'did not fit' where none fits, – where a length was not evaluated; a cell extrapolates when most seeds "
    f"hold {HEADLINE}x); "
    "theory: ✓ can, ✗ cannot, ? not known (docs/state-table.md cites each statement); "
    f"'{NOT_MEASURED}': a model the committed table lacks"
)


def titles_of(scored: Scored) -> dict[str, str]:
    _, tasks = labelled(scored)
    return {label: task_title(t) for label, t in tasks.items()}


def write_user_table(cells_: list[Cell], titles: dict[str, str], folder: Path) -> Path:
    """RESULTS_DIR/table/: state-table.md (the table and its disagreements), state-table.png, cells.json."""
    folder.mkdir(parents=True, exist_ok=True)
    lines = ["# The state-tracking table, with your rows", "", LEGEND, "", table_markdown(cells_, titles), ""]
    differ = disagreements(cells_)
    if differ:
        lines += ["Where measurement and theory differ:", ""]
        lines += [f"- {cell_key(c, titles)} ({c.text}): {c.agreement}" for c in differ]
    write_text(folder / "state-table.md", "\n".join(lines).rstrip() + "\n")
    draw_heatmap(cells_, titles, folder / "state-table.png")
    rows = [
        {
            "model": c.model,
            "task": titles.get(c.task, c.task),
            "layers": c.layers,
            "lr": c.lr,
            "ties": c.ties,  # the other rates the cell trained and reads (the weakest reading is the cell's)
            "seeds": c.seeds,
            "fitted": c.fitted,
            "held": {str(f): v for f, v in c.held.items()},
            "extrapolation": c.extrapolation,
            "theory": c.prediction.verdict,
            "why": c.prediction.why,
            "agreement": c.agreement,
        }
        for c in cells_
    ]
    write_text(folder / "cells.json", json.dumps(rows, indent=1) + "\n")
    return folder


FULL_BUDGET = f"{TABLE}-full-budget"


def full_budget_experiment():
    """Every decided cell of the committed table where a run stopped early, all its seeds and rates,
    trained again at the full budget with no early stop (`statetrack table --full-budget`): what the
    stop could have changed (an undecided cell trains its larger budget with no stop instead)."""
    scored = scored_snapshot(load_snapshot(snapshot_file()))
    stopped = {(c.model, c.task) for c in cells(scored) if c.stopped and c.decided}
    return _again(scored, FULL_BUDGET, stopped, growth=1)


LARGER_BUDGET = f"{TABLE}-larger-budget"


def larger_budget_name(table: str) -> str:
    """The larger budget's experiment name for the table experiment `table` (the zoo's: LARGER_BUDGET)."""
    from statetrack.experiments.spec import overrides_name

    return LARGER_BUDGET if table == TABLE else overrides_name(table, ["larger-budget"])


def larger_budget_experiment(scored: Scored, name: str = LARGER_BUDGET, imports: tuple[str, ...] = ()):
    """Step 3 of the protocol: every cell of a measured table (`scored`) that is undecided (most seeds
    do not fit, or fit but do not hold at the headline ratio), all its seeds and rates, trained again
    with GROWTH times the steps and the warm-up and no early stop. Theory has no say in who trains
    again. None where every cell is decided."""
    undecided = {(c.model, c.task) for c in cells(scored) if not c.decided}
    return _again(scored, name, undecided, growth=GROWTH, imports=imports) if undecided else None


def _again(scored: Scored, name: str, which: set[tuple[str, str]], growth: int, imports: tuple[str, ...] = ()):
    """The runs of the cells `which` ((model, task) labels) of a measured table, under its spec with
    `growth` times the steps and the warm-up and no early stop, as experiment `name` (importing the
    user's modules `imports`, as the table's runs did)."""
    import copy

    from statetrack.experiments.spec import Experiment, expand

    spec = copy.deepcopy({**scored.spec, "scale": scored.scale or "quick"})
    spec["name"] = name
    train = spec["train"]
    spec["train"] = {
        **train,
        "steps": int(train["steps"]) * growth,
        "warmup": int(train.get("warmup") or 0) * growth,
        "early_stop_fit": None,
    }
    label_of = {p["id"]: (p["model"], p["task"]) for p in scored.plan.runs}
    first = {r.id: r for r in expand({**copy.deepcopy(scored.spec), "scale": spec["scale"]}, check=False)}
    runs = []
    for run, again in zip(first.values(), expand(spec, check=False), strict=True):
        if label_of.get(run.id) in which:  # a run of the table's plan (a cell trains its chosen rates only)
            runs.append(again)
    return Experiment(spec, tuple(runs), tuple(imports))


def changed_cells(committed: list[Cell], again: list[Cell]) -> list[tuple[Cell, Cell]]:
    """(committed, again) pairs whose reading (fitted, holding 4x and 16x) differs."""
    by = {(c.model, c.task): c for c in committed}
    return [
        (by[(c.model, c.task)], c) for c in again if (c.model, c.task) in by and by[(c.model, c.task)].text != c.text
    ]
