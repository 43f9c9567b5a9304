"""The shipped experiments at a glance (`statetrack experiments`): each one's description, the runs
it plans at a scale, and the wall time of its last measurement at that scale.

The runs are the ones `spec.expand` makes, enumerated without building any task or model
(`check=False`), so that the listing stays quick. The wall time
is the sum of the parts of the committed snapshot `<book dir>/results/<name>.<scale>.json`
(`statetrack.results.book`); an installed package has no snapshots, and shows none.
"""

from __future__ import annotations

from pathlib import Path

from statetrack.experiments.spec import expand, load_spec, shipped_specs
from statetrack.results.book import read_snapshots, wall_seconds


def checkout_docs() -> Path | None:
    """The docs/ folder of the checkout the package runs from (an editable install), else None."""
    root = Path(__file__).resolve().parents[3]
    if (root / "pyproject.toml").is_file() and (root / "docs").is_dir():
        return root / "docs"
    return None


def planned_runs(name_or_path: str, scale: str = "quick") -> int:
    """How many runs the spec plans at `scale` (`expand`'s runs, counted without building anything)."""
    return len(expand(load_spec(name_or_path, scale), check=False))


def experiments_overview(book_dir: str | Path | None, scale: str = "quick") -> list[dict]:
    """One dict per shipped experiment: name, description, scale, planned_runs and wall_seconds (the
    last measurement's, None where `book_dir` has no snapshot of it or is None)."""
    snapshots = read_snapshots(book_dir) if book_dir is not None else {}
    rows = []
    for name, description in shipped_specs().items():
        snapshot = snapshots.get((name, scale))
        rows.append(
            {
                "name": name,
                "description": " ".join(str(description).split()),
                "scale": scale,
                "planned_runs": planned_runs(name, scale),
                "wall_seconds": None if snapshot is None else round(wall_seconds(snapshot), 1),
            }
        )
    return rows
