"""Results store: one SQLite file (WAL mode), default `results/statetrack.db`.

Tables: `runs` (one row per run: full config, seed, lr, git revision, status, timings),
`evals` (one row per run and evaluation length), `curves` (training curve points) and `plans`
(per experiment, the resolved spec and the list of runs that the latest `statetrack run` expanded,
so a report knows which runs it expects and which are missing).
A run becomes `done` in the same transaction that writes its evaluations, so a run killed at any
point is either complete or not `done`, never half-written; re-running skips only `done` runs.
Only one process writes at a time (SQLite's lock, WAL mode); the runner's driver is that process
for both backends: workers return their results instead of writing (see experiments/backends.py).
"""

from __future__ import annotations

import json
import socket
import sqlite3
import time
from contextlib import contextmanager
from pathlib import Path

DEFAULT_STORE = Path("results") / "statetrack.db"

SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    id TEXT PRIMARY KEY,
    experiment TEXT NOT NULL,
    model TEXT NOT NULL,
    task TEXT NOT NULL,
    seed INTEGER NOT NULL,
    lr REAL NOT NULL,
    config TEXT NOT NULL,
    git_rev TEXT,
    host TEXT,
    status TEXT NOT NULL CHECK (status IN ('running', 'done', 'failed')),
    error TEXT,
    steps INTEGER,
    num_parameters INTEGER,
    train_seconds REAL,
    eval_seconds REAL,
    started_at REAL,
    finished_at REAL
);
CREATE INDEX IF NOT EXISTS runs_by_experiment ON runs (experiment);
CREATE TABLE IF NOT EXISTS evals (
    run_id TEXT NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    length INTEGER NOT NULL,
    accuracy REAL NOT NULL,
    scaled_accuracy REAL NOT NULL,
    samples INTEGER NOT NULL,
    PRIMARY KEY (run_id, length)
);
CREATE TABLE IF NOT EXISTS curves (
    run_id TEXT NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    step INTEGER NOT NULL,
    loss REAL NOT NULL,
    accuracy REAL NOT NULL,
    PRIMARY KEY (run_id, step)
);
CREATE TABLE IF NOT EXISTS plans (
    experiment TEXT PRIMARY KEY,
    scale TEXT,
    spec TEXT NOT NULL,
    runs TEXT NOT NULL,
    created_at REAL
);
"""


class Store:
    """Thin layer over the SQLite file; every write is one transaction."""

    def __init__(self, path: str | Path = DEFAULT_STORE):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self._connect() as db:
            db.executescript(SCHEMA)

    @contextmanager
    def _connect(self):
        db = sqlite3.connect(self.path, timeout=60)
        db.row_factory = sqlite3.Row
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA foreign_keys=ON")
        try:
            with db:  # commit on success, roll back on error
                yield db
        finally:
            db.close()

    # ---- writes --------------------------------------------------------------------------------
    def start_run(self, run_id: str, experiment: str, model: str, task: str, seed: int, lr: float, config: dict, git_rev: str) -> None:
        """Mark a run as running, dropping whatever an earlier, unfinished attempt left."""
        with self._connect() as db:
            db.execute("DELETE FROM runs WHERE id = ?", (run_id,))
            db.execute(
                "INSERT INTO runs (id, experiment, model, task, seed, lr, config, git_rev, host, status, started_at)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, 'running', ?)",
                (run_id, experiment, model, task, seed, lr, json.dumps(config, sort_keys=True), git_rev, socket.gethostname(), time.time()),
            )

    def set_plan(self, experiment: str, spec: dict, runs: list[dict]) -> None:
        """Record what `statetrack run` expanded: the resolved spec and one {id, model, task, lr, seed} per run.
        The latest plan of an experiment replaces the earlier one (the report follows the last command)."""
        with self._connect() as db:
            db.execute(
                "INSERT OR REPLACE INTO plans (experiment, scale, spec, runs, created_at) VALUES (?, ?, ?, ?, ?)",
                (experiment, spec.get("scale"), json.dumps(spec, sort_keys=True), json.dumps(runs), time.time()),
            )

    def finish_run(self, run_id: str, evals: list[dict], curve: list[dict], steps: int, num_parameters: int, train_seconds: float,
                   eval_seconds: float, host: str | None = None) -> None:
        """Write evaluations and curve and mark the run done, atomically. `host`: where it ran, when not here."""
        with self._connect() as db:
            db.executemany(
                "INSERT OR REPLACE INTO evals VALUES (?, ?, ?, ?, ?)",
                [(run_id, e["length"], e["accuracy"], e["scaled_accuracy"], e["samples"]) for e in evals],
            )
            db.executemany(
                "INSERT OR REPLACE INTO curves VALUES (?, ?, ?, ?)",
                [(run_id, c["step"], c["loss"], c["accuracy"]) for c in curve],
            )
            db.execute(
                "UPDATE runs SET status = 'done', error = NULL, steps = ?, num_parameters = ?, train_seconds = ?,"
                " eval_seconds = ?, finished_at = ?, host = COALESCE(?, host) WHERE id = ?",
                (steps, num_parameters, train_seconds, eval_seconds, time.time(), host, run_id),
            )

    def fail_run(self, run_id: str, error: str, host: str | None = None) -> None:
        with self._connect() as db:
            db.execute(
                "UPDATE runs SET status = 'failed', error = ?, finished_at = ?, host = COALESCE(?, host) WHERE id = ?",
                (error, time.time(), host, run_id),
            )

    # ---- reads ---------------------------------------------------------------------------------
    def status(self, run_id: str) -> str | None:
        with self._connect() as db:
            row = db.execute("SELECT status FROM runs WHERE id = ?", (run_id,)).fetchone()
        return row["status"] if row else None

    def runs(self, experiment: str) -> list[dict]:
        with self._connect() as db:
            rows = db.execute("SELECT * FROM runs WHERE experiment = ? ORDER BY model, task, lr, seed", (experiment,)).fetchall()
        return [{**dict(r), "config": json.loads(r["config"])} for r in rows]

    def plan(self, experiment: str) -> dict | None:
        """The latest plan of the experiment: {experiment, scale, spec, runs, created_at}, or None."""
        with self._connect() as db:
            row = db.execute("SELECT * FROM plans WHERE experiment = ?", (experiment,)).fetchone()
        return None if row is None else {**dict(row), "spec": json.loads(row["spec"]), "runs": json.loads(row["runs"])}

    def experiments(self) -> list[str]:
        """Every experiment with runs or a plan (a grid killed before its first run has only a plan)."""
        with self._connect() as db:
            return [r[0] for r in db.execute("SELECT experiment FROM runs UNION SELECT experiment FROM plans ORDER BY 1")]

    def results(self, experiment: str, run_ids: set[str] | None = None) -> list[dict]:
        """One row per (finished run, evaluation length): the `statetrack results --json` schema.
        `dataset_size` (N of a run on a fixed training set) is in the rows of runs that set it.
        `run_ids`: only these runs (the runs of the experiment's plan, say)."""
        with self._connect() as db:
            rows = db.execute(
                "SELECT r.id, r.model, r.task, json_extract(r.config, '$.train.dataset_size') AS dataset_size,"
                " r.seed, r.lr, e.length, e.accuracy, e.scaled_accuracy"
                " FROM runs r JOIN evals e ON e.run_id = r.id"
                " WHERE r.experiment = ? AND r.status = 'done' ORDER BY r.model, r.task, dataset_size, r.lr, r.seed, e.length",
                (experiment,),
            ).fetchall()
        return [{k: r[k] for k in r.keys() if k != "id" and not (k == "dataset_size" and r[k] is None)}
                for r in rows if run_ids is None or r["id"] in run_ids]

    def curves(self, run_id: str) -> list[dict]:
        with self._connect() as db:
            rows = db.execute("SELECT step, loss, accuracy FROM curves WHERE run_id = ? ORDER BY step", (run_id,)).fetchall()
        return [dict(r) for r in rows]

    def evals(self, run_id: str) -> list[dict]:
        with self._connect() as db:
            rows = db.execute("SELECT length, accuracy, scaled_accuracy, samples FROM evals WHERE run_id = ? ORDER BY length", (run_id,)).fetchall()
        return [dict(r) for r in rows]
