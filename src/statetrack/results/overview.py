"""The shipped experiments at a glance (`statetrack experiments`): each one's description, the runs
it plans at a scale, and the wall time of its last measurement at that scale.

The runs are counted from the spec as written, without building any model, so that the listing
stays quick: per task, distinct models x their lrs x `train.dataset_size` values x seeds, which is the
number of runs `spec.expand` makes (a test holds the two equal for every shipped spec). The wall time
is the sum of the parts of the committed snapshot `<book dir>/results/<name>.<scale>.json`
(`statetrack.results.book`); an installed package has no snapshots, and shows none.
"""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

from statetrack import yamlio
from statetrack.experiments.spec import deep_merge, spec_tasks
from statetrack.results.book import read_snapshots, wall_seconds


def checkout_docs() -> Path | None:
    """The docs/ folder of the checkout the package runs from (an editable install), else None."""
    root = Path(__file__).resolve().parents[3]
    if (root / "pyproject.toml").is_file() and (root / "docs").is_dir():
        return root / "docs"
    return None


def shipped_raw_specs() -> dict[str, dict]:
    """Name -> the YAML of each shipped spec, as written (all scales)."""
    folder = resources.files("statetrack.experiments") / "specs"
    return {
        entry.name[: -len(".yaml")]: yamlio.load(entry.read_text()) or {}
        for entry in sorted(folder.iterdir(), key=lambda p: p.name)
        if entry.name.endswith(".yaml")
    }


def planned_runs(raw: dict, scale: str = "quick") -> int:
    """How many runs the spec `raw` (as written) plans at `scale`; a value listed twice is one run."""
    spec = deep_merge(raw, (raw.get("scales") or {}).get(scale) or {})
    models = {json.dumps(m, sort_keys=True): m for m in spec["models"]}.values()
    own = lambda m: m["lrs"] if isinstance(m, dict) and m.get("lrs") else spec["lrs"]  # noqa: E731
    runs_per_seed = sum(len({float(lr) for lr in own(m)}) for m in models)  # a model entry's lrs replace the spec's
    seeds = len({int(seed) for seed in spec["seeds"]})
    tasks = {json.dumps(t, sort_keys=True): t for t in spec_tasks(spec)}
    count = 0
    for task in tasks.values():
        train = deep_merge(spec.get("train") or {}, (task.get("train") or {}) if isinstance(task, dict) else {})
        sizes = train.get("dataset_size")
        count += runs_per_seed * (len(set(sizes)) if isinstance(sizes, list) else 1) * seeds
    return count


def experiments_overview(book_dir: str | Path | None, scale: str = "quick") -> list[dict]:
    """One dict per shipped experiment: name, description, scale, planned_runs and wall_seconds (the
    last measurement's, None where `book_dir` has no snapshot of it or is None)."""
    snapshots = read_snapshots(book_dir) if book_dir is not None else {}
    rows = []
    for name, raw in shipped_raw_specs().items():
        snapshot = snapshots.get((name, scale))
        rows.append(
            {
                "name": name,
                "description": " ".join(str(raw.get("description", "")).split()),
                "scale": scale,
                "planned_runs": planned_runs(raw, scale),
                "wall_seconds": None if snapshot is None else round(wall_seconds(snapshot), 1),
            }
        )
    return rows
