"""Sweeps: the selection settings' errors, the local and Ray backends agree run for run, plans and
missing runs, the index page, TensorBoard events, and the clear errors for missing optional packages."""

import socket
import sqlite3
import sys
import textwrap

import pytest

from statetrack.errors import StatetrackError
from statetrack.experiments import expand, load_spec
from statetrack.experiments.runner import RunOptions, run_experiment
from statetrack.experiments.spec import resolve
from statetrack.results.report import write_index, write_report
from statetrack.results.scoring import score_store
from statetrack.store import Plan, Store
from statetrack.training.loggers import tensorboard_dir

# 2 models x 2 lrs x 2 seeds, a few steps each; curves logged every 5 steps.
GRID_SPEC = """
name: grid
description: a 2 x 2 x 2 grid for backend tests
task: {name: modadd, m: 3}
models:
  - {name: deltanet, eig_range: "[-1,1]", num_heads: 1}
  - {name: lstm}
model_defaults: {d_model: 8}
train: {steps: 15, batch_size: 8, min_length: 2, max_length: 5, early_stop_loss: null, device: cpu, log_every: 5}
eval: {lengths: [5, 9], samples: 64}
lrs: [1.0e-2, 3.0e-3]
seeds: [0, 1]
selection: {lr: best_max, seeds: max}
"""


@pytest.mark.parametrize("override, message", [
    ("selection.lr=best", "unknown selection.lr 'best'; expected one of: best_mean, best_max"),
    ("selection.seeds=median", "unknown selection.seeds 'median'; expected one of: mean, max"),
    ("selection.criterion=loss", "unknown selection.criterion 'loss'; expected one of: mean_scaled, extrapolation"),
    ("selection.rule=x", "selection: unknown key 'rule'; expected one of: lr, seeds, criterion, metric, threshold"),
    ("selection.threshold=2", "selection.threshold must be a number in (0, 1], got 2"),
])
def test_selection_errors_name_valid_values(tmp_path, override, message):
    path = tmp_path / "grid.yaml"
    path.write_text(textwrap.dedent(GRID_SPEC))
    with pytest.raises(StatetrackError) as error:
        load_spec(str(path), overrides=[override])
    assert str(error.value).split(": ", 1)[1] == message  # after "experiment 'NAME': "


def test_selection_is_not_part_of_run_ids(tmp_path):
    path = tmp_path / "grid.yaml"
    path.write_text(textwrap.dedent(GRID_SPEC))
    a = expand(load_spec(str(path)))
    b = expand(load_spec(str(path), overrides=["selection.criterion=extrapolation"], name="grid"))
    assert [r.id for r in a] == [r.id for r in b] and len(a) == 8
    assert len(expand(load_spec(str(path), overrides=["seeds=[0, 0, 1]"]))) == 8  # a repeated value is one run


# ---- the same grid through both backends ---------------------------------------------------------
@pytest.fixture(scope="module")
def ray_instance():
    ray = pytest.importorskip("ray")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, object_store_memory=80 * 1024 * 1024)
    yield ray
    ray.shutdown()


@pytest.fixture(scope="module")
def grids(tmp_path_factory, ray_instance):
    """The grid run once through the local pool and once through Ray (with TensorBoard events)."""
    root = tmp_path_factory.mktemp("grids")
    spec = root / "grid.yaml"
    spec.write_text(textwrap.dedent(GRID_SPEC))
    logs = {"local": [], "ray": []}
    run_experiment(resolve(str(spec)), root / "local", RunOptions(workers=2, backend="local", progress=False), log=logs["local"].append)
    experiment = resolve(str(spec))
    run_experiment(experiment, root / "ray", RunOptions(backend="ray", tensorboard=root / "tb", progress=False), log=logs["ray"].append)
    runs = experiment.runs
    return {"root": root, "spec": spec, "runs": runs, "logs": logs, "ray_instance": ray_instance,
            "local": Store(root / "local" / "statetrack.db"), "ray": Store(root / "ray" / "statetrack.db")}


def _figures(db):
    with sqlite3.connect(db) as c:
        evals = c.execute("SELECT run_id, length, accuracy, scaled_accuracy FROM evals ORDER BY run_id, length").fetchall()
        curves = c.execute("SELECT run_id, step, loss, accuracy FROM curves ORDER BY run_id, step").fetchall()
        runs = c.execute("SELECT id, status, steps, num_parameters FROM runs ORDER BY id").fetchall()
    return runs, evals, curves


