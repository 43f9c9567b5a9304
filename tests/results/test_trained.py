"""Trained runs back in Python (`statetrack.load_run`, `statetrack.load_runs`): the reloaded model
scores exactly what the run stored, and run ids are where a user finds them (`results --json`)."""

import json

import pytest
import torch

import statetrack
from cli_helpers import run_cli
from statetrack.errors import StatetrackError
from statetrack.experiments.runner import RunOptions, run_experiment
from statetrack.experiments.spec import resolve
from statetrack.results.selection import summarize
from statetrack.store import Store
from statetrack.training.evaluate import Sampling, evaluate_lengths


@pytest.fixture
def trained(tiny_spec, tmp_path):
    """A finished tiny grid (DeltaNet [-1,1] and LSTM, seeds 0 and 1) in tmp_path/r; returns the store."""
    run_experiment(resolve(str(tiny_spec())), tmp_path / "r", RunOptions(workers=1, progress=False), log=lambda *_: None)
    return Store(tmp_path / "r" / "statetrack.db", read_only=True)


def test_a_loaded_run_scores_what_it_stored(trained, tmp_path):
    (row,) = [r for r in trained.runs("tiny") if r["model"] == "LSTM" and r["seed"] == 1]
    run = statetrack.load_run(row["id"][:6], results_dir=tmp_path / "r")  # a unique prefix, as `analyze` takes
    assert (run.id, run.experiment, run.model_name, run.seed, run.lr) == (row["id"], "tiny", "LSTM", 1, 0.01)
    assert run.config == row["config"] and run.task_name == "modadd(m=3)" and not run.model.training
    assert repr(run) == f"TrainedRun({row['id']}: LSTM on modadd(m=3), seed 1, lr 0.01, experiment tiny)"
    e = run.config["eval"]  # evaluated again as the worker did: the same figures, so the stored weights are loaded
    rows = evaluate_lengths(run.model, run.task, e["lengths"], Sampling(samples=e["samples"], batch_size=e["batch_size"], seed=e["seed"]))
    assert [(r["length"], r["accuracy"]) for r in rows] == [(s["length"], s["accuracy"]) for s in trained.evals(row["id"])]
    again = statetrack.load_run(row["id"], store=trained, results_dir=tmp_path / "r").model  # an open Store will do
    assert all(torch.equal(a, b) for a, b in zip(again.state_dict().values(), run.model.state_dict().values()))


def test_load_runs_selects_by_model_and_seed_and_names_the_values_there_are(trained, tmp_path):
    runs = statetrack.load_runs("tiny", results_dir=tmp_path / "r")
    assert [(r.model_name, r.seed) for r in runs] == [("DeltaNet [-1,1]", 0), ("DeltaNet [-1,1]", 1), ("LSTM", 0), ("LSTM", 1)]
    assert [r.seed for r in statetrack.load_runs("tiny", model="LSTM", results_dir=tmp_path / "r")] == [0, 1]
    (run,) = statetrack.load_runs("tiny", model="DeltaNet [-1,1]", seed=1, store=tmp_path / "r" / "statetrack.db",
                                  results_dir=tmp_path / "r")
    assert run.model_name == "DeltaNet [-1,1]" and run.seed == 1 and type(run.model.blocks[0].mixer).__name__ == "DeltaNet"
    with pytest.raises(StatetrackError, match=r"no finished run with model 'GRU'; models with finished runs: DeltaNet \[-1,1\], LSTM"):
        statetrack.load_runs("tiny", model="GRU", results_dir=tmp_path / "r")
    with pytest.raises(StatetrackError, match="no finished run with seed 7; seeds with finished runs: 0, 1"):
        statetrack.load_runs("tiny", seed=7, results_dir=tmp_path / "r")
    with pytest.raises(StatetrackError, match="no results for experiment 'demo'.*experiments with results: tiny"):
        statetrack.load_runs("demo", results_dir=tmp_path / "r")
    with pytest.raises(StatetrackError, match="no run id in .* is or starts with 'zzz'"):
        statetrack.load_run("zzz", results_dir=tmp_path / "r")
    with pytest.raises(StatetrackError, match="has no checkpoint at"):
        statetrack.load_run(runs[0].id, results_dir=tmp_path / "elsewhere", store=trained)


def test_run_ids_are_in_the_results_rows_and_never_read_as_a_metric(trained, tmp_path, capsys):
    code, out, _ = run_cli(capsys, "results", "tiny", "--json", "--results-dir", str(tmp_path / "r"))
    rows = json.loads(out)
    assert code == 0 and {r["run_id"] for r in rows} == {r["id"] for r in trained.runs("tiny")}
    assert all(set(entry["metrics_mean"]) == {"predicted_classes"} for entry in summarize(rows))  # the only metric


def test_a_missing_store_is_named_in_pythons_words(tmp_path):
    """Python callers pass store= or results_dir=, not the CLI's options."""
    for call in (lambda: statetrack.load_run("abc", results_dir=tmp_path), lambda: statetrack.load_runs("demo", store=tmp_path / "x.db")):
        with pytest.raises(StatetrackError, match=r"no results store at .*pass store=FILE or results_dir=DIR of an earlier run"):
            call()
    assert list(tmp_path.iterdir()) == []
