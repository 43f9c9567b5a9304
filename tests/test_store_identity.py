"""A results store says what it is (SQLite's application id and user version): another application's
database, a newer schema, an earlier statetrack's layout or damaged pages are refused before anything
is written to the file or created beside it."""

import hashlib
import sqlite3
from pathlib import Path

import pytest

from cli_helpers import run_cli
from statetrack.errors import StatetrackError
from statetrack.store import APPLICATION_ID, SCHEMA_VERSION, Outcome, Plan, RunClaim, Store, StoreDamaged

# A store of an earlier statetrack: no application id, and evals and curves without the later columns.
EARLIER_STORE = """
CREATE TABLE runs (id TEXT PRIMARY KEY, experiment TEXT NOT NULL, model TEXT NOT NULL, task TEXT NOT NULL,
    seed INTEGER NOT NULL, lr REAL NOT NULL, config TEXT NOT NULL, git_rev TEXT, host TEXT, status TEXT NOT NULL,
    error TEXT, steps INTEGER, num_parameters INTEGER, train_seconds REAL, eval_seconds REAL, started_at REAL, finished_at REAL);
CREATE TABLE evals (run_id TEXT NOT NULL, length INTEGER NOT NULL, accuracy REAL NOT NULL, scaled_accuracy REAL NOT NULL,
    samples INTEGER NOT NULL, PRIMARY KEY (run_id, length));
CREATE TABLE curves (run_id TEXT NOT NULL, step INTEGER NOT NULL, loss REAL NOT NULL, accuracy REAL NOT NULL, PRIMARY KEY (run_id, step));
CREATE TABLE plans (experiment TEXT PRIMARY KEY, scale TEXT, spec TEXT NOT NULL, runs TEXT NOT NULL, created_at REAL);
INSERT INTO plans VALUES ('old', 'quick', '{}', '[]', 0);
"""


def _pragmas(path: Path) -> tuple[int, int]:
    db = sqlite3.connect(path)
    try:
        return db.execute("PRAGMA application_id").fetchone()[0], db.execute("PRAGMA user_version").fetchone()[0]
    finally:
        db.close()


def _state(folder: Path) -> dict:
    """Every file of the folder and the hash of its bytes."""
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir())}


def test_a_new_store_carries_the_application_id_and_schema_version(tmp_path):
    Store(tmp_path / "s.db")
    assert _pragmas(tmp_path / "s.db") == (APPLICATION_ID, SCHEMA_VERSION)


EARLIER = r"results store {path} was written by an earlier statetrack, in a layout this one does not read; " \
          r"re-run its experiments into a new results folder \(statetrack run EXPERIMENT --results-dir NEW_DIR\)$"


def _sql(path: Path, *statements: str) -> Path:
    connection = sqlite3.connect(path)
    for statement in statements:
        connection.execute(statement)
    connection.commit()
    connection.close()
    return path


@pytest.mark.parametrize("read_only", [False, True], ids=["write", "read-only"])
def test_a_store_of_an_earlier_layout_is_one_line_naming_what_to_do(tmp_path, read_only):
    """No upgrade: the store is refused in one line that names it and says to re-run, and is left byte-for-byte."""
    db = _sql(tmp_path / "old.db", *EARLIER_STORE.strip().split(";\n"))
    before = _state(tmp_path)
    with pytest.raises(StatetrackError, match=EARLIER.format(path=db)) as error:
        Store(db, read_only=read_only)
    assert "\n" not in str(error.value)
    assert _state(tmp_path) == before


def test_a_store_stamped_with_an_earlier_version_is_refused_too(tmp_path):
    """The stamp says statetrack, the version an earlier layout: a missing column is not taken for damage."""
    Store(tmp_path / "s.db")
    _sql(tmp_path / "s.db", "ALTER TABLE runs DROP COLUMN threads", "PRAGMA user_version = 0")
    before = _state(tmp_path)
    for read_only in (False, True):
        with pytest.raises(StatetrackError, match=EARLIER.format(path=tmp_path / "s.db")):
            Store(tmp_path / "s.db", read_only=read_only)
    assert _state(tmp_path) == before


def test_the_command_line_says_it_in_one_line(tmp_path, capsys):
    db = _sql(tmp_path / "statetrack.db", *EARLIER_STORE.strip().split(";\n"))
    for command in (["results", "old"], ["report", "old"], ["run", "demo", "--dry-run"]):
        code, _, err = run_cli(capsys, *command, "--results-dir", str(tmp_path))
        assert code == 2 and err.strip().count("\n") == 0 and f"{db} was written by an earlier statetrack" in err, (command, err)


