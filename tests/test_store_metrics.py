"""Sequence accuracy, task parameters and the models' own metrics (e.g. fixed-point iterations):
stored per evaluation length and curve point, flattened into the `results --json` rows, and shown
by the report and TensorBoard only when present."""

import json
from dataclasses import replace

import pytest

from statetrack.cli import main
from statetrack.results.plots import metric_series
from statetrack.results.report import write_report
from statetrack.results.scoring import score_store
from statetrack.store import Outcome, Plan, RunClaim, Store


def _config(group: str, lr: float = 0.01, seed: int = 0) -> dict:
    return {"experiment": "fp", "model": {"name": "fprnn"}, "task": {"name": "word_problem", "group": group},
            "train": {"steps": 10, "lr": lr, "seed": seed}, "eval": {"lengths": [8, 64]}}


def _add_run(store: Store, run_id: str, model: str, group: str, lr: float, seed: int, evals: list[dict], curve=()) -> None:
    """Plan the run (beside the experiment's runs so far, as `statetrack run` plans before it trains), then store it."""
    task = f"word_problem(group={group})"
    planned = (store.plan("fp") or Plan("fp", {}, [])).runs
    store.set_plan(Plan("fp", {"name": "fp", "scale": "quick"}, [*planned, {"id": run_id, "model": model, "task": task, "lr": lr, "seed": seed}]))
    store.start_run(RunClaim(run_id, "fp", model, task, seed, lr, _config(group, lr, seed), "abc"))
    store.finish_run(run_id, Outcome(evals, list(curve), 10, 100, 1.0, 0.5))


def _eval(length, accuracy, sequence=None, **metrics):
    row = {"length": length, "accuracy": accuracy, "scaled_accuracy": accuracy, "samples": 16}
    if sequence is not None:
        row["sequence_accuracy"] = sequence
    if metrics:
        row["metrics"] = metrics
    return row


# ---- the store -----------------------------------------------------------------------------------
def test_a_run_copied_from_another_experiments_run_keeps_every_record_and_its_revision(tmp_path):
    """`Store.copy_run`: the same configuration under another experiment (the state table's seed 0
    at a rate its pilot trained) is recorded from the done run, not trained again."""
    store = Store(tmp_path / "s.db")
    evals = [_eval(8, 0.9, 0.7, iterations_median=4.0), {**_eval(64, 0.6), "position_accuracy": [1.0, None, 0.5]}]
    evals[0]["traces"] = [{"inputs": [1, 2], "targets": [0, 1], "mask": [1, 1], "probabilities": [[0.9, 0.1], [0.2, 0.8]]}]
    _add_run(store, "source", "FP", "Z2", 0.01, 0, evals, [{"step": 5, "loss": 1.0, "accuracy": 0.5, "stage": 0}])
    copy = RunClaim("copy", "fp-table", "FP", "word_problem(group=Z2)", 0, 0.01, {**_config("Z2"), "experiment": "fp-table"}, "def")
    assert store.copy_run("source", copy)
    assert store.evals("copy", None) == store.evals("source", None) and store.curves("copy") == store.curves("source")
    assert [t["examples"] for t in store.traces("copy")] == [evals[0]["traces"]]
    (row,) = store.runs("fp-table")
    assert row["status"] == "done" and row["git_rev"] == "abc" and row["steps"] == 10  # the source's revision
    assert not store.copy_run("source", copy)  # done already: nothing written
    assert not store.copy_run("no-such-run", replace(copy, id="other"))  # no done source


