"""One `statetrack run` resolves its spec once, scores once from the plan it stored (never read back), and every
derived fact has one definition: the longest training length the report's per-position plot marks
is the plan's, for a spec that relies on the default training lengths and for a curriculum."""

import textwrap

import pytest

from cli_helpers import run_cli
from statetrack.experiments import spec as spec_module
from statetrack.results import report, scoring
from statetrack.store import Store


def _counting(monkeypatch, module, name, calls):
    real = getattr(module, name)

    def counted(*args, **kwargs):
        calls[name] = calls.get(name, 0) + 1
        return real(*args, **kwargs)

    monkeypatch.setattr(module, name, counted)


def test_a_run_resolves_once_and_scores_once_from_the_plan_it_stored(monkeypatch, tmp_path, capsys):
    calls = {}
    for module, name in ((spec_module, "read_spec"), (spec_module, "load_spec"), (spec_module, "expand"),
                         (scoring, "score"), (scoring, "summarize"), (scoring, "claim_verdicts"), (Store, "plan")):
        _counting(monkeypatch, module, name, calls)
    code, out, _ = run_cli(capsys, "run", "demo", "--results-dir", str(tmp_path), "--workers", "1", "--no-progress",
                           "--name", "demo", "seeds=[0]", "train.steps=5", "eval.samples=8", "models=[{name: deltanet, eig_range: '[-1,1]'}]")
    assert code == 0 and "did it reproduce?" in out
    assert calls == {"read_spec": 1, "load_spec": 1, "expand": 1, "score": 1, "summarize": 1, "claim_verdicts": 1}


def test_the_plan_in_memory_is_the_one_the_store_gives_back(tmp_path):
    """`Experiment.plan()` is what `Store.plan` returns once stored (JSON values, its created_at
    aside), so scoring the plan `run` stored gives what scoring the store's gives."""
    from dataclasses import replace

    from statetrack.experiments.runner import run_experiment
    from statetrack.options import RunOptions

    experiment = spec_module.resolve("demo", overrides=["seeds=[0]", "train.steps=3", "eval.samples=8", "models=[lstm]"], name="demo")
    stored = run_experiment(experiment, tmp_path, RunOptions(workers=1, progress=False), log=lambda *_: None)
    store = Store(tmp_path / "statetrack.db")
    assert stored == store.plan("demo") and stored.created_at is not None
    assert replace(stored, created_at=None) == experiment.plan()
    from_memory = scoring.score_store(store, "demo", plan=stored)
    from_store = scoring.score_store(store, "demo")
    assert from_memory.summary == from_store.summary and from_memory.verdicts == from_store.verdicts
    assert from_memory.summary and from_memory.missing == []



def test_a_run_of_three_runs_builds_its_training_settings_at_most_six_times(monkeypatch, tmp_path, capsys):
    """Each run's TrainConfig is derived from its model's settings, validated once per experiment
    (`spec.train_config`), and checked again by the trainer: not rebuilt by the plan, the worker and
    the report."""
    from statetrack import schema

    built = []
    real = schema.TrainConfig.__init__

    def counted(self, **values):
        built.append(values)
        real(self, **values)

    spec_module._train_config.cache_clear()  # nothing built by an earlier test counts as built here
    monkeypatch.setattr(schema.TrainConfig, "__init__", counted)
    code, out, _ = run_cli(capsys, "run", "demo", "--results-dir", str(tmp_path), "--workers", "1", "--no-progress",
                           "--name", "demo", "seeds=[0]", "train.steps=5", "eval.samples=8",
                           "models=[{name: deltanet, eig_range: '[-1,1]'}, {name: deltanet, eig_range: '[0,1]'}, "
                           "{name: lstm, lrs: [3.0e-3], train: {steps: 5}}]")  # the LSTM's own settings, as the demo's
    assert code == 0 and "did it reproduce?" in out and len(Store(tmp_path / "statetrack.db").runs("demo")) == 3
    assert 3 <= len(built) <= 6  # the trainer's own check of each run, and the settings the runs share

SPEC = """
name: marks
description: the per-position plot's training-length marker
tasks: [{name: word_problem, group: Z2}]
models: [{name: lstm, d_model: 8}]
lrs: [0.01]
seeds: [0]
train: {steps: 4, batch_size: 4, early_stop_loss: null%s}
eval: {lengths: [48], samples: 8}
"""


@pytest.mark.parametrize("train, longest", [
    ("", 40),  # the schema's default training lengths, never written in the spec
    (", curriculum: [{steps: 2, length: 6}, {steps: 2, min_length: 3, max_length: 12}]", 12),  # the last stage's
])
def test_the_per_position_plot_marks_the_plans_longest_training_length(monkeypatch, tmp_path, capsys, train, longest):
    marked = []
    real = report.plot_position_accuracy

    def spy(series, path, train_lengths=None):
        marked.append(train_lengths)
        return real(series, path, train_lengths)

    monkeypatch.setattr(report, "plot_position_accuracy", spy)
    path = tmp_path / "marks.yaml"
    path.write_text(textwrap.dedent(SPEC % train))
    code, _, _ = run_cli(capsys, "run", str(path), "--results-dir", str(tmp_path / "r"), "--workers", "1", "--no-progress")
    assert code == 0
    assert marked == [{"word_problem(group=Z2)": longest}]
    assert (tmp_path / "r" / "marks" / "position_accuracy.png").is_file()


@pytest.mark.parametrize("name, scale", [("demo", "quick"), ("memory-state-tracking", "paper")])
def test_a_report_reads_the_paper_and_selection_a_run_resolves(name, scale):
    """`statetrack report` and the book read a spec's sections through the resolution a run uses
    (`spec_at`): the same `paper` and `selection` at each scale, with no loader of their own."""
    now, run = spec_module.spec_now(name, scale), spec_module.load_spec(name, scale)
    assert now is not None and now["paper"] == run["paper"] and now.get("selection") == run.get("selection")
    assert spec_module.spec_now("demo_seeds-0_train.steps-5") is None  # named after overrides: no spec of its own
