"""Drivers sharing one store: a run is claimed (host, pid, heartbeat) before it is trained, other
drivers skip it while the lease is live and take it over when it lapses; SIGTERM stops a driver's
pool workers with it."""

import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from statetrack.store import Outcome, RunClaim, Store

CONFIG = {"task": {"name": "parity"}}


def _claim(store, run_id="r1", **kwargs):
    return store.start_run(RunClaim(run_id, "exp", "LSTM", "parity", 0, 1e-3, CONFIG, "abc"), **kwargs)


def _set(db: Path, run_id: str, **columns):
    with sqlite3.connect(db) as c:
        c.execute(f"UPDATE runs SET {', '.join(f'{k} = ?' for k in columns)} WHERE id = ?", (*columns.values(), run_id))


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_a_claim_is_refused_while_another_driver_holds_a_live_lease(tmp_path):
    db = tmp_path / "s.db"
    store = Store(db)
    assert _claim(store)
    row = store.runs("exp")[0]
    assert (row["status"], row["host"], row["pid"]) == ("running", os.uname().nodename, os.getpid())
    # held by a live driver elsewhere: refused, and nothing is written
    _set(db, "r1", host="node-7", pid=4242, heartbeat=time.time())
    assert not _claim(store) and store.holder("r1") == "node-7:4242"
    assert store.runs("exp")[0]["host"] == "node-7"
    # that driver stopped renewing: free after the lease
    _set(db, "r1", heartbeat=time.time() - 200)
    assert store.holder("r1") is None and _claim(store)
    # a short lease lapses sooner
    _set(db, "r1", host="node-7", heartbeat=time.time() - 5)
    assert not _claim(store, lease=60) and _claim(store, lease=2)


def test_a_dead_driver_on_this_host_frees_its_runs_at_once(tmp_path):
    db = tmp_path / "s.db"
    store = Store(db)
    _claim(store)
    _set(db, "r1", pid=os.getppid(), heartbeat=time.time())  # a live process here
    assert not _claim(store)
    _set(db, "r1", pid=_dead_pid(), heartbeat=time.time())  # a process that has exited
    assert _claim(store)


def test_done_and_failed_runs_are_not_claimed_unless_failed_ones_are_retried(tmp_path):
    store = Store(tmp_path / "s.db")
    _claim(store, "a")
    store.finish_run("a", Outcome([], [], 1, 10, 0.1, 0.1))
    assert not _claim(store, "a")
    _claim(store, "b")
    store.fail_run("b", "boom")
    assert not _claim(store, "b", retry_failed=False) and _claim(store, "b", retry_failed=True)


def test_leases_are_renewed_and_released_by_their_holder_only(tmp_path):
    db = tmp_path / "s.db"
    store = Store(db)
    _claim(store, "mine")
    _claim(store, "theirs")
    _set(db, "mine", heartbeat=1.0)
    _set(db, "theirs", host="node-7", heartbeat=2.0)
    store.renew_leases(["mine", "theirs"])
    beats = {r["id"]: r["heartbeat"] for r in store.runs("exp")}
    assert beats["mine"] > time.time() - 60 and beats["theirs"] == 2.0
    store.release_leases(["mine", "theirs"])
    beats = {r["id"]: r["heartbeat"] for r in store.runs("exp")}
    assert beats["mine"] is None and beats["theirs"] == 2.0


def _driver(spec, results, *extra):
    command = [sys.executable, "-m", "statetrack.cli", "run", str(spec), "--results-dir", str(results), "--no-progress", *extra]
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, "OMP_NUM_THREADS": "1"}, start_new_session=True)


def _trained(output: str) -> list[str]:
    """The runs a driver trained itself (`[i/n] model on task, lr, seed` lines of the in-process backend)."""
    return re.findall(r"^\[\d+/\d+\] (.*)$", output, flags=re.M)