def test_an_empty_sqlite_database_becomes_a_store(tmp_path):
    sqlite3.connect(tmp_path / "e.db").close()
    (tmp_path / "e.db").write_bytes(b"")
    Store(tmp_path / "e.db").set_plan(Plan("x", {}, []))
    assert _pragmas(tmp_path / "e.db") == (APPLICATION_ID, SCHEMA_VERSION)


FOREIGN = {
    # a `runs` table of its own in rollback-journal mode: switching it to WAL would rewrite its header
    "conflicting runs table": ["CREATE TABLE runs (id INTEGER PRIMARY KEY, distance REAL)", "INSERT INTO runs VALUES (1, 2.5)"],
    "other tables": ["CREATE TABLE notes (text TEXT)", "INSERT INTO notes VALUES ('hello')"],
    "its application id": ["PRAGMA application_id = 1234"],
    "our tables and one of its own": [*EARLIER_STORE.strip().split(";\n")[:-1], "CREATE TABLE users (name TEXT)"],
    "its user version": ["PRAGMA user_version = 3"],
}


@pytest.mark.parametrize("read_only", [False, True], ids=["write", "read-only"])
@pytest.mark.parametrize("statements", FOREIGN.values(), ids=FOREIGN)
def test_another_applications_database_is_refused_and_left_byte_for_byte(tmp_path, statements, read_only):
    db = tmp_path / "app.db"
    connection = sqlite3.connect(db)
    for statement in statements:
        connection.execute(statement)
    connection.commit()
    connection.close()
    before = _state(tmp_path)
    with pytest.raises(StatetrackError, match="is not a statetrack results store but an SQLite database of another application"):
        Store(db, read_only=read_only)
    assert _state(tmp_path) == before  # the same bytes, and no -wal, -shm or -journal file beside it


def test_a_store_of_a_newer_schema_is_refused(tmp_path):
    Store(tmp_path / "s.db")
    connection = sqlite3.connect(tmp_path / "s.db")
    connection.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    connection.close()
    before = _state(tmp_path)
    for read_only in (False, True):
        with pytest.raises(StatetrackError, match=f"schema version {SCHEMA_VERSION + 1}, written by a newer statetrack"):
            Store(tmp_path / "s.db", read_only=read_only)
    assert _state(tmp_path) == before


def _damage(path: Path, keep_pages: int = 2) -> None:
    data = bytearray(path.read_bytes())
    data[4096 * keep_pages:] = b"\x5a" * (len(data) - 4096 * keep_pages)
    path.write_bytes(bytes(data))


def _filled(path: Path) -> Store:
    store = Store(path)
    store.set_plan(Plan("big", {"description": "x" * 20000}, [{"id": str(i)} for i in range(500)]))
    return store


@pytest.mark.parametrize("read_only", [False, True], ids=["write", "read-only"])
def test_damaged_pages_are_refused_on_opening(tmp_path, read_only):
    _filled(tmp_path / "s.db")
    _damage(tmp_path / "s.db")
    before = _state(tmp_path)
    with pytest.raises(StatetrackError, match=r"results store .*s\.db is damaged \(") as error:
        Store(tmp_path / "s.db", read_only=read_only)
    assert "\n" not in str(error.value)
    assert _state(tmp_path) == before


def test_pages_damaged_after_opening_are_one_line_when_read(tmp_path):
    _filled(tmp_path / "s.db")
    store = Store(tmp_path / "s.db", read_only=True)
    _damage(tmp_path / "s.db")
    with pytest.raises(StatetrackError, match=r"s\.db is damaged \(database disk image is malformed\)"):
        store.plan("big")


def test_a_file_with_an_sqlite_header_and_nothing_else_is_refused(tmp_path):
    (tmp_path / "s.db").write_bytes(b"SQLite format 3\x00" + b"\xff" * 200)
    for read_only in (False, True):
        with pytest.raises(StatetrackError, match="is damaged"):
            Store(tmp_path / "s.db", read_only=read_only)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.db"]


def _store_with_a_result(tmp_path) -> Path:
    path = tmp_path / "s.db"
    store = Store(path)
    store.set_plan(Plan("demo", {"name": "demo"}, []))
    for run_id in ("a" * 16, "b" * 16):
        assert store.start_run(RunClaim(run_id, "demo", "LSTM", "parity", 0, 0.01, {"task": {"name": "parity"}}, "rev"))
        store.finish_run(run_id, Outcome([{"length": 8, "accuracy": 1.0, "scaled_accuracy": 1.0, "samples": 64}], [], 10, 100, 0.0, 0.0))
    return path


