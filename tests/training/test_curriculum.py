"""Curriculum training (stages of task parameters and lengths), task-defined losses and metrics (the
PFSA belief KL and total-variation distance), and per-reveal accuracy on REPL traces."""

import re

import pytest
import torch

from cli_helpers import run_cli
from statetrack.errors import StatetrackError
from statetrack.models import zoo
from statetrack.store import Store
from statetrack.tasks import make_task
from statetrack.training.evaluate import Sampling, evaluate_lengths
from statetrack.training.train import TrainConfig, Trainer

STAGES = [{"steps": 6, "length": 2, "task": {"spacing": 1}}, {"steps": 6, "length": 4, "task": {"spacing": 2}}]


def _model(task, seed=0, name="lstm"):
    torch.manual_seed(seed)
    return zoo.build_model({"name": name, "d_model": 8}, task.vocab_size, task.num_classes)


def _config(**kwargs):
    base = dict(curriculum=STAGES, batch_size=4, log_every=3, early_stop_loss=None, device="cpu", checkpoint_every=4)
    return TrainConfig.from_dict({**base, **kwargs})


def test_the_trainer_moves_through_the_stages():
    task = make_task("repl", n=3, spacing=1)
    config = _config()
    assert config.steps == 12  # the stages' steps add up
    trainer = Trainer(_model(task), task, config, progress=False)
    seen = []
    real = trainer._next_batch

    def spy():
        batch = real()
        seen.append((trainer.stage, int(batch.mask.sum(1)[0])))  # reveals per example = length // spacing
        return batch

    trainer._next_batch = spy
    trainer.fit()
    assert seen == [(0, 2)] * 6 + [(1, 2)] * 6  # stage 2: 4 commands at spacing 2
    assert [(c["step"], c["stage"]) for c in trainer.curve] == [(3, 0), (6, 0), (9, 1), (12, 1)]


def test_a_resumed_run_continues_in_its_stage(tmp_path):
    task = make_task("repl", n=3, spacing=1)
    straight = _model(task)
    Trainer(straight, task, _config(), progress=False).fit()
    interrupted = _model(task)
    trainer = Trainer(interrupted, task, _config(), tmp_path / "run.pt", progress=False)
    trainer.config.steps = 8  # stop inside stage 2
    trainer.fit()
    assert torch.load(tmp_path / "run.pt", weights_only=True)["step"] == 8 and trainer.stage == 1  # the stage follows from the step
    resumed = _model(task, seed=5)
    trainer = Trainer(resumed, task, _config(), tmp_path / "run.pt", progress=False).fit()
    assert trainer.step == 12 and trainer.stage == 1
    for a, b in zip(straight.state_dict().values(), resumed.state_dict().values()):
        torch.testing.assert_close(a, b)


@pytest.mark.parametrize(
    "curriculum, steps, expected",
    [
        ([], None, "train.curriculum must be a non-empty list of stages"),
        ([{"steps": 0, "length": 2}], None, "train.curriculum[0].steps must be an integer >= 1, got 0"),
        ([{"steps": 5, "lenght": 2}], None, "train.curriculum[0]: unknown key 'lenght'"),
        ([{"steps": 5, "length": 2, "min_length": 1}], None, "give length, or min_length and max_length"),
        ([{"steps": 5, "min_length": 4, "max_length": 2}], None, "1 <= min_length <= max_length"),
        ([{"steps": 5, "length": 2, "task": 3}], None, "task must be a mapping"),
        ([{"steps": 5, "length": 2}], 7, "train: steps is 7, but the curriculum's stages add up to 5"),
    ],
)
def test_malformed_curricula_are_one_line(curriculum, steps, expected):
    values = {"curriculum": curriculum, **({"steps": steps} if steps else {})}
    with pytest.raises(StatetrackError, match=re.escape(expected)):
        TrainConfig.from_dict(values)


def test_stage_tasks_must_share_tokens_and_make_their_lengths():
    task = make_task("repl", n=3)
    with pytest.raises(StatetrackError, match="curriculum\\[0\\]: .* changes the task's tokens"):
        Trainer(_model(task), task, _config(curriculum=[{"steps": 2, "length": 2, "task": {"n": 4}}]), progress=False)
    with pytest.raises(StatetrackError, match="curriculum\\[1\\]: task 'repl': length must be an integer >= 4"):
        Trainer(_model(task), task, _config(curriculum=[STAGES[0], {"steps": 2, "length": 2, "task": {"spacing": 4}}]),
                progress=False)
    with pytest.raises(StatetrackError, match="train: curriculum draws fresh batches in each stage; it cannot go with dataset_size"):
        TrainConfig.from_dict({"curriculum": STAGES, "dataset_size": 8})