def test_results_rows_carry_task_params_sequence_accuracy_and_metrics(tmp_path):
    store = Store(tmp_path / "s.db")
    _add_run(store, "r1", "FP-RNN", "A5", 0.01, 0,
             [_eval(8, 0.9, 0.6, iterations_median=5.0, iterations_max=9.0), _eval(64, 0.5, 0.0, iterations_median=7.0, iterations_max=12.0)],
             [{"step": 5, "loss": 2.0, "accuracy": 0.1, "metrics": {"iterations_median": 3.0}}, {"step": 10, "loss": 1.0, "accuracy": 0.2}])
    rows = store.results("fp")
    assert rows == [
        {"model": "FP-RNN", "task": "word_problem(group=A5)", "task_params": {"group": "A5"}, "seed": 0, "lr": 0.01, "length": 8,
         "accuracy": 0.9, "scaled_accuracy": 0.9, "sequence_accuracy": 0.6, "diverged": False, "run_id": "r1", "iterations_max": 9.0,
         "iterations_median": 5.0},
        {"model": "FP-RNN", "task": "word_problem(group=A5)", "task_params": {"group": "A5"}, "seed": 0, "lr": 0.01, "length": 64,
         "accuracy": 0.5, "scaled_accuracy": 0.5, "sequence_accuracy": 0.0, "diverged": False, "run_id": "r1", "iterations_max": 12.0,
         "iterations_median": 7.0},
    ]
    assert list(rows[0])[:3] == ["model", "task", "task_params"]  # the fixed keys first, in their old order
    assert store.evals("r1")[1] == {"length": 64, "accuracy": 0.5, "scaled_accuracy": 0.5, "samples": 16, "sequence_accuracy": 0.0,
                                    "metrics": {"iterations_max": 12.0, "iterations_median": 7.0}}
    assert [c["metrics"] for c in store.curves("r1")] == [{"iterations_median": 3.0}, {}]
    # a metric named like a row key cannot overwrite it
    _add_run(store, "r2", "Odd", "A5", 0.01, 0, [{**_eval(8, 0.9), "metrics": {"accuracy": 0.1, "diverged": 1.0}}])
    [odd] = [r for r in store.results("fp") if r["model"] == "Odd"]
    assert odd["accuracy"] == 0.9 and odd["metric_accuracy"] == 0.1 and "sequence_accuracy" not in odd
    assert odd["diverged"] is False and odd["metric_diverged"] == 1.0