def test_two_drivers_share_an_experiment_and_train_each_run_once(tiny_spec, tmp_path):
    spec = tiny_spec(steps=100, seeds="[0, 1, 2]")  # 6 runs
    results = tmp_path / "r"
    first = _driver(spec, results, "--workers", "1")
    second = _driver(spec, results, "--workers", "1")
    outputs = [p.communicate(timeout=600)[0] for p in (first, second)]
    assert [p.returncode for p in (first, second)] == [0, 0], outputs
    trained = [_trained(o) for o in outputs]
    assert sorted(trained[0] + trained[1]) == sorted(set(trained[0] + trained[1])) and len(trained[0] + trained[1]) == 6, trained
    assert trained[0] and trained[1], "both drivers should have trained some runs"
    rows = Store(results / "statetrack.db", read_only=True).runs("tiny")
    assert len(rows) == 6 and all(r["status"] == "done" for r in rows)
    by_pid = {p.pid: len(t) for p, t in zip((first, second), trained)}
    assert {pid: sum(r["pid"] == pid for r in rows) for pid in by_pid} == by_pid  # each row names the driver that trained it


def _rows(db: Path) -> list[tuple]:
    try:
        with sqlite3.connect(db, timeout=1) as c:
            return c.execute("SELECT id, status, pid FROM runs").fetchall()
    except sqlite3.Error:
        return []


def test_a_killed_drivers_run_is_taken_over_by_the_other_driver(tiny_spec, tmp_path):
    spec = tiny_spec(steps=600, seeds="[0, 1]")  # 4 runs of a few seconds each
    results = tmp_path / "r"
    db = results / "statetrack.db"
    doomed = _driver(spec, results, "--workers", "1", "--lease", "2")
    deadline = time.time() + 120
    while not any(status == "running" and pid == doomed.pid for _, status, pid in _rows(db)):
        assert time.time() < deadline and doomed.poll() is None, "the first driver never started a run"
        time.sleep(0.05)
    held = next(run_id for run_id, status, pid in _rows(db) if status == "running" and pid == doomed.pid)
    survivor = _driver(spec, results, "--workers", "1", "--lease", "2")
    time.sleep(1.0)
    os.killpg(doomed.pid, signal.SIGKILL)
    doomed.wait()
    output = survivor.communicate(timeout=600)[0]
    assert survivor.returncode == 0, output
    assert "taking over" in output or held in {r for r, s, p in _rows(db) if p == survivor.pid}
    rows = {run_id: (status, pid) for run_id, status, pid in _rows(db)}
    assert len(rows) == 4 and all(status == "done" for status, _ in rows.values()), rows
    assert rows[held] == ("done", survivor.pid)


def _children(pid: int) -> set[int]:
    found = set()
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            found.update(int(c) for c in (task / "children").read_text().split())
        except OSError:
            pass
    return found


def test_sigterm_stops_the_pool_workers_too(tiny_spec, tmp_path):
    spec = tiny_spec(steps=5000, seeds="[0, 1]")
    results = tmp_path / "r"
    driver = _driver(spec, results, "--workers", "2")
    deadline = time.time() + 120
    while sum(status == "running" for _, status, _ in _rows(results / "statetrack.db")) < 2:
        assert time.time() < deadline and driver.poll() is None, "the runs never started"
        time.sleep(0.1)
    workers = _children(driver.pid)
    assert workers
    driver.send_signal(signal.SIGTERM)
    output = driver.communicate(timeout=60)[0]
    assert driver.returncode == 143 and "interrupted" in output
    deadline = time.time() + 30
    while any(Path(f"/proc/{pid}").exists() and "zombie" not in Path(f"/proc/{pid}/status").read_text() for pid in workers):
        assert time.time() < deadline, "pool workers outlived their driver"
        time.sleep(0.1)
    # its claims were released: a new driver takes the runs at once
    rows = Store(results / "statetrack.db", read_only=True).runs("tiny")
    assert all(r["heartbeat"] is None for r in rows if r["status"] == "running")


def _descendants(pid: int) -> set[int]:
    found, todo = set(), [pid]
    while todo:
        for child in _children(todo.pop()) - found:
            found.add(child)
            todo.append(child)
    return found


def _live(pids) -> set[int]:
    """The pids that still name a running process (not gone, not a zombie waiting to be reaped)."""
    live = set()
    for pid in pids:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if state not in ("Z", "X"):
            live.add(pid)
    return live


