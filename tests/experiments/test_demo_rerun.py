"""The demo's committed figures are what its runs give, bit for bit, on the host type that measured
them: two of its runs (DeltaNet [-1,1], seeds 0 and 2, which fit and stop early) are trained again
from the spec, one torch thread each as `reproduce`'s pool gives them, and every evaluation row must
equal the snapshot's. Another CPU or another set of vector kernels moves the last digits
(docs/scaling.md, Repeatability), so on such a host the test is skipped and says why."""

import json

import pytest
import torch

from statetrack.experiments.runner import run_experiment
from statetrack.experiments.spec import resolve
from statetrack.options import RunOptions
from statetrack.paths import snapshot_file
from statetrack.results.book import machine
from statetrack.store import Store

SNAPSHOT = snapshot_file("demo", "quick")
MODEL = "DeltaNet [-1,1]"
SEEDS = [0, 2]
FIGURES = ("accuracy", "scaled_accuracy", "sequence_accuracy", "samples")


def _same_host(snapshot: dict) -> str | None:
    """Why this host cannot repeat the snapshot's digits, or None when it is of the snapshot's type."""
    measured, here = snapshot["parts"][-1]["machine"], machine()
    for key in ("cpu", "cpu_capability", "torch"):
        if measured.get(key) != here[key]:
            return f"the demo's snapshot was measured with {key} {measured.get(key)!r}, this host has {here[key]!r}"
    return None


def test_two_demo_runs_repeat_their_snapshot_rows_bit_for_bit(tmp_path, monkeypatch):
    snapshot = json.loads(SNAPSHOT.read_text())
    why = _same_host(snapshot)
    if why:
        pytest.skip(why)
    models = "models=[{name: deltanet, eig_range: '[-1,1]', num_heads: 1}]"
    experiment = resolve("demo", "quick", [models, f"seeds={SEEDS}"], name="demo")
    planned = {(p["model"], p["seed"]): p["id"] for p in snapshot["plan"]}
    assert [r.id for r in experiment.runs] == [planned[(MODEL, s)] for s in SEEDS]  # the same runs, by id
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # what each of reproduce's pool workers trains with
    try:
        monkeypatch.chdir(tmp_path)
        run_experiment(experiment, tmp_path, RunOptions(workers=1, progress=False), log=lambda *_: None)
    finally:
        torch.set_num_threads(threads)
    store = Store(tmp_path / "statetrack.db")
    steps = {r["seed"]: r["steps"] for r in store.runs("demo")}
    assert steps == {r["seed"]: r["steps"] for r in snapshot["runs"] if r["model"] == MODEL and r["seed"] in SEEDS}

    def rows(results):
        return sorted(
            (r["seed"], r["length"], *(r.get(k) for k in FIGURES))
            for r in results
            if r["model"] == MODEL and r["seed"] in SEEDS
        )

    again, committed = rows(store.results("demo")), rows(snapshot["results"])
    assert len(again) == len(committed) == 2 * 6 and again == committed
