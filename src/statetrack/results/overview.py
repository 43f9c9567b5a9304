"""The shipped experiments at a glance (`statetrack experiments`): each one's description, the runs
it plans at a scale, and the wall time of its last measurement at that scale.

The runs are the ones `spec.expand` makes, enumerated without building any task or model
(`check=False`), so that the listing stays quick. The wall time is the sum of the parts of the
experiment's committed snapshot at that scale, which the package holds (`paths.snapshot_folder`).
"""

from __future__ import annotations

from statetrack.experiments.spec import expand, load_spec, shipped_specs
from statetrack.results.book import read_snapshots, wall_seconds


def planned_runs(name_or_path: str, scale: str = "quick") -> int:
    """How many runs the spec plans at `scale` (`expand`'s runs, counted without building anything)."""
    return len(expand(load_spec(name_or_path, scale), check=False))


def experiments_overview(scale: str = "quick") -> list[dict]:
    """One dict per shipped experiment: name, description, scale, planned_runs and wall_seconds (the
    committed measurement's, None where there is no snapshot of it at `scale`)."""
    snapshots = read_snapshots()
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
