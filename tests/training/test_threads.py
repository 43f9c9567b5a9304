"""Torch threads: a run in the driver's process takes the cores other processes leave free (one beside
another driver), measured from /proc; every run records the thread count it trained with, since a
run is bit-identical at a fixed thread count only."""

import subprocess
import sys

import pytest
import torch

from cli_helpers import run_cli
from statetrack.experiments import backends
from statetrack.experiments.spec import expand, load_spec
from statetrack.store import Store


@pytest.fixture
def threads():
    """torch's thread count, restored afterwards."""
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="measured from /proc/stat")
def test_free_cores_counts_the_cores_other_processes_keep_busy():
    cores = backends.available_cores()
    assert 0 <= backends.free_cores() <= cores
    spin = "import time\nend = time.time() + 20\nwhile time.time() < end: pass"
    busy = [subprocess.Popen([sys.executable, "-c", spin]) for _ in range(cores)]
    try:
        assert backends.free_cores(window=0.5) < 0.5  # every core is taken by another process
    finally:
        for process in busy:
            process.kill()
            process.wait()


@pytest.mark.parametrize("free, shared, expected", [(0.2, False, 1), (1.6, False, 2), (7.5, False, 3), (7.5, True, 1)])
def test_an_in_process_run_takes_the_free_cores(free, shared, expected, threads, tmp_path, monkeypatch):
    """At least one thread, at most the free cores rounded and the threads torch started with (3
    here, as OMP_NUM_THREADS=3 would give); one beside another driver, whatever is free."""
    torch.set_num_threads(3)
    backend = backends.InProcessBackend(tmp_path, "cpu", progress=False)
    monkeypatch.setattr(backends, "free_cores", lambda window=0.1: free)
    backend.share_cores(shared)
    assert torch.get_num_threads() == expected


@pytest.mark.parametrize("workers", ["1", "2"])
def test_every_run_records_its_thread_count(workers, tiny_spec, tmp_path, capsys, threads, monkeypatch):
    """In the driver (free cores taken as 1.2: one thread) and on a pool of two workers (one core each
    on a 2-core machine): the store's `threads` is what the run trained with; the run ids do not
    depend on it."""
    monkeypatch.setattr(backends, "free_cores", lambda window=0.1: 1.2)
    spec = tiny_spec(steps=5, seeds="[0]")
    results = tmp_path / "r"
    code, out, err = run_cli(capsys, "run", str(spec), "--results-dir", str(results), "--no-progress", "--workers", workers)
    assert code == 0, err
    rows = Store(results / "statetrack.db", read_only=True).runs("tiny")
    expected = 1 if workers == "1" else max(1, backends.available_cores() // 2)
    assert len(rows) == 2 and all(row["status"] == "done" and row["threads"] == expected for row in rows)
    assert {row["id"] for row in rows} == {run.id for run in expand(load_spec(str(spec)))}