def test_runs_on_different_groups_are_told_apart(tmp_path, capsys):
    store = Store(tmp_path / "s.db")
    _add_run(store, "z60", "FP-RNN", "Z60", 0.01, 0, [_eval(8, 1.0, 1.0)])
    _add_run(store, "a5", "FP-RNN", "A5", 0.01, 0, [_eval(8, 0.4, 0.1)])
    rows = store.results("fp")
    assert sorted((r["task_params"]["group"], r["accuracy"]) for r in rows) == [("A5", 0.4), ("Z60", 1.0)]
    assert {json.dumps(r["task_params"]) for r in rows} == {'{"group": "Z60"}', '{"group": "A5"}'}
    # and through the command line
    (tmp_path / "r").mkdir()
    store = Store(tmp_path / "r" / "statetrack.db")
    _add_run(store, "z60", "FP-RNN", "Z60", 0.01, 0, [_eval(8, 1.0, 1.0)])
    _add_run(store, "a5", "FP-RNN", "A5", 0.01, 0, [_eval(8, 0.4, 0.1)])
    assert main(["results", "fp", "--json", "--results-dir", str(tmp_path / "r")]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert {(r["task_params"]["group"], r["sequence_accuracy"]) for r in printed} == {("Z60", 1.0), ("A5", 0.1)}


# ---- the report ----------------------------------------------------------------------------------
def _fixed_point_experiment(store: Store) -> None:
    """FP-RNN at two lrs (0.01 wins) with sequence accuracies and iteration counts; an LSTM without them."""
    for seed, (seq, med, mx) in enumerate([(0.4, 4.0, 8.0), (0.6, 6.0, 10.0)]):
        _add_run(store, f"fp{seed}", "FP-RNN", "A5", 0.01, seed,
                 [_eval(8, 1.0, 1.0, iterations_median=3.0, iterations_max=5.0), _eval(64, 0.9, seq, iterations_median=med, iterations_max=mx)],
                 [{"step": s, "loss": 1.0 / s, "accuracy": 0.5, "metrics": {"iterations_median": 2.0 + seed, "iterations_max": 4.0 + s}}
                  for s in (5, 10)])
        _add_run(store, f"fpbad{seed}", "FP-RNN", "A5", 0.1, seed,
                 [_eval(8, 0.2, 0.0, iterations_median=50.0, iterations_max=99.0), _eval(64, 0.1, 0.0, iterations_median=50.0, iterations_max=99.0)])
        _add_run(store, f"lstm{seed}", "LSTM", "A5", 0.01, seed, [_eval(8, 0.8), _eval(64, 0.3)],
                 [{"step": 5, "loss": 1.0, "accuracy": 0.5}])


def test_report_shows_sequence_accuracy_and_iteration_plots(tmp_path, monkeypatch):
    import statetrack.results.plots as plots

    store = Store(tmp_path / "statetrack.db")
    _fixed_point_experiment(store)
    captured = {}
    plot_metric = plots.plot_metric

    def spy(series, family, xlabel, path, log_x=False):
        captured[path.name] = {(e["model"], e["lr"]): s.get(family) for e, s in series}
        return plot_metric(series, family, xlabel, path, log_x)

    monkeypatch.setattr(plots, "plot_metric", spy)
    out = write_report(score_store(store, "fp", run_data=True), tmp_path)
    md = (out / "report.md").read_text()
    section = md.split("## Sequence accuracy")[1].split("\n## ")[0]
    # one task and one selected lr: named once in the note, not in a column
    assert "| model | 8 | 64 |" in section and "| :--- | ---: | ---: |" in section and "task word_problem(group=A5); lr 0.01" in section
    # mean ± sample std over the seeds at the selected lr (0.01, not 0.1; 0.4 and 0.6: std 0.141); the LSTM measured none
    assert "| FP-RNN | 1.000 ± 0.000 | 0.500 ± 0.141 |" in section
    assert "| LSTM | - | - |" in section
    page = (out / "report.html").read_text()
    assert "<h2>Sequence accuracy</h2>" in page and '<td class="text">FP-RNN</td>' in page
    for name in ("iterations_vs_length.png", "iterations_vs_step.png"):
        assert (out / name).stat().st_size > 0 and f"]({name})" in md and f'alt="{name[:-4]}"' in page
    # median: mean over seeds; max: max over seeds; only the selected lr; the LSTM has no line
    assert captured["iterations_vs_length.png"] == {
        ("FP-RNN", 0.01): {"median": {8: 3.0, 64: 5.0}, "max": {8: 5.0, 64: 10.0}}, ("LSTM", 0.01): None}
    assert captured["iterations_vs_step.png"][("FP-RNN", 0.01)] == {"median": {5: 2.5, 10: 2.5}, "max": {5: 9.0, 10: 14.0}}


def test_report_without_them_has_neither(tmp_path):
    store = Store(tmp_path / "statetrack.db")
    for seed in (0, 1):  # sequence accuracy equal to accuracy (one supervised position) says nothing new
        _add_run(store, f"a{seed}", "LSTM", "A5", 0.01, seed, [_eval(8, 0.8, 0.8), _eval(64, 0.3, 0.3)],
                 [{"step": 5, "loss": 1.0, "accuracy": 0.5}])
        _add_run(store, f"b{seed}", "GRU", "A5", 0.01, seed, [_eval(8, 0.7), _eval(64, 0.2)])
    out = write_report(score_store(store, "fp", run_data=True), tmp_path)
    md = (out / "report.md").read_text()
    assert "Sequence accuracy" not in md and "## Headline" in md
    assert not list(out.glob("iterations_*.png")) and "iterations" not in md
    assert (out / "training_curves.png").is_file()


def test_results_text_adds_the_sequence_table(tmp_path, capsys):
    store = Store(tmp_path / "statetrack.db")
    _fixed_point_experiment(store)
    assert main(["results", "fp", "--results-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "sequence accuracy" in out and "0.500 ± 0.141" in out
    store = Store(tmp_path / "other.db")
    _add_run(store, "a", "LSTM", "A5", 0.01, 0, [_eval(8, 0.8, 0.8)])
    assert main(["results", "fp", "--store", str(tmp_path / "other.db")]) == 0
    assert "sequence accuracy" not in capsys.readouterr().out


def test_metric_series_groups_by_family():
    series = metric_series([[(8, {"iterations_median": 2.0, "iterations_max": 4.0, "residual": 0.5})],
                            [(8, {"iterations_median": 4.0, "iterations_max": 3.0, "residual": 1.5}), (16, {"iterations_min": 1.0})]])
    assert series == {"iterations": {"median": {8: 3.0}, "max": {8: 4.0}, "min": {16: 1.0}}, "residual": {"": {8: 1.0}}}


# ---- TensorBoard ---------------------------------------------------------------------------------
def test_tensorboard_gets_sequence_accuracy_and_metrics(tiny_spec, tmp_path):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from statetrack.experiments import expand, load_spec
    from statetrack.training.loggers import replay, run_loggers, tensorboard_dir

    run = expand(load_spec(str(tiny_spec())))[0]
    store = Store(tmp_path / "s.db")
    store.start_run(RunClaim(run.id, run.experiment, run.model_name, run.task_name, run.seed, run.lr, run.config, "abc"))
    store.finish_run(run.id, Outcome([_eval(5, 0.9, 0.7, iterations_median=4.0), _eval(9, 0.6, 0.2, iterations_median=6.0)], [{"step": 5, "loss": 1.0, "accuracy": 0.5, "metrics": {"iterations_max": 8.0}}, {"step": 10, "loss": 0.5, "accuracy": 0.6}], 10, 100, 1.0, 0.5))
    replay(run_loggers(run, {"tensorboard": str(tmp_path / "tb")}), store.curves(run.id), store.evals(run.id))
    events = EventAccumulator(str(tensorboard_dir(tmp_path / "tb", run)))
    events.Reload()
    scalars = lambda tag: [(e.step, e.value) for e in events.Scalars(tag)]  # noqa: E731
    assert scalars("eval/sequence_accuracy") == [(5, pytest.approx(0.7)), (9, pytest.approx(0.2))]
    assert scalars("eval/iterations_median") == [(5, 4.0), (9, 6.0)]
    assert scalars("train/iterations_max") == [(5, 8.0)]
    assert scalars("train/loss") == [(5, 1.0), (10, 0.5)]


@pytest.mark.parametrize("stored", ['{"": 0}', '{"iterations_median": null}', '{"iterations_median": "7"}', '[1]'])
def test_a_damaged_metrics_value_skips_its_row_with_a_warning(tmp_path, stored):
    """A metric without a name or a number would break the report's plots: its evaluation row is skipped, named in a warning."""
    store = Store(tmp_path / "statetrack.db")
    _add_run(store, "r1", "Bedouin", "A5", 0.01, 0, [_eval(8, 0.9, iterations_median=3.0), _eval(64, 0.5)])
    with store._connect() as db:
        db.execute("UPDATE evals SET metrics = ? WHERE run_id = 'r1' AND length = 8", (stored,))
    with pytest.warns(UserWarning, match="r1"):
        rows = store.results("fp")
    assert [r["length"] for r in rows] == [64]


@pytest.mark.parametrize("stored", ['[0, []]', '["a"]', '{"1": 0.5}'])
def test_a_damaged_per_position_accuracy_skips_its_evaluation_with_a_warning(tmp_path, stored):
    """Per-position accuracy is a list of numbers (None where no position was supervised); anything else is damage."""
    store = Store(tmp_path / "statetrack.db")
    _add_run(store, "r1", "Bedouin", "A5", 0.01, 0, [{**_eval(8, 0.9), "position_accuracy": [1.0, None, 0.5]}, _eval(64, 0.5)])
    assert store.evals("r1")[0]["position_accuracy"] == [1.0, None, 0.5]
    with store._connect() as db:
        db.execute("UPDATE evals SET position_accuracy = ? WHERE run_id = 'r1' AND length = 8", (stored,))
    with pytest.warns(UserWarning, match="r1"):
        assert [e["length"] for e in store.evals("r1")] == [64]