def _damaged(path, damage: str) -> Store:
    """The store at `path` after the SQL `damage`, opened to read."""
    db = sqlite3.connect(path)
    db.execute(damage)
    db.commit()
    db.close()
    return Store(path, read_only=True)


@pytest.mark.parametrize("damage, what", [
    ("UPDATE runs SET config = 'not json' WHERE id = 'aaaaaaaaaaaaaaaa'", "configuration"),
    ("UPDATE evals SET accuracy = 'high' WHERE run_id = 'aaaaaaaaaaaaaaaa'", "evaluation"),
    ("UPDATE evals SET metrics = '[1' WHERE run_id = 'aaaaaaaaaaaaaaaa'", "evaluation"),
    ("UPDATE runs SET config = '[1, 2]' WHERE id = 'aaaaaaaaaaaaaaaa'", "configuration"),
    ("UPDATE runs SET config = '{\"model\": {}}' WHERE id = 'aaaaaaaaaaaaaaaa'", "configuration"),  # no task
    ("UPDATE runs SET config = '{\"task\": {\"name\": 5}}' WHERE id = 'aaaaaaaaaaaaaaaa'", "configuration"),
    ("UPDATE runs SET config = '{\"task\": {\"name\": \"parity\"}, \"train\": 3}' WHERE id = 'aaaaaaaaaaaaaaaa'",
     "configuration"),
    ("UPDATE runs SET lr = 'fast' WHERE id = 'aaaaaaaaaaaaaaaa'", "configuration"),
    ("UPDATE runs SET seed = 'zero' WHERE id = 'aaaaaaaaaaaaaaaa'", "configuration"),
    ("UPDATE runs SET config = '{\"task\": {\"name\": \"p\"}, \"eval\": {\"variants\": [1]}}'"
     " WHERE id = 'aaaaaaaaaaaaaaaa'", "evaluation"),
    ("UPDATE evals SET sequence_accuracy = 'all' WHERE run_id = 'aaaaaaaaaaaaaaaa'", "evaluation"),
])
def test_rows_that_do_not_decode_are_skipped_and_named(tmp_path, damage, what):
    store = _damaged(_store_with_a_result(tmp_path), damage)
    with pytest.warns(StoreDamaged, match=f"skipped 1 run.s. whose {what} is damaged .aaaaaaaaaaaaaaaa.") as caught:
        rows = store.results("demo") if what == "evaluation" else store.runs("demo")
    assert len(caught) == 1 and [r.get("run_id", r.get("id")) for r in rows] == ["b" * 16]
    assert store.skipped_runs == {"a" * 16}


@pytest.mark.parametrize("damage, reader, what", [
    ("UPDATE curves SET loss = 'low' WHERE step = 1", "curves", "training curve"),
    ("UPDATE evals SET position_accuracy = '{' WHERE length = 8", "evals", "evaluation"),
    ("UPDATE evals SET length = 'long' WHERE length = 8", "evals", "evaluation"),
    ("UPDATE traces SET data = '{\"a\": 1}'", "traces", "trace"),
    ("UPDATE traces SET data = 'not json'", "traces", "trace"),
])
def test_damaged_rows_of_a_run_are_skipped_and_the_rest_read(tmp_path, damage, reader, what):
    """curves, evals and traces of one run: a row that does not decode is skipped with one warning
    naming the run, and the run's other rows are read."""
    store = Store(tmp_path / "s.db")
    run_id = "c" * 16
    assert store.start_run(RunClaim(run_id, "demo", "LSTM", "parity", 0, 0.01, {"task": {"name": "parity"}}, "rev"))
    store.finish_run(run_id, Outcome([{"length": n, "accuracy": 1.0, "scaled_accuracy": 1.0, "samples": 4,
                               "position_accuracy": [1.0], "traces": [{"x": 1}]} for n in (8, 16)], [{"step": s, "loss": 0.5, "accuracy": 0.5} for s in (1, 2)], 2, 100, 0.0, 0.0))
    store = _damaged(tmp_path / "s.db", damage)
    with pytest.warns(StoreDamaged, match=f"skipped the damaged {what} rows of 1 run.s. .{run_id}.") as caught:
        rows = getattr(store, reader)(run_id)
        getattr(store, reader)(run_id)  # a second read: the same damage is reported once
    assert len(caught) == 1
    assert len(rows) == (0 if damage.startswith("UPDATE traces") else 1)