def test_local_and_ray_stores_hold_the_same_runs_and_figures(grids):
    assert "local pool, 2 workers x 1 threads" in grids["logs"]["local"][0]
    assert "ray, cluster of 2 CPUs" in grids["logs"]["ray"][0]
    local, ray = _figures(grids["local"].path), _figures(grids["ray"].path)
    assert len(local[0]) == 8 and all(status == "done" for _, status, _, _ in local[0])
    assert {r[0] for r in local[0]} == {r.id for r in grids["runs"]}
    assert local[0] == ray[0]  # same ids, all done, same steps and sizes
    assert local[1] == ray[1]  # evaluations: single-threaded, seeded CPU runs repeat exactly
    assert local[2] == ray[2] and len(local[2]) == 8 * 3  # curves at steps 5, 10, 15
    with sqlite3.connect(grids["ray"].path) as c:
        assert c.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    # a Ray run's row names the node that trained it: its host name and the node's address
    node = grids["ray_instance"].util.get_node_ip_address()
    assert {r["host"] for r in grids["ray"].runs("grid")} == {f"{socket.gethostname()} ({node})"}


def test_tensorboard_events_match_the_store(grids):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    store = grids["ray"]
    for run in grids["runs"][:2]:
        events = EventAccumulator(str(tensorboard_dir(grids["root"] / "tb", run)))
        events.Reload()
        curve = store.curves(run.id)
        assert [e.step for e in events.Scalars("train/loss")] == [c["step"] for c in curve] == [5, 10, 15]
        assert [e.value for e in events.Scalars("train/loss")] == pytest.approx([c["loss"] for c in curve], rel=1e-6)
        evals = store.evals(run.id)
        assert [e.step for e in events.Scalars("eval/accuracy")] == [5, 9]
        assert [e.value for e in events.Scalars("eval/accuracy")] == pytest.approx([e["accuracy"] for e in evals], rel=1e-6)


def test_report_shows_selection_seeds_and_missing_runs(grids, tmp_path):
    store = grids["local"]
    out = write_report(score_store(store, "grid", run_data=True), grids["root"] / "local")
    md = (out / "report.md").read_text()
    assert "lr with the best single seed at the training lengths; headline = the best seed" in md  # the spec's selection rule
    assert "## Per seed at the selected lr" in md and "## Learning rates" in md
    assert "8 of 8 runs done" in md and "Missing runs" not in md
    # the next command plans a third seed and is killed before it starts anything
    bigger = expand(load_spec(str(grids["spec"]), overrides=["seeds=[0, 1, 2]"], name="grid"))
    store.set_plan(Plan("grid", load_spec(str(grids["spec"]), overrides=["seeds=[0, 1, 2]"], name="grid"),
                   [{"id": r.id, "model": r.model_name, "task": r.task_name, "lr": r.lr, "seed": r.seed} for r in bigger]))
    missing = score_store(store, "grid").missing
    assert len(missing) == 4 and {r["seed"] for r in missing} == {2} and {r["status"] for r in missing} == {"not started"}
    md = (write_report(score_store(store, "grid", run_data=True), grids["root"] / "local") / "report.md").read_text()
    assert "8 of 12 runs done" in md and "## Missing runs (4)" in md and "seed=2: not started" in md
    store.set_plan(Plan("other", {"name": "other", "scale": "quick", "description": "planned, never ran"}, [
        {"id": "x" * 16, "model": "LSTM", "task": "parity", "lr": 1e-3, "seed": 0}]))
    md = (write_report(score_store(store, "other", run_data=True), grids["root"] / "local") / "report.md").read_text()
    assert "0 of 1 runs done" in md and "No finished runs yet." in md and "seed=0: not started" in md
    index = write_index(store, grids["root"] / "local").read_text()
    assert '<a href="grid/report.html">grid</a>' in index and '<a href="other/report.html">other</a>' in index
    assert "planned, never ran" in index


# ---- optional packages: clear errors -------------------------------------------------------------
def test_missing_ray_and_tensorboard_give_install_hints(tmp_path, monkeypatch):
    path = tmp_path / "grid.yaml"
    path.write_text(textwrap.dedent(GRID_SPEC))
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` raises ImportError
    with pytest.raises(StatetrackError, match=r"the ray backend needs Ray: pip install 'statetrack\[ray\]'"):
        run_experiment(resolve(str(path)), tmp_path, RunOptions(backend="ray", progress=False), log=lambda *_: None)
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", None)
    with pytest.raises(StatetrackError, match=r"pip install 'statetrack\[tensorboard\]'"):
        run_experiment(resolve(str(path)), tmp_path, RunOptions(tensorboard=tmp_path / "tb", progress=False), log=lambda *_: None)
    with pytest.raises(StatetrackError, match="use it with --backend ray"):
        run_experiment(resolve(str(path)), tmp_path, RunOptions(address="auto", progress=False), log=lambda *_: None)