def _kill_9_once_training(spec, results, *extra, settle: float = 0.0, grace: float = 10, check=None) -> None:
    """Start a driver on two long runs, wait until both train (their checkpoints exist), kill -9 the
    driver alone and assert that every process it had started is gone within `grace` seconds;
    `check(pids)` looks at them first."""
    driver = _driver(spec, results, *extra)
    try:
        deadline = time.time() + 180
        while len(list((results / "tiny" / "checkpoints").glob("*.pt"))) < 2:  # both workers are training
            assert time.time() < deadline and driver.poll() is None, "the runs never started"
            time.sleep(0.1)
        time.sleep(settle)
        started = _descendants(driver.pid)
        assert len(started) >= 2, started
        if check:
            check(_live(started))
        os.kill(driver.pid, signal.SIGKILL)
        driver.wait()
        deadline = time.time() + grace
        while _live(started):
            assert time.time() < deadline, f"processes outlived their driver: {sorted(_live(started))}"
            time.sleep(0.1)
    finally:
        try:
            os.killpg(driver.pid, signal.SIGKILL)  # the test's own process group (its session): any survivor
        except ProcessLookupError:
            pass


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads the process tree from /proc")
def test_kill_9_of_a_driver_leaves_none_of_its_processes_alive(tiny_spec, tmp_path):
    """kill -9 of the driver alone (its workers are in its process group and are not signalled): the
    pool workers, busy training, and every other process it started are gone within seconds, so
    none goes on to write a checkpoint that a driver taking the run over also writes."""
    _kill_9_once_training(tiny_spec(steps=100000, seeds="[0, 1]"), tmp_path / "r", "--workers", "2")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads the process tree from /proc")
def test_kill_9_of_a_driver_with_a_local_ray_instance_leaves_none_of_rays_processes(tiny_spec, tmp_path):
    """The same with `--backend ray` and no address: the local Ray instance the driver started (GCS,
    raylet, its agents, the workers) is gone within seconds of the driver's kill -9."""
    pytest.importorskip("ray")

    def rays_own(pids):
        names = {Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0] for pid in pids}
        assert any(b"raylet" in n for n in names) and any(n.startswith(b"ray::") for n in names), names

    # settle: the reaper has seen every Ray process
    _kill_9_once_training(tiny_spec(steps=100000, seeds="[0, 1]"), tmp_path / "r", "--backend", "ray", "--workers", "2",
                          settle=1.0, grace=15, check=rays_own)


def test_a_worker_that_is_not_the_drivers_child_watches_for_it():
    """The watchdog (a Ray worker's case, whose parent is Ray's): a process told to die with another
    that is not its parent ends within seconds of that one's kill -9."""
    driver = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True)
    code = ("import sys, time; from statetrack.experiments import worker; "
            "worker.die_with((worker.socket.gethostname(), int(sys.argv[1]), worker.process_start(int(sys.argv[1])))); "
            "print('watching', flush=True); time.sleep(600)")
    watcher = subprocess.Popen([sys.executable, "-c", code, str(driver.pid)], stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        assert watcher.stdout.readline().strip() == "watching"
        time.sleep(1.5)
        assert watcher.poll() is None  # its driver is alive: it goes on
        os.kill(driver.pid, signal.SIGKILL)
        driver.wait()
        assert watcher.wait(timeout=10) == -signal.SIGKILL
    finally:
        for process in (driver, watcher):
            if process.poll() is None:
                process.kill()
                process.wait()


def test_creating_a_store_waits_out_a_lock(tmp_path, monkeypatch):
    """Two drivers creating one store at once: SQLite may answer "database is locked" to the second
    without waiting; creation tries again instead of failing."""
    import statetrack.store as store_module

    real, calls = sqlite3.connect, []

    def flaky(*args, **kwargs):
        calls.append(args)
        if len(calls) <= 2:
            raise sqlite3.OperationalError("database is locked")
        return real(*args, **kwargs)

    monkeypatch.setattr(store_module.sqlite3, "connect", flaky)
    Store(tmp_path / "s.db")
    assert len(calls) == 3 and (tmp_path / "s.db").is_file()
