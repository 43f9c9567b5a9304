"""Results store: one SQLite file (WAL mode), default `results/statetrack.db`.

Tables: `runs` (one row per run: full config, seed, lr, git revision, status, timings),
`evals` (one row per run, evaluation variant and length: accuracy, scaled accuracy, sequence
accuracy, the model's own per-length `metrics` and the per-position accuracy as JSON; `variant` is ''
for the training task and the name of an `eval.variants` entry otherwise), `traces` (a few examples'
per-position outputs, where the spec asks for `eval.traces`), `curves` (training curve points, with
their `metrics`) and `plans` (per experiment, the resolved spec and the list of runs that the latest
`statetrack run` expanded, so a report knows which runs it expects and which are missing).
A run becomes `done` in the same transaction that writes its evaluations, so a run killed at any
point is either complete or not `done`, never half-written; re-running skips only `done` runs.
A run whose training loss became non-finite is `done` too, with `diverged_at` (the step) and its
evaluations at chance: that is the outcome of its setting, so it is never retried.
Only one process writes at a time (SQLite's lock, WAL mode); the runner's driver is that process
for both backends: workers return their results instead of writing (see experiments/backends.py).
Several drivers may share one store: a driver claims a run before training it (`start_run`: a lease
with its host, pid and a heartbeat it renews), and the others skip it while the lease is live.
The file says it is a store: SQLite's `application_id` is APPLICATION_ID and `user_version` the
schema's version. Opening checks the file before anything is written to it or created beside it
(`Store._identify`): another application's database, a store written by a newer statetrack or in
an earlier statetrack's layout, and damaged pages are refused and left as they are. The stamps are
read from the file's bytes first (`sqlite_header`: the newest page 1, from the -wal file where a
commit left it there), since SQLite, even read-only, writes the -shm file of a database in WAL mode. A new store
gets its tables and stamps in one transaction, so a file is either empty or a whole store.
"""

from __future__ import annotations

import json
import os
import socket
import sqlite3
import stat
import time
import warnings
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path