@pytest.mark.parametrize("damage, problem", [
    ("UPDATE plans SET spec = '[1, 2]'", "its spec is not a mapping"),
    ("UPDATE plans SET spec = 'nonsense'", "it is not JSON"),
    ("UPDATE plans SET runs = '{\"id\": 1}'", "its list of runs is not one of"),
    ("UPDATE plans SET runs = '[{\"id\": \"x\"}]'", "its list of runs is not one of"),
    ("UPDATE plans SET scale = X'0102'", "its scale is not a name"),
])
def test_a_damaged_plan_is_skipped_and_named(tmp_path, damage, problem):
    store = _damaged(_store_with_a_result(tmp_path), damage)
    with pytest.warns(StoreDamaged, match=f"skipped the plan of experiment 'demo': {problem}"):
        assert store.plan("demo") is None
    assert store.skipped_plans == {"demo"}


def test_a_dropped_table_is_a_damaged_store(tmp_path):
    path = _store_with_a_result(tmp_path)
    db = sqlite3.connect(path)
    db.execute("DROP TABLE evals")
    db.commit()
    db.close()
    with pytest.raises(StatetrackError, match="is damaged .no such table: evals."):
        Store(path, read_only=True).results("demo")


def test_a_store_locked_by_another_writer_is_one_line_after_a_bounded_wait(tmp_path, monkeypatch):
    import statetrack.store as store_module

    path = _store_with_a_result(tmp_path)
    monkeypatch.setattr(store_module, "BUSY_SECONDS", 0.2)
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        with pytest.raises(StatetrackError, match=r"is locked by another process \(waited 0.2 s\); try again"):
            Store(path).set_plan(Plan("other", {"name": "other"}, []))
    finally:
        holder.execute("ROLLBACK")
        holder.close()


@pytest.mark.parametrize("read_only", [False, True])
def test_a_fifo_a_device_or_a_folder_is_not_taken_for_a_store(tmp_path, read_only):
    import os

    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "folder").mkdir()
    for path, kind in ((tmp_path / "fifo", "a FIFO"), (Path("/dev/null"), "a device"), (tmp_path / "folder", "a folder")):
        with pytest.raises(StatetrackError, match=f"results store {path} is {kind}, not a file"):
            Store(path, read_only=read_only)
    assert not Path("/dev/null-journal").exists() and not Path("/dev/null-wal").exists()


def test_a_database_holding_only_a_view_is_another_applications(tmp_path):
    path = tmp_path / "views.db"
    db = sqlite3.connect(path)
    db.execute("CREATE VIEW answer AS SELECT 42 AS value")
    db.commit()
    db.close()
    before = path.read_bytes()
    with pytest.raises(StatetrackError, match="is not a statetrack results store but an SQLite database of another application"):
        Store(path)
    assert path.read_bytes() == before


# ---- another application's database in WAL mode: judged from its files' bytes, never opened -------------
def _wal_database(folder: Path, statements: list[str], shm: bool = True) -> Path:
    """app.db with its -wal (and -shm) files as a live connection of another application leaves them:
    copied while the connection is open, so the newest page 1 lives in the -wal file."""
    import shutil

    source = folder / "source" / "app.db"
    source.parent.mkdir()
    connection = sqlite3.connect(source)
    connection.execute("PRAGMA journal_mode=WAL")
    connection.execute("PRAGMA wal_autocheckpoint=0")  # every page stays in the -wal file
    for statement in statements:
        connection.execute(statement)
        connection.commit()
    (folder / "app").mkdir()
    for end in ("", "-wal", "-shm") if shm else ("", "-wal"):
        shutil.copy2(source.with_name("app.db" + end), folder / "app" / ("app.db" + end))
    connection.close()
    return folder / "app" / "app.db"


def _files(folder: Path) -> dict:
    """Every file of the folder: the hash of its bytes and its modification time."""
    return {p.name: (hashlib.sha256(p.read_bytes()).hexdigest(), p.stat().st_mtime_ns) for p in sorted(folder.iterdir())}


WAL_FOREIGN = {
    "its application id": ["CREATE TABLE notes (text TEXT)", "PRAGMA application_id = 1234"],
    "its tables": ["CREATE TABLE notes (text TEXT)", "INSERT INTO notes VALUES ('hello')"],
    "our tables and one of its own": [*EARLIER_STORE.strip().split(";\n")[:-1], "CREATE TABLE users (name TEXT)"],
    "its user version": ["PRAGMA user_version = 3"],
}