def test_a_spec_with_a_curriculum_stores_stages_and_reports_them(tmp_path, capsys):
    spec = tmp_path / "cur.yaml"
    spec.write_text("""
task: {name: repl, n: 3, spacing: 2}
models: [{name: lstm, d_model: 8}]
train:
  batch_size: 4
  log_every: 2
  early_stop_loss: null
  curriculum:
    - {steps: 4, length: 2, task: {spacing: 1}}
    - {steps: 4, length: 4}
eval: {lengths: [4, 8], samples: 8}
lrs: [1.0e-2]
seeds: [0]
""")
    code, out, err = run_cli(capsys, "run", str(spec), "--results-dir", str(tmp_path / "r"), "--no-progress", "--workers", "1")
    assert code == 0, err
    store = Store(tmp_path / "r" / "statetrack.db", read_only=True)
    run = store.runs("cur")[0]
    assert [c["stage"] for c in store.curves(run["id"])] == [0, 0, 1, 1]
    # per reveal: 8 commands at spacing 2 are 4 reveals
    assert len([e for e in store.evals(run["id"]) if e["length"] == 8][0]["position_accuracy"]) == 4
    bad = spec.read_text().replace("task: {spacing: 1}", "task: {n: 4}")
    spec.write_text(bad)
    code, _, err = run_cli(capsys, "run", str(spec), "--results-dir", str(tmp_path / "r2"))
    assert code == 2 and "train.curriculum[0]: {'n': 4} changes the task's tokens or answers" in err
    assert not (tmp_path / "r2").exists()


def test_repl_accuracy_is_counted_per_reveal():
    task = make_task("repl", n=3, spacing=2)
    rows = evaluate_lengths(_model(task), task, [6, 10], Sampling(samples=8), positions=True)
    assert [len(r["position_accuracy"]) for r in rows] == [3, 5]  # reveals, not tokens
    assert all(0 <= v <= 1 for r in rows for v in r["position_accuracy"])


def test_pfsa_trains_on_the_exact_belief():
    task = make_task("pfsa", n=3, noise=0.5, reveal_prob=0.3)
    batch = task.sample(16, 12, torch.Generator().manual_seed(0))
    exact = batch.soft_targets.clamp_min(1e-12).log()  # logits that are the belief itself
    loss, _ = task.loss(exact, batch)
    assert loss.item() < 1e-6
    uniform, _ = task.loss(torch.zeros_like(exact), batch)
    assert uniform.item() > 0.1
    probabilities = exact.softmax(-1)
    assert task.metrics(probabilities, batch)["tv_distance"] < 1e-6
    assert task.metrics(torch.zeros_like(exact).softmax(-1), batch)["tv_distance"] > 0.2


def test_pfsa_marginal_mode_uses_the_first_positions_distribution():
    task = make_task("pfsa", n=3, belief="marginal")
    batch = task.sample(4, 6, torch.Generator().manual_seed(1))
    row0 = batch.soft_targets[..., 0, :]
    assert task.loss(row0.clamp_min(1e-12).log(), batch)[0].item() < 1e-6


def test_evaluation_reports_the_tasks_own_metric_and_training_lowers_it():
    task = make_task("pfsa", n=3, noise=0.5, reveal_prob=0.3)
    model = _model(task)
    before = evaluate_lengths(model, task, [10], Sampling(samples=64))[0]["metrics"]["tv_distance"]
    config = TrainConfig(steps=150, batch_size=32, lr=1e-2, min_length=4, max_length=10, early_stop_loss=None, device="cpu")
    Trainer(model, task, config, progress=False).fit()
    after = evaluate_lengths(model, task, [10], Sampling(samples=64))[0]["metrics"]["tv_distance"]
    assert after < 0.6 * before, (before, after)


def test_length_step_trains_on_a_mixture_of_lengths_and_only_those():
    """`train.length_step` draws min_length, min_length + step, .., max_length (Anonymous 2025 trains
    copying on blanks 10, 20, .., 50); every one of them comes up, the lengths between never do, and
    a fixed training set keeps the same lengths."""
    task = make_task("modadd", m=3)
    config = TrainConfig.from_dict(
        dict(steps=60, batch_size=2, min_length=10, max_length=50, length_step=10, early_stop_loss=None, device="cpu")
    )
    trainer = Trainer(_model(task), task, config, progress=False)
    lengths = {int(trainer._next_batch().inputs.shape[1]) for _ in range(60)}
    widths = {int(task.sample(1, n, torch.Generator()).inputs.shape[1]): n for n in range(10, 51)}
    assert {widths[w] for w in lengths} == {10, 20, 30, 40, 50}
    from statetrack.training.train import FixedTrainingSet

    fixed = FixedTrainingSet(task, 200, range(10, 51, 10), 8, torch.Generator().manual_seed(0))
    assert fixed.lengths == [10, 20, 30, 40, 50]


@pytest.mark.parametrize(
    "settings, expected",
    [
        (dict(min_length=10, max_length=45, length_step=10), r"length_step 10 must divide .*\[10, 45\]"),
        (dict(min_length=10, max_length=50, length_step=0), r"length_step"),
        (
            dict(curriculum=[{"steps": 5, "min_length": 2, "max_length": 7}], length_step=2),
            r"curriculum\[0\]: length_step 2 must divide",
        ),
    ],
)
def test_a_length_step_that_misses_the_longest_length_is_one_line(settings, expected):
    with pytest.raises(StatetrackError, match=expected):
        TrainConfig.from_dict(settings)


def test_the_plan_and_the_book_show_a_mixture_of_lengths():
    from statetrack.experiments.spec import train_lengths_text
    from statetrack.results.book import settings_line

    assert train_lengths_text({"min_length": 10, "max_length": 50, "length_step": 10}) == "10, 20, .., 50"
    assert train_lengths_text({"min_length": 10, "max_length": 50}) == "10..50"
    spec = {
        "tasks": ["parity"],
        "models": ["lstm"],
        "train": {"min_length": 2, "max_length": 10, "length_step": 2, "steps": 5},
        "lrs": [1e-3],
        "seeds": [0],
    }
    assert "trained on lengths 2, 4, .., 10, 5 steps" in settings_line(spec)