from statetrack.errors import StatetrackError
from statetrack.labels import variant_label
from statetrack.paths import check_name
from statetrack.sqlite_header import MAGIC, Page1, read_page1

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
    finished_at REAL,
    pid INTEGER,
    heartbeat REAL,
    diverged_at INTEGER,
    threads INTEGER
);
CREATE INDEX IF NOT EXISTS runs_by_experiment ON runs (experiment);
CREATE TABLE IF NOT EXISTS evals (
    run_id TEXT NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    variant TEXT NOT NULL DEFAULT '',
    length INTEGER NOT NULL,
    accuracy REAL NOT NULL,
    scaled_accuracy REAL NOT NULL,
    samples INTEGER NOT NULL,
    sequence_accuracy REAL,
    metrics TEXT,
    position_accuracy TEXT,
    PRIMARY KEY (run_id, variant, length)
);
CREATE TABLE IF NOT EXISTS traces (
    run_id TEXT NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    variant TEXT NOT NULL DEFAULT '',
    length INTEGER NOT NULL,
    data TEXT NOT NULL,
    PRIMARY KEY (run_id, variant, length)
);
CREATE TABLE IF NOT EXISTS curves (
    run_id TEXT NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    step INTEGER NOT NULL,
    loss REAL NOT NULL,
    accuracy REAL NOT NULL,
    metrics TEXT,
    stage INTEGER,
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
TABLES = ("runs", "evals", "traces", "curves", "plans")

APPLICATION_ID = 0x53545452  # "STTR" in SQLite's header: this file is a statetrack results store
SCHEMA_VERSION = 1  # PRAGMA user_version: the version of the layout above

# The fixed keys of a `results` row; a model metric of the same name is renamed metric_<name>.
RESULT_KEYS = (
    "model",
    "task",
    "task_params",
    "variant",
    "dataset_size",
    "seed",
    "lr",
    "length",
    "accuracy",
    "scaled_accuracy",
    "sequence_accuracy",
    "diverged",
    "run_id",
)


# A driver renews the lease on each run it trains every LEASE_SECONDS / 4; a run whose heartbeat is
# older than LEASE_SECONDS (or whose driver's process is gone, on the same host) is free again.
LEASE_SECONDS = 120.0
REVISIONS_JOINED = " and "  # a run's git_rev when it trained at several revisions (`Outcome.revisions`)


def _process_exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process
        return True
    return True


def lease_is_live(row, lease: float = LEASE_SECONDS) -> bool:
    """Whether a running run (its host, pid, heartbeat) is held by a live driver other than this
    process: its heartbeat is fresher than `lease` seconds and, on this host, its process exists.
    A run this process itself marked running (an earlier, interrupted call) is not held."""
    if row["heartbeat"] is None or time.time() - row["heartbeat"] >= lease:
        return False
    if row["host"] == socket.gethostname() and row["pid"] is not None:
        return row["pid"] != os.getpid() and _process_exists(row["pid"])
    return True


def _encode_metrics(metrics: dict | None) -> str | None:
    """A row's `metrics` ({name: float}) as JSON; None (NULL) when there are none."""
    return json.dumps({str(k): float(v) for k, v in metrics.items()}, sort_keys=True) if metrics else None


def _decode_metrics(text: str | None) -> dict:
    """A stored metrics mapping ({name: number}); ValueError when it is not one."""
    metrics = json.loads(text) if text else {}
    if not isinstance(metrics, dict):
        raise ValueError("metrics are not a mapping")
    if not all(name.strip() and _is_number(value) for name, value in metrics.items()):
        raise ValueError("a metric is not a name with a number")
    return metrics


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _numbers(values) -> bool:
    return isinstance(values, list) and bool(values) and all(map(_is_number, values))


def _is_example(example) -> bool:
    """A traced example (`evaluate.trace`): inputs, targets, mask and a row of probabilities per position."""
    if not isinstance(example, dict) or not all(_numbers(example.get(k)) for k in ("inputs", "targets", "mask")):
        return False
    probabilities = example.get("probabilities")
    return (
        isinstance(probabilities, list)
        and len({len(example[k]) for k in ("inputs", "targets", "mask")} | {len(probabilities)}) == 1
        and all(_numbers(row) and len(row) == len(probabilities[0]) for row in probabilities)
    )


def decode_config(text) -> dict:
    """A run's stored configuration: a mapping whose `task` is a mapping with a name (every reader
    builds or labels the task from it) and whose `model`, `train` and `eval`, where present, are
    mappings. ValueError naming what is wrong otherwise."""
    config = json.loads(text)  # TypeError for a stored non-text, ValueError for text that is no JSON
    if not isinstance(config, dict):
        raise ValueError("not a mapping")
    task = config.get("task")
    if not isinstance(task, dict) or not isinstance(task.get("name"), str):
        raise ValueError("no task")
    for section in ("model", "train", "eval"):
        if section in config and not isinstance(config[section], dict):
            raise ValueError(f"{section} is not a mapping")
    return config


def decode_plan(spec_text, runs_text) -> tuple[dict, list[dict]]:
    """A stored plan's spec (a mapping) and runs (a list of mappings, each with a text id, model and
    task); ValueError naming what is wrong otherwise."""
    spec, runs = json.loads(spec_text), json.loads(runs_text)
    if not isinstance(spec, dict):
        raise ValueError("its spec is not a mapping")
    if not isinstance(runs, list) or not all(
        isinstance(r, dict) and all(isinstance(r.get(k), str) for k in ("id", "model", "task")) for r in runs
    ):
        raise ValueError("its list of runs is not one of {id, model, task} entries")
    return spec, runs


BUSY_SECONDS = 60  # how long a command waits for another process's write to the store


def _kind(mode: int) -> str:
    """What a path that is not a regular file is, for an error message."""
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    return "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "not a file"


@dataclass(frozen=True)
class Plan:
    """What `statetrack run` expanded for one experiment, kept as the store keeps it (JSON values):
    the resolved spec (its scale among its keys) and one entry per run ({id, model, task, lr, seed,
    ...}: `RunSpec.plan_entry`); `created_at`: when the store recorded it (None before). The runner
    stores it (`Store.set_plan`), `statetrack run` scores the one it stored, and the store, a
    snapshot and the book give it back (`Store.plan`)."""

    experiment: str
    spec: dict
    runs: list[dict]
    created_at: float | None = None

    @property
    def scale(self) -> str | None:
        return self.spec.get("scale")

    @property
    def ids(self) -> set[str]:
        """The ids of the plan's runs."""
        return {r["id"] for r in self.runs}


@dataclass(frozen=True)
class RunClaim:
    """A run as a driver claims it (`Store.start_run`): its id, the experiment it belongs to, the
    model's and the task's labels, its seed and learning rate, its configuration (`RunSpec.config`)
    and the revision of the code that trains it."""

    id: str
    experiment: str
    model: str
    task: str
    seed: int
    lr: float
    config: dict
    git_rev: str


@dataclass(frozen=True)
class Outcome:
    """A finished run as the store records it (`Store.finish_run`): its evaluations and training
    curve, the steps it trained, its parameters, its training and evaluation seconds; `host`: where
    it ran, when not here; `diverged_at`: the step at which its training loss became non-finite (its
    evaluations are then at chance, experiments/worker.py `chance_evals`), None for a run that
    trained to the end; `threads`: the torch threads it trained with (its figures are bit-identical
    at that count); `revisions`: the code's revisions it trained at, in order (a run resumed from a
    checkpoint written at another has two or more; stored as its git_rev, "a2fad05 and 4b6edf7";
    none: the revision its claim named stands).

    Each evaluation: length, accuracy, scaled_accuracy, samples, and optionally variant (the
    `eval.variants` entry it scores; '' or absent for the training task), sequence_accuracy (the
    fraction of examples right at every supervised position), metrics ({name: float}, the model's
    own statistics at that length), position_accuracy (a list over positions, None where nothing is
    supervised) and traces (examples' per-position outputs, `evaluate.trace`); each curve point:
    step, loss, accuracy, optionally metrics."""

    evals: list[dict]
    curve: list[dict]
    steps: int
    num_parameters: int
    train_seconds: float
    eval_seconds: float
    host: str | None = None
    diverged_at: int | None = None
    threads: int | None = None
    revisions: tuple[str, ...] = ()


class StoreDamaged(UserWarning):
    """Rows of the store that do not decode, skipped (the message names their runs)."""


class StoreLocked(StatetrackError):
    """The store stayed locked by another process's write for BUSY_SECONDS."""


class Store:
    """Thin layer over the SQLite file; every write is one transaction."""

    def __init__(self, path: str | Path = DEFAULT_STORE, read_only: bool = False):
        """Open (or create) the store at `path`. `read_only`: the file must exist and nothing is
        written or created (the `results`, `report` and `analyze` commands)."""
        self.path = Path(path)
        self.read_only = read_only
        self.skipped_runs: set[str] = set()  # ids of the runs readers skipped (or read in part) as damaged
        self.skipped_plans: set[str] = set()  # experiments whose plan readers skipped as damaged
        self._warned: set[str] = set()  # each damage is reported once per Store
        if read_only:
            if self.path.exists() and not self.path.is_file():
                self._identify()  # says what it is instead
            if not self.path.is_file():
                raise StatetrackError(
                    f"no results store at {self.path} (it is written by `statetrack run`; "
                    f"pass --store FILE or --results-dir DIR of an earlier run)"
                )
            with self._opened("open"):
                self._identify()
                with self._connect() as db:
                    self._check_tables(db)
            return
        with self._opened("write"):
            for file in (
                self.path,
                *(self.path.with_name(self.path.name + end) for end in ("-wal", "-shm", "-journal")),
            ):
                if file.is_symlink():  # SQLite would follow it: the store and its companions are written in place only
                    raise StatetrackError(f"{file} is a symbolic link; statetrack writes no file through a link")
            self._identify()
            for file_or_folder, what in ((self.path, "the file"), (self.path.parent, "its folder")):
                # SQLite writes FILE-wal and FILE-shm beside the file
                if file_or_folder.exists() and not os.access(file_or_folder, os.W_OK):
                    raise StatetrackError(f"cannot write results store {self.path}: {what} is read-only")
            self.path.parent.mkdir(parents=True, exist_ok=True)
            give_up = time.monotonic() + BUSY_SECONDS  # a store another process keeps locked: one wait in all
            for attempt in range(20):
                try:
                    with self._connect() as db:
                        self._check_tables(db)
                        if db.execute("PRAGMA user_version").fetchone()[0] != SCHEMA_VERSION:
                            # a new store: its tables and stamps in one transaction, so that another
                            # driver opening it meanwhile finds either none of them or all
                            db.executescript(
                                f"BEGIN IMMEDIATE;\n{SCHEMA}PRAGMA application_id = {APPLICATION_ID};\n"
                                f"PRAGMA user_version = {SCHEMA_VERSION};\nCOMMIT;"
                            )
                    break
                except (StoreLocked, sqlite3.OperationalError) as error:
                    # two drivers creating one store at once: switching a new file to WAL mode can
                    # report "locked" without waiting for the busy timeout; the other one finishes first
                    if "locked" not in str(error) or attempt == 19 or time.monotonic() >= give_up:
                        if "locked" in str(error):
                            raise StoreLocked(
                                f"results store {self.path} is locked by another process (waited {BUSY_SECONDS} s); "
                                "try again when it has finished"
                            ) from None
                        raise
                    time.sleep(0.05 * (attempt + 1))

    @contextmanager
    def _opened(self, doing: str):
        """SQLite's and the file system's errors on opening, as one line naming the file."""
        try:
            yield
        except sqlite3.DatabaseError as error:  # not a database, a read-only file or folder, ...
            if "not a database" in str(error):
                raise StatetrackError(
                    f"{self.path} is not a statetrack results store (not an SQLite database)"
                ) from None
            raise StatetrackError(f"cannot {doing} results store {self.path}: {error}") from None
        except OSError as error:
            raise StatetrackError(f"cannot {doing} results store {self.path}: {error.strerror or error}") from None

    def _identify(self) -> None:
        """Refuse a file that is not a statetrack store, before anything is written to it or created
        beside it: read-only (immutable while no writer is active), so another application's
        database stays byte-for-byte as it was. A missing or empty file is a new store; only a file
        stamped with this schema version is an existing one."""
        for end in ("-wal", "-shm", "-journal"):  # SQLite would block opening a FIFO there, or fail on a folder
            companion = self.path.with_name(self.path.name + end)
            try:
                mode = os.stat(companion).st_mode
            except FileNotFoundError:
                continue
            if not stat.S_ISREG(mode):
                raise StatetrackError(
                    f"results store {self.path}: {companion} (where SQLite keeps its {end[1:]} file) is "
                    f"{_kind(mode)}, not a file; remove it"
                )
        try:
            mode = os.stat(self.path).st_mode
        except FileNotFoundError:
            return
        if not stat.S_ISREG(mode):  # a FIFO would block the read below, a device (/dev/null) read as an empty file
            raise StatetrackError(
                f"results store {self.path} is {_kind(mode)}, not a file; pass --store FILE or --results-dir DIR"
            )
        with open(self.path, "rb") as file:
            header = file.read(100)
        if header and not header.startswith(MAGIC):
            raise StatetrackError(f"{self.path} is not a statetrack results store (not an SQLite database)")
        page1 = read_page1(self.path)
        if page1 is None and not header:
            return  # an empty file and no committed page in a -wal file: a new store
        if page1 is not None and self._judge_header(page1):
            return
        db = self._read_only_connection()
        try:
            application_id = db.execute("PRAGMA application_id").fetchone()[0]
            version = db.execute("PRAGMA user_version").fetchone()[0]
            others = db.execute(
                "SELECT count(*) FROM sqlite_master WHERE type != 'table' AND name NOT LIKE 'sqlite_%'"
                " AND tbl_name NOT IN (SELECT name FROM sqlite_master WHERE type = 'table')"
            ).fetchone()[0]
            names = [
                r[0]
                for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'")
            ]
            tables = {t: {r[0] for r in db.execute("SELECT name FROM pragma_table_info(?)", (t,))} for t in names}
            problems = [r[0] for r in db.execute("PRAGMA quick_check(1)")]
        except sqlite3.DatabaseError as error:
            if isinstance(error, sqlite3.OperationalError) and "locked" in str(error):
                raise StoreLocked(
                    f"results store {self.path} is locked by another process (waited {BUSY_SECONDS} s); "
                    "try again when it has finished"
                ) from None
            raise self._damaged(error) from None
        finally:
            db.close()
        if problems != ["ok"]:
            raise self._damaged(problems[0])
        if application_id == APPLICATION_ID and version == SCHEMA_VERSION:
            return  # a store of this layout (one that lacks a table is refused as damaged on opening)
        if application_id == 0 and not tables and not others and version == 0:
            return  # an empty database: a new store
        self._judge_stamps(application_id, version)
        # statetrack's tables without the stamp (written before it)
        ours = set(tables) <= set(TABLES) and {"id", "experiment", "config", "status"} <= tables.get("runs", set())
        raise self._foreign(application_id, earlier=application_id == 0 and ours)

    def _judge_header(self, page1: Page1) -> bool:
        """Refuse, from its newest page 1 alone (`_judge_stamps`), a database that is not a store of
        this version, and an unstamped one beside a -wal file: SQLite's read-only connection would
        write its -shm file to read on, so its schema is read from page 1 too. True for an empty
        database beside a -wal file (a new store); False when SQLite reads on (read-only and, without a
        -wal file, immutable: nothing is written)."""
        self._judge_stamps(page1.application_id, page1.user_version)
        if page1.application_id == APPLICATION_ID or not self.path.with_name(self.path.name + "-wal").exists():
            return False
        if page1.schema == () and page1.user_version == 0:
            return True
        tables = {name for kind, name in page1.schema or () if kind == "table" and not name.startswith("sqlite_")}
        raise self._foreign(0, earlier=page1.user_version == 0 and "runs" in tables and tables <= set(TABLES))

    def _judge_stamps(self, application_id: int, version: int) -> None:
        """Refuse a database stamped by another application, or by a newer or an earlier statetrack."""
        if application_id == APPLICATION_ID and version > SCHEMA_VERSION:
            raise StatetrackError(
                f"results store {self.path} has schema version {version}, written by a newer statetrack; "
                f"this one reads versions up to {SCHEMA_VERSION} (pip install -U statetrack)"
            )
        if application_id not in (0, APPLICATION_ID) or (
            application_id == APPLICATION_ID and version != SCHEMA_VERSION
        ):
            raise self._foreign(application_id, earlier=application_id == APPLICATION_ID)

    def _foreign(self, application_id: int, earlier: bool) -> StatetrackError:
        if earlier:
            return StatetrackError(
                f"results store {self.path} was written by an earlier statetrack, in a layout this one does not read; "
                f"re-run its experiments into a new results folder (statetrack run EXPERIMENT --results-dir NEW_DIR)"
            )
        return StatetrackError(
            f"{self.path} is not a statetrack results store but an SQLite database of another application "
            f"(application id {application_id}); it is left as it is"
        )

    def _damaged(self, detail) -> StatetrackError:
        detail = " ".join(
            str(detail).replace("*** in database main ***", "").split()
        )  # quick_check's report: several lines
        return StatetrackError(
            f"results store {self.path} is damaged ({detail}); restore it from a copy or pass --store FILE of another"
        )

    def _check_tables(self, db) -> None:
        """A store stamped with this schema version has every table of it: one that lacks a table lost
        it (dropped, or a damaged file), and is refused rather than read as empty or recreated."""
        if db.execute("PRAGMA user_version").fetchone()[0] != SCHEMA_VERSION:
            return
        tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        missing = [t for t in TABLES if t not in tables]
        if missing:
            raise self._damaged(f"no such table: {', '.join(missing)}")

    @contextmanager
    def _connect(self):
        db = self._read_only_connection() if self.read_only else sqlite3.connect(self.path, timeout=BUSY_SECONDS)
        db.row_factory = sqlite3.Row
        try:
            if not self.read_only:
                db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA foreign_keys=ON")
            with db:  # commit on success, roll back on error
                yield db
        except sqlite3.DatabaseError as error:
            if (
                type(error) is sqlite3.DatabaseError
            ):  # damaged pages (locks, constraints: its subclasses, raised as they are)
                raise self._damaged(error) from None
            if isinstance(error, sqlite3.OperationalError) and "locked" in str(error):
                raise StoreLocked(
                    f"results store {self.path} is locked by another process (waited {BUSY_SECONDS} s); "
                    "try again when it has finished"
                ) from None
            if isinstance(error, sqlite3.OperationalError) and str(error).startswith(
                ("no such table", "no such column")
            ):
                raise self._damaged(error) from None
            if isinstance(error, sqlite3.OperationalError) and str(error) in (
                "database or disk is full",
                "disk I/O error",
            ):
                # SQLITE_FULL, SQLITE_IOERR (a full disk can fail the WAL's shared memory first): the write
                # is rolled back
                problem = "the disk is full" if "full" in str(error) else "a disk I/O error (a full or failing disk)"
                raise StatetrackError(
                    f"cannot write results store {self.path}: {problem}; what was stored before is "
                    "intact (free some space and re-run the same command to resume)"
                ) from None
            raise
        finally:
            db.close()

    def _read_only_connection(self) -> sqlite3.Connection:
        # immutable when no writer is active (no -wal file): SQLite then creates no -wal/-shm files either
        mode = "ro" if self.path.with_name(self.path.name + "-wal").exists() else "ro&immutable=1"
        return sqlite3.connect(f"{self.path.resolve().as_uri()}?mode={mode}", uri=True, timeout=BUSY_SECONDS)

    # ---- writes --------------------------------------------------------------------------------
    def start_run(self, run: RunClaim, lease: float = LEASE_SECONDS, retry_failed: bool = True) -> bool:
        """Claim a run for this process and mark it running, dropping whatever an earlier, unfinished
        attempt left; False (nothing written) when the run is not free: done, failed (unless
        `retry_failed`), or running under a live lease of another driver (`lease_is_live`). The
        check and the claim are one transaction, so of two drivers asking at once one gets it."""
        check_name(run.experiment)
        with self._connect() as db:
            db.execute("BEGIN IMMEDIATE")  # the write lock first: nobody claims between our read and our write
            row = db.execute("SELECT status, host, pid, heartbeat FROM runs WHERE id = ?", (run.id,)).fetchone()
            if row is not None and (
                row["status"] == "done"
                or (row["status"] == "failed" and not retry_failed)
                or (row["status"] == "running" and lease_is_live(row, lease))
            ):
                return False
            now = time.time()
            db.execute("DELETE FROM runs WHERE id = ?", (run.id,))
            db.execute(
                "INSERT INTO runs (id, experiment, model, task, seed, lr, config, git_rev, host, pid, heartbeat,"
                " status, started_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 'running', ?)",
                (
                    run.id,
                    run.experiment,
                    run.model,
                    run.task,
                    run.seed,
                    run.lr,
                    json.dumps(run.config, sort_keys=True),
                    run.git_rev,
                    socket.gethostname(),
                    os.getpid(),
                    now,
                    now,
                ),
            )
        return True

    def renew_leases(self, run_ids: list[str]) -> None:
        """The heartbeat of this process's running runs (the driver's lease on them)."""
        with self._connect() as db:
            db.executemany(
                "UPDATE runs SET heartbeat = ? WHERE id = ? AND status = 'running' AND host = ? AND pid = ?",
                [(time.time(), run_id, socket.gethostname(), os.getpid()) for run_id in run_ids],
            )

    def release_leases(self, run_ids: list[str]) -> None:
        """Give up this process's claim on unfinished runs (an interrupted driver): any driver may take them at once."""
        with self._connect() as db:
            db.executemany(
                "UPDATE runs SET heartbeat = NULL WHERE id = ? AND status = 'running' AND host = ? AND pid = ?",
                [(run_id, socket.gethostname(), os.getpid()) for run_id in run_ids],
            )

    def set_plan(self, plan: Plan) -> Plan:
        """Record what `statetrack run` expanded (`Plan`). The latest plan of an experiment replaces
        the earlier one (the report follows the last command). A stored run of the plan takes the
        plan's model and task labels: a label tells models of one plan apart (`Mamba [0,1]
        (num_layers=2)` beside a one-layer Mamba), so it follows the plan, while the run itself (its
        id, its configuration) is the same. Returns the plan as stored (with its `created_at`)."""
        experiment, runs = plan.experiment, plan.runs
        stored = replace(plan, created_at=time.time())
        check_name(experiment)
        with self._connect() as db:
            db.execute(
                "INSERT OR REPLACE INTO plans (experiment, scale, spec, runs, created_at) VALUES (?, ?, ?, ?, ?)",
                (experiment, plan.scale, json.dumps(plan.spec, sort_keys=True), json.dumps(runs), stored.created_at),
            )
            db.executemany(
                "UPDATE runs SET model = ?, task = ? WHERE id = ? AND experiment = ? AND (model != ? OR task != ?)",
                [
                    (r["model"], r["task"], r["id"], experiment, r["model"], r["task"])
                    for r in runs
                    if "model" in r and "task" in r and "id" in r
                ],
            )
        return stored

    def finish_run(self, run_id: str, outcome: Outcome) -> None:
        """Write a finished run's evaluations and curve (`Outcome`) and mark it done, atomically."""
        evals, curve = outcome.evals, outcome.curve
        with self._connect() as db:
            db.executemany(
                "INSERT OR REPLACE INTO evals (run_id, variant, length, accuracy, scaled_accuracy, samples,"
                " sequence_accuracy, metrics, position_accuracy) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [
                    (
                        run_id,
                        e.get("variant") or "",
                        e["length"],
                        e["accuracy"],
                        e["scaled_accuracy"],
                        e["samples"],
                        None if e.get("sequence_accuracy") is None else float(e["sequence_accuracy"]),
                        _encode_metrics(e.get("metrics")),
                        None if e.get("position_accuracy") is None else json.dumps(e["position_accuracy"]),
                    )
                    for e in evals
                ],
            )
            db.executemany(
                "INSERT OR REPLACE INTO traces (run_id, variant, length, data) VALUES (?, ?, ?, ?)",
                [
                    (run_id, e.get("variant") or "", e["length"], json.dumps(e["traces"]))
                    for e in evals
                    if e.get("traces")
                ],
            )
            db.executemany(
                "INSERT OR REPLACE INTO curves (run_id, step, loss, accuracy, metrics, stage)"
                " VALUES (?, ?, ?, ?, ?, ?)",
                [
                    (run_id, c["step"], c["loss"], c["accuracy"], _encode_metrics(c.get("metrics")), c.get("stage"))
                    for c in curve
                ],
            )
            db.execute(
                "UPDATE runs SET status = 'done', error = NULL, steps = ?, num_parameters = ?, train_seconds = ?,"
                " eval_seconds = ?, finished_at = ?, host = COALESCE(?, host), diverged_at = ?, threads = ?,"
                " git_rev = COALESCE(?, git_rev) WHERE id = ?",
                (
                    outcome.steps,
                    outcome.num_parameters,
                    outcome.train_seconds,
                    outcome.eval_seconds,
                    time.time(),
                    outcome.host,
                    outcome.diverged_at,
                    outcome.threads,
                    REVISIONS_JOINED.join(outcome.revisions) or None,
                    run_id,
                ),
            )

    def copy_run(self, source_id: str, claim: RunClaim) -> bool:
        """Record `claim` done with the records of the done run `source_id`, which trained the same
        configuration under another experiment (what training it again gives, bit for bit at the
        source's thread count): its evaluations, traces, curve, steps and timings, under the source's
        revision. False (nothing written) when the source is not done or `claim` is not free
        (`start_run`)."""
        with self._connect() as db:
            source = db.execute("SELECT * FROM runs WHERE id = ? AND status = 'done'", (source_id,)).fetchone()
        if source is None or not self.start_run(replace(claim, git_rev=source["git_rev"] or claim.git_rev)):
            return False
        traces = {(t["variant"], t["length"]): t["examples"] for t in self.traces(source_id)}
        evals = [
            {**e, **({"traces": traces[key]} if (key := (e.get("variant", ""), e["length"])) in traces else {})}
            for e in self.evals(source_id, None)
        ]
        outcome = Outcome(
            evals,
            self.curves(source_id),
            source["steps"],
            source["num_parameters"],
            source["train_seconds"],
            source["eval_seconds"],
            source["host"],
            source["diverged_at"],
            source["threads"],
        )
        self.finish_run(claim.id, outcome)
        return True

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

    def drivers_here(self, lease: float = LEASE_SECONDS) -> set[int]:
        """The pids of the other live drivers on this host that train runs of this store now."""
        with self._connect() as db:
            rows = db.execute(
                "SELECT status, host, pid, heartbeat FROM runs WHERE status = 'running' AND host = ? AND pid != ?",
                (socket.gethostname(), os.getpid()),
            ).fetchall()
        return {r["pid"] for r in rows if lease_is_live(r, lease)}

    def holder(self, run_id: str, lease: float = LEASE_SECONDS) -> str | None:
        """'host:pid' of the driver whose live lease holds the run, None when no live driver does."""
        with self._connect() as db:
            row = db.execute("SELECT status, host, pid, heartbeat FROM runs WHERE id = ?", (run_id,)).fetchone()
        return (
            f"{row['host']}:{row['pid']}" if row and row["status"] == "running" and lease_is_live(row, lease) else None
        )

    def runs(self, experiment: str) -> list[dict]:
        """Every run of the experiment: its row of `runs` (status, error, steps, diverged_at, timings, ...)
        with `config` decoded."""
        with self._connect() as db:
            rows = db.execute(
                "SELECT * FROM runs WHERE experiment = ? ORDER BY model, task, lr, seed", (experiment,)
            ).fetchall()
        out, damaged = [], []
        for r in rows:
            try:
                config = decode_config(r["config"])
            except (TypeError, ValueError):
                damaged.append(r["id"])
                continue
            if not (
                all(isinstance(r[k], str) for k in ("id", "model", "task", "status"))
                and isinstance(r["seed"], int)
                and _is_number(r["lr"])
            ):
                damaged.append(r["id"])
                continue
            out.append({**dict(r), "config": config})
        self._report_damaged(damaged, "configuration")
        return out

    def _metrics(self, text: str | None, run_id: str) -> dict:
        """Stored metrics, or {} with a StoreDamaged warning when they do not decode."""
        try:
            return _decode_metrics(text)
        except ValueError:
            self._report_damaged([run_id], "metrics")
            return {}

    def _report_damaged(self, run_ids: list, what: str, rows: bool = False) -> None:
        """Warn (StoreDamaged, one line) of the runs skipped because their `what` does not decode
        (`rows`: only those rows of the runs were skipped)."""
        if run_ids:
            count = len(set(run_ids))
            ids = ", ".join(map(str, sorted(set(run_ids), key=str)[:5])) + (" and more" if count > 5 else "")
            skipped = (
                f"the damaged {what} rows of {count} run(s)" if rows else f"{count} run(s) whose {what} is damaged"
            )
            self.skipped_runs.update(map(str, run_ids))
            self._warn(f"results store {self.path}: skipped {skipped} ({ids})")

    def _warn(self, message: str) -> None:
        if message not in self._warned:
            self._warned.add(message)
            warnings.warn(StoreDamaged(message), stacklevel=4)

    def plan(self, experiment: str) -> Plan | None:
        """The latest plan of the experiment (`Plan`); None for an
        experiment the store does not know (`statetrack run` records the plan before any run) and,
        with a StoreDamaged warning naming it, for a plan that does not decode (`decode_plan`)."""
        with self._connect() as db:
            row = db.execute("SELECT * FROM plans WHERE experiment = ?", (experiment,)).fetchone()
        if row is None:
            return None
        try:
            spec, runs = decode_plan(row["spec"], row["runs"])
            if row["scale"] is not None and not isinstance(row["scale"], str):
                raise ValueError("its scale is not a name")
        except (TypeError, ValueError) as error:
            problem = str(error) if str(error).startswith("its ") else "it is not JSON"
            self.skipped_plans.add(experiment)
            self._warn(
                f"results store {self.path}: skipped the plan of experiment {experiment!r}: {problem} "
                "(re-run the experiment to record it again)"
            )
            return None
        if row["scale"] is not None:
            spec.setdefault("scale", row["scale"])
        return Plan(experiment, spec, runs, row["created_at"])

    def experiments(self) -> list[str]:
        """Every experiment with runs or a plan (a grid killed before its first run has only a plan);
        a name that is not safe as a folder name (a store from elsewhere) is a one-line error."""
        with self._connect() as db:
            names = [
                r[0] for r in db.execute("SELECT experiment FROM runs UNION SELECT experiment FROM plans ORDER BY 1")
            ]
        for name in names:
            check_name(name, f"results store {self.path} holds an experiment whose name")
        return names

    def results(self, experiment: str, run_ids: set[str] | None = None) -> list[dict]:
        """One row per (finished run, evaluation variant, evaluation length): the `statetrack results --json` schema.

        Keys: model, task, task_params (the task's parameters, e.g. {"group": "A5"}; {} when none),
        [variant], dataset_size (N of a run on a fixed training set; only in the rows of runs that set it), seed,
        lr, length, accuracy, scaled_accuracy, sequence_accuracy (only where it was measured), diverged
        (whether the run's training loss became non-finite: its scores are then chance), run_id
        (what `statetrack.load_run` and `statetrack analyze` take), then
        each of the model's metrics at that length as a key of its own (e.g. iterations_median; a
        metric named like one of the keys above is written as metric_<name>).
        A row that scores an evaluation variant (`eval.variants` of the spec: the trained model on
        the task with some parameters changed, e.g. counting's phase-alignment patterns) has
        `variant` (its name), the variant's parameters in task_params and task "<task> [<variant>]",
        so tables and the selection read it as a task of its own.
        `run_ids`: only these runs (the runs of the experiment's plan, say)."""
        with self._connect() as db:
            rows = db.execute(
                "SELECT r.id, r.model, r.task, r.config,"
                " CASE WHEN json_valid(r.config) THEN json_extract(r.config, '$.train.dataset_size') END"
                " AS dataset_size,"
                " r.seed, r.lr, r.diverged_at, e.variant, e.length, e.accuracy, e.scaled_accuracy,"
                " e.sequence_accuracy, e.metrics"
                " FROM runs r JOIN evals e ON e.run_id = r.id"
                " WHERE r.experiment = ? AND r.status = 'done'"
                " ORDER BY r.model, r.task, e.variant, dataset_size, r.lr, r.seed, e.length",
                (experiment,),
            ).fetchall()
        out, damaged, bad_configs, configs = [], [], [], {}
        for r in rows:
            if run_ids is not None and r["id"] not in run_ids:
                continue
            try:
                if r["id"] not in configs:
                    configs[r["id"]] = decode_config(r["config"])
            except (TypeError, ValueError):
                bad_configs.append(r["id"])
                continue
            config = configs[r["id"]]
            try:
                metrics = _decode_metrics(r["metrics"])
                variants = (config.get("eval") or {}).get("variants") or {}
                overrides = (variants.get(r["variant"]) if isinstance(variants, dict) else None) or {}
                if not (isinstance(variants, dict) and isinstance(overrides, dict)):
                    raise ValueError("variants are not mappings")
            except (TypeError, ValueError):
                damaged.append(r["id"])
                continue
            if not (
                all(_is_number(r[k]) for k in ("length", "accuracy", "scaled_accuracy", "lr"))
                and isinstance(r["seed"], int)
                and all(isinstance(r[k], str) for k in ("model", "task", "variant"))
                and (r["sequence_accuracy"] is None or _is_number(r["sequence_accuracy"]))
                and (r["dataset_size"] is None or isinstance(r["dataset_size"], int))
            ):
                damaged.append(r["id"])
                continue
            params = {k: v for k, v in config["task"].items() if k != "name"}
            row = {"model": r["model"], "task": r["task"], "task_params": params}
            if r["variant"]:
                row.update(
                    task=variant_label(r["task"], r["variant"]),
                    variant=r["variant"],
                    task_params={**params, **overrides},
                )
            if r["dataset_size"] is not None:
                row["dataset_size"] = r["dataset_size"]
            row.update({k: r[k] for k in ("seed", "lr", "length", "accuracy", "scaled_accuracy")})
            if r["sequence_accuracy"] is not None:
                row["sequence_accuracy"] = r["sequence_accuracy"]
            row["diverged"] = r["diverged_at"] is not None
            row["run_id"] = r["id"]
            for name, value in metrics.items():
                row[f"metric_{name}" if name in RESULT_KEYS else name] = value
            out.append(row)
        self._report_damaged(bad_configs, "configuration")
        self._report_damaged(damaged, "evaluation")
        return out

    def curves(self, run_id: str) -> list[dict]:
        """The training curve: {step, loss, accuracy, metrics, [stage]} per point (metrics {} when none;
        stage, the curriculum stage the point's steps trained in, only for runs with a curriculum)."""
        with self._connect() as db:
            rows = db.execute(
                "SELECT step, loss, accuracy, metrics, stage FROM curves WHERE run_id = ? ORDER BY step", (run_id,)
            ).fetchall()
        out, damaged = [], False
        for r in rows:
            if not all(_is_number(r[k]) for k in ("step", "loss", "accuracy")):
                damaged = True
                continue
            out.append(
                {
                    **{k: r[k] for k in ("step", "loss", "accuracy")},
                    "metrics": self._metrics(r["metrics"], run_id),
                    **({} if r["stage"] is None else {"stage": r["stage"]}),
                }
            )
        self._report_damaged([run_id] if damaged else [], "training curve", rows=True)
        return out

    def evals(self, run_id: str, variant: str | None = "") -> list[dict]:
        """{length, accuracy, scaled_accuracy, samples, [variant], sequence_accuracy, metrics, position_accuracy}
        per evaluation length of `variant` ('' = the training task; None = every variant); variant is
        left out for the training task, sequence_accuracy and position_accuracy where they were not
        measured, and metrics is {} when there are none."""
        with self._connect() as db:
            rows = db.execute(
                "SELECT * FROM evals WHERE run_id = ? AND (? IS NULL OR variant = ?) ORDER BY variant, length",
                (run_id, variant, variant),
            ).fetchall()
        out, damaged = [], False
        for r in rows:
            try:
                position = None if r["position_accuracy"] is None else json.loads(r["position_accuracy"])
                if not (
                    all(_is_number(r[k]) for k in ("length", "accuracy", "scaled_accuracy", "samples"))
                    and isinstance(r["variant"], str)
                    and (
                        position is None
                        or isinstance(position, list)
                        and all(p is None or _is_number(p) for p in position)
                    )
                    and (r["sequence_accuracy"] is None or _is_number(r["sequence_accuracy"]))
                ):
                    raise ValueError("not an evaluation")
            except (TypeError, ValueError):
                damaged = True
                continue
            out.append(
                {
                    **{k: r[k] for k in ("length", "accuracy", "scaled_accuracy", "samples")},
                    **({"variant": r["variant"]} if r["variant"] else {}),
                    **({} if r["sequence_accuracy"] is None else {"sequence_accuracy": r["sequence_accuracy"]}),
                    **({} if position is None else {"position_accuracy": position}),
                    "metrics": self._metrics(r["metrics"], run_id),
                }
            )
        self._report_damaged([run_id] if damaged else [], "evaluation", rows=True)
        return out

    def traces(self, run_id: str) -> list[dict]:
        """{variant, length, examples} per traced evaluation (examples: `evaluate.trace`'s dicts)."""
        with self._connect() as db:
            rows = db.execute(
                "SELECT variant, length, data FROM traces WHERE run_id = ? ORDER BY variant, length", (run_id,)
            ).fetchall()
        out, damaged = [], False
        for r in rows:
            try:
                examples = json.loads(r["data"])
                if not isinstance(examples, list) or not examples or not all(map(_is_example, examples)):
                    raise ValueError("not a list of examples")
            except (TypeError, ValueError):
                damaged = True
                continue
            out.append({"variant": r["variant"], "length": r["length"], "examples": examples})
        self._report_damaged([run_id] if damaged else [], "trace", rows=True)
        return out