@pytest.mark.parametrize("shm", [True, False], ids=["with-shm", "without-shm"])
@pytest.mark.parametrize("statements", WAL_FOREIGN.values(), ids=WAL_FOREIGN)
@pytest.mark.parametrize("command", ["report", "results", "run"])
def test_another_applications_wal_database_is_refused_from_its_bytes(tmp_path, monkeypatch, capsys, statements, shm, command):
    database = _wal_database(tmp_path, statements, shm=shm)
    assert (database.with_name("app.db-wal")).stat().st_size > 0
    spec = tmp_path / "exp.yaml"
    spec.write_text("name: exp\ntask: {name: modadd, m: 3}\nmodels: [{name: lstm}]\nmodel_defaults: {d_model: 8}\n"
                    "lrs: [0.01]\nseeds: [0]\ntrain: {steps: 2, min_length: 2, max_length: 5}\neval: {lengths: [5]}\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("statetrack.experiments.runner.make_backend", None)  # nothing may train
    before = _files(database.parent)
    argv = {"report": ["report", "exp"], "results": ["results", "exp"], "run": ["run", str(spec), "--no-progress"]}
    code, _, err = run_cli(capsys, *argv[command], "--store", str(database))
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert f"statetrack: error: {database} is not a statetrack results store but an SQLite database of another application" in err
    assert _files(database.parent) == before  # the same bytes and times, and no file created beside them


def test_an_earlier_statetrack_store_in_wal_mode_is_named_from_its_bytes(tmp_path):
    database = _wal_database(tmp_path, EARLIER_STORE.strip().split(";\n"))
    before = _files(database.parent)
    for read_only in (False, True):
        with pytest.raises(StatetrackError, match=EARLIER.format(path=database)):
            Store(database, read_only=read_only)
    assert _files(database.parent) == before


@pytest.mark.parametrize("statements", [
    ["PRAGMA application_id = 77"],
    ["CREATE TABLE a (x)", "PRAGMA application_id = 5", "PRAGMA application_id = 9", "PRAGMA user_version = 2"],
    ["CREATE TABLE a (x)", "INSERT INTO a VALUES (1)", "DROP TABLE a", "PRAGMA application_id = -3"],
], ids=["one commit", "several commits", "negative id"])
def test_page_one_is_read_as_sqlite_reads_it(tmp_path, statements):
    """The newest page 1 read from the files' bytes against SQLite's own answer (on a copy)."""
    import shutil

    from statetrack.sqlite_header import read_page1

    database = _wal_database(tmp_path, statements)
    page1 = read_page1(database)
    assert page1 is not None and page1.from_wal
    copy = tmp_path / "copy"
    shutil.copytree(database.parent, copy)
    db = sqlite3.connect(copy / "app.db")
    expected = (db.execute("PRAGMA application_id").fetchone()[0], db.execute("PRAGMA user_version").fetchone()[0],
                tuple(db.execute("SELECT type, name FROM sqlite_master ORDER BY rowid")))
    db.close()
    assert (page1.application_id, page1.user_version, page1.schema) == expected


def test_a_new_store_still_opens_beside_its_wal_file(tmp_path):
    """A store another driver keeps open (its stamps may be only in the -wal file) is read, not refused."""
    import shutil

    source = tmp_path / "s.db"
    store = Store(source)
    store.set_plan(Plan("x", {"name": "x"}, []))
    holder = sqlite3.connect(source)
    holder.execute("PRAGMA wal_autocheckpoint=0")
    holder.execute("BEGIN")
    holder.execute("SELECT count(*) FROM runs").fetchone()  # a reader keeps the -wal file from being checkpointed away
    (tmp_path / "copy").mkdir()
    for end in ("", "-wal", "-shm"):
        if source.with_name("s.db" + end).exists():
            shutil.copy2(source.with_name("s.db" + end), tmp_path / "copy" / ("s.db" + end))
    holder.rollback()
    holder.close()
    assert Store(tmp_path / "copy" / "s.db", read_only=True).plan("x").spec == {"name": "x"}


@pytest.mark.parametrize("read_only", [False, True], ids=["write", "read-only"])
@pytest.mark.parametrize("end", ["-wal", "-shm", "-journal"])
@pytest.mark.parametrize("kind", ["a FIFO", "a folder"])
def test_a_fifo_or_a_folder_where_sqlite_keeps_a_companion_file_is_one_line(tmp_path, read_only, end, kind):
    """SQLite would block opening a FIFO there (a hang) or fail on a folder (a 'disk I/O error')."""
    import os

    Store(tmp_path / "s.db").set_plan(Plan("x", {"name": "x"}, []))
    companion = tmp_path / f"s.db{end}"
    os.mkfifo(companion) if kind == "a FIFO" else companion.mkdir()
    with pytest.raises(StatetrackError, match=f"{companion} \\(where SQLite keeps its {end[1:]} file\\) is {kind}, not a file"):
        Store(tmp_path / "s.db", read_only=read_only)
