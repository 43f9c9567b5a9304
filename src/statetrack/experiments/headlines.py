"""The works' headline cells: the figure each work's abstract or main table leads with, as one cell
(a model on a task) of its experiment's paper scale, declared in the spec as `paper.headline`.

`statetrack reproduce --scale paper --headlines` trains them. A cell is its experiment at the paper
scale with overrides that keep the cell's model and task (and its rates, where the paper states
fewer than the scale sweeps), under the experiment's own name: its runs are the very runs of the
full paper scale (a run's id is its configuration), and its snapshot is the experiment's paper-scale
one. Where the paper's scale does not fit one machine, the cell's `largest_fit` settings apply on
top, and the book names that scale beside the paper's.

The seeds go round the cells (`cell_rounds`): every cell's first seed before any cell's second, so
that a budget cut short leaves a seed of every work rather than every seed of one. A cell's plan
only grows: a round never plans fewer seeds than the cell's snapshot already holds, so the snapshot
keeps the wall time of every earlier part (`book.write_snapshot`).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator, Sequence
from functools import lru_cache

from statetrack.errors import StatetrackError
from statetrack.experiments.spec import (
    TASK_SETTINGS,
    covers,
    model_entry,
    model_labels,
    paper_of,
    read_spec,
    resolve,
    shipped_names,
    spec_at,
    spec_tasks,
)
from statetrack.labels import task_label


def paper_scaled() -> list[str]:
    """The shipped experiments with a paper scale of their own (`scales: paper` in the spec)."""
    return list(_shipped_headlines()[0])


def headlines(names: Sequence[str] = ()) -> dict[str, dict]:
    """{experiment: its headline (as `paper_of` gives it)} of every shipped experiment (or of `names`)
    whose paper scale has one; a name in `names` without one is a one-line error."""
    found = _shipped_headlines()[1]
    for name in names:
        if name not in found:
            raise StatetrackError(
                f"experiment {name!r} has no headline cell; experiments with one: {', '.join(found) or 'none'}"
            )
    return {name: copy.deepcopy(headline) for name, headline in found.items() if not names or name in names}


@lru_cache(maxsize=1)
def _shipped_headlines() -> tuple[tuple[str, ...], dict[str, dict]]:
    """(the shipped experiments with a paper scale, {experiment: its headline}): the shipped specs do
    not change while a process runs, and parsing them all is seconds, so they are read once."""
    scaled = tuple(name for name in shipped_names() if "paper" in (read_spec(name).get("scales") or {}))
    found = {}
    for name in scaled:
        paper = paper_of({"name": name, "paper": spec_at(name, "paper")[0].get("paper")})
        if paper is not None and paper["headline"] is not None:
            found[name] = paper["headline"]
    return scaled, found


def _one(kind: str, name: str, entries: list[dict], labels: list[str], match) -> dict:
    found = [entry for entry, label in zip(entries, labels) if match(name, label)]
    if len(found) != 1:
        raise StatetrackError(
            f"headline {kind} {name!r} names {len(found)} of the paper scale's {kind}s; expected one of: "
            + ", ".join(labels)
        )
    return found[0]


def cell_overrides(name: str, headline: dict, seeds: Sequence[int] | None = None) -> list[str]:
    """The overrides (`key=value`, as on the command line) that make experiment `name`'s paper scale
    its headline cell: its one model (with the headline's rates) and task, `seeds` (default: the
    paper scale's), then the `largest_fit` settings where the headline has them."""
    spec = spec_at(name, "paper")[0]
    entries = [{"name": m} if isinstance(m, str) else dict(m) for m in spec["models"]]
    labels = model_labels([model_entry(m, spec)[0] for m in entries])
    model = dict(_one("model", headline["model"], entries, labels, covers))
    if headline["lrs"]:
        model["lrs"] = headline["lrs"]
    overrides = [f"models={json.dumps([model])}"]
    if spec.get("tasks") is not None:
        tasks = [{"name": t} if isinstance(t, str) else t for t in spec_tasks(spec)]
        names = [task_label({k: v for k, v in t.items() if k not in TASK_SETTINGS}) for t in tasks]
        wanted = headline["task"] or (names[0] if len(names) == 1 else "")
        overrides.append(f"tasks={json.dumps([_one('task', wanted, tasks, names, str.__eq__)])}")
    if seeds is not None:
        overrides.append(f"seeds={json.dumps(list(seeds))}")
    for key, value in ((headline["largest_fit"] or {}).get("settings") or {}).items():
        overrides.append(f"{key}={json.dumps(value)}")
    return overrides


def held_seeds(name: str, headline: dict, plan: list[dict]) -> set[int] | None:
    """The seeds of experiment `name`'s cell that `plan` (its paper-scale snapshot's) holds; None when
    that plan holds runs the cell does not (the whole paper scale, or other settings), which the cell
    must then leave as they are."""
    cell = {run.id for run in resolve(name, "paper", cell_overrides(name, headline), name=name).runs}
    if any(entry["id"] not in cell for entry in plan):
        return None
    return {entry["seed"] for entry in plan}


def cell_rounds(cells: dict[str, dict], held: dict[str, set[int]]) -> Iterator[tuple[str, list[int]]]:
    """(experiment, the seeds its cell plans) in training order: round i plans each cell's first i
    seeds of the paper scale, every cell before the next round; a cell whose plan already holds
    more seeds (`held`: its snapshot's) joins at the round of that many, so that a plan only grows."""
    seeds = {name: list(spec_at(name, "paper")[0]["seeds"]) for name in cells}
    for i in range(1, max((len(s) for s in seeds.values()), default=0) + 1):
        for name in cells:
            start = max(1, sum(1 for s in seeds[name] if s in held.get(name, set())))
            if start <= i <= len(seeds[name]):
                yield name, seeds[name][:i]
