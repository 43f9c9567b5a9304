"""Trainer: learning on a real task, checkpoint resume equal to an uninterrupted run, NaN detection."""

import math

import pytest
import torch

from statetrack.models import zoo
from statetrack.tasks import make_task
from statetrack.training.evaluate import Sampling, evaluate_lengths
from statetrack.training.train import TrainConfig, Trainer


def make(spec, task, seed=0):
    torch.manual_seed(seed)
    return zoo.build_model(spec, task.vocab_size, task.num_classes)


def test_lstm_learns_modular_addition_in_distribution():
    task = make_task("modadd", m=3)  # chance 1/3
    model = make({"name": "lstm", "d_model": 32}, task)
    config = TrainConfig(steps=400, batch_size=64, lr=1e-2, min_length=2, max_length=6, early_stop_loss=None, device="cpu")
    Trainer(model, task, config, progress=False).fit()
    result = evaluate_lengths(model, task, [6], Sampling(samples=256))[0]
    assert result["scaled_accuracy"] > 0.9, result


def test_early_stop_accuracy_stops_a_run_once_it_fits_its_training_lengths():
    """The LSTM fits modular addition mod 3 at length 6 within 400 steps; with early_stop_accuracy it
    stops at the first validation at or above 0.99 and still scores as a fitted model there."""
    task = make_task("modadd", m=3)
    model = make({"name": "lstm", "d_model": 32}, task)
    config = TrainConfig(steps=2000, batch_size=64, lr=1e-2, min_length=2, max_length=6, early_stop_loss=None,
                         early_stop_accuracy=0.99, val_every=25, device="cpu")
    trainer = Trainer(model, task, config, progress=False).fit()
    assert trainer.stopped_early and trainer.step < 2000 and trainer.step % 25 == 0
    assert evaluate_lengths(model, task, [6], Sampling(samples=256))[0]["accuracy"] > 0.95


@pytest.mark.parametrize("measure", ["scaled", "sequence"])
def test_early_stop_fit_stops_once_the_held_out_figure_at_the_longest_length_reaches_it(measure, monkeypatch):
    """early_stop_fit reads the validation's scaled (or sequence) accuracy on held-out examples at
    max_length, counted as evaluation counts: the run stops at the first validation at or above
    it, and the same run without the rule trains every step."""
    from statetrack.training import train as train_module

    task = make_task("modadd", m=3)
    seen = []
    validation = train_module.Trainer._validation

    def recorded(self):
        figures = validation(self)
        seen.append(figures)
        return figures

    monkeypatch.setattr(train_module.Trainer, "_validation", recorded)
    settings = dict(steps=1500, batch_size=64, lr=1e-2, min_length=2, max_length=6, early_stop_loss=None,
                    val_every=25, device="cpu")
    model = make({"name": "lstm", "d_model": 32}, task)
    config = TrainConfig(**settings, early_stop_fit=0.99, early_stop_measure=measure)
    trainer = Trainer(model, task, config, progress=False).fit()
    assert trainer.stopped_early and trainer.step < 1500 and trainer.step == 25 * len(seen)
    assert seen[-1][measure] >= 0.99 and all(f[measure] < 0.99 for f in seen[:-1])
    assert evaluate_lengths(model, task, [6], Sampling(samples=256))[0]["scaled_accuracy"] > 0.9
    seen.clear()
    full = Trainer(make({"name": "lstm", "d_model": 32}, task), task, TrainConfig(**settings), progress=False).fit()
    assert not full.stopped_early and full.step == 1500 and not seen  # no rule: no validation at all


@pytest.mark.parametrize("fit_loss, stops", [(None, True), (0.1, True), (1e-3, False)])
def test_early_stop_fit_loss_waits_for_the_held_out_loss_to_converge(fit_loss, stops, monkeypatch):
    """With early_stop_fit_loss, a run whose held-out figure is at early_stop_fit stops only once its
    held-out loss is below that too: right at every example is not yet converged."""
    from statetrack.training import train as train_module

    figures = {"loss": 0.01, "accuracy": 1.0, "scaled": 1.0, "sequence": 1.0}
    monkeypatch.setattr(train_module.Trainer, "_validation", lambda self: figures)
    task = make_task("parity")
    config = TrainConfig(steps=40, max_length=6, early_stop_loss=None, early_stop_fit=0.99, early_stop_fit_loss=fit_loss,
                         val_every=10, device="cpu")
    trainer = Trainer(make({"name": "lstm", "d_model": 4}, task), task, config, progress=False).fit()
    assert (trainer.stopped_early, trainer.step) == ((True, 10) if stops else (False, 40))


def test_early_stop_window_stops_only_once_the_run_has_stayed_fit(monkeypatch, tmp_path):
    """With early_stop_window 3, a run fits at step 10, falls out at 30, fits again from 40: it stops
    at 60, the third fitted validation in a row, not at the first; paused and resumed between
    validations it stops at the same step."""
    from statetrack.training import train as train_module

    fitted = {10, 20, 40, 50, 60, 70, 80}
    monkeypatch.setattr(train_module.Trainer, "_validation", lambda self: {
        "loss": 1e-4, "accuracy": 1.0, "scaled": 1.0 if self.step in fitted else 0.5, "sequence": 1.0})
    task = make_task("parity")
    settings = dict(steps=100, max_length=6, early_stop_loss=None, early_stop_fit=0.99, val_every=10, log_every=5,
                    device="cpu")
    first = Trainer(make({"name": "lstm", "d_model": 4}, task), task, TrainConfig(**settings), progress=False).fit()
    assert (first.stopped_early, first.step) == (True, 10)  # no window: the first fitted validation
    config = TrainConfig(**settings, early_stop_window=3)
    windowed = Trainer(make({"name": "lstm", "d_model": 4}, task), task, config, progress=False).fit()
    assert (windowed.stopped_early, windowed.step) == (True, 60)
    # paused after step 45 (one fitted validation counted), resumed from its checkpoint: the same stop
    path = tmp_path / "run.pt"
    paused = Trainer(make({"name": "lstm", "d_model": 4}, task), task, config.model_copy(update={"steps": 100}),
                     progress=False, checkpoint_path=path)
    monkeypatch.setattr(train_module, "now", lambda: 0.0 if paused.step < 45 else 1e12)
    with pytest.raises(train_module.Paused):
        paused.fit(deadline=1.0)
    assert paused.fits_in_a_row == 1
    monkeypatch.setattr(train_module, "now", lambda: 0.0)
    resumed = Trainer(make({"name": "lstm", "d_model": 4}, task), task, config, progress=False, checkpoint_path=path)
    resumed.fit()
    assert (resumed.stopped_early, resumed.step) == (True, 60)


def test_the_validation_counts_as_evaluation_counts():
    """The trainer's validation figures are evaluation's on the same examples: one counting rule."""
    from statetrack.training.evaluate import count_right, scaled_accuracy

    task = make_task("parity")
    model = make({"name": "lstm", "d_model": 8}, task)
    config = TrainConfig(steps=1, max_length=12, val_samples=64, device="cpu")
    trainer = Trainer(model, task, config, progress=False)
    figures = trainer._validation()
    batch = task.sample(64, 12, torch.Generator().manual_seed(config.seed + 7919))
    with torch.no_grad():
        counts = count_right(model(batch.inputs)[0].argmax(-1), batch)[1]
    assert figures["scaled"] == pytest.approx(scaled_accuracy(counts["correct"] / counts["total"], task.chance))
    assert figures["sequence"] == pytest.approx(counts["whole"] / counts["examples"])
    assert figures["accuracy"] == pytest.approx(counts["correct"] / counts["total"])


def test_resume_from_checkpoint_equals_uninterrupted(tmp_path):
    task = make_task("parity")
    spec = {"name": "deltanet", "eig_range": "[-1,1]", "d_model": 8, "num_heads": 1}
    config = dict(batch_size=8, lr=1e-2, min_length=2, max_length=6, early_stop_loss=None, checkpoint_every=5, device="cpu")

    straight = make(spec, task)
    Trainer(straight, task, TrainConfig(steps=12, **config), progress=False).fit()

    interrupted = make(spec, task)
    Trainer(interrupted, task, TrainConfig(steps=7, **config), tmp_path / "run.pt", progress=False).fit()
    resumed = make(spec, task, seed=99)  # different init: everything must come from the checkpoint
    trainer = Trainer(resumed, task, TrainConfig(steps=12, **config), tmp_path / "run.pt", progress=False).fit()
    assert trainer.step == 12
    for a, b in zip(straight.state_dict().values(), resumed.state_dict().values()):
        torch.testing.assert_close(a, b)


class _Arbitrary:  # any picklable object that is not a tensor or plain data
    pass


@pytest.mark.parametrize("spec", [{"name": "mamba", "eig_range": "[-1,1]"}, {"name": "bedouin", "reflections": 2}])
def test_the_optimizer_updates_every_parameter_at_once_with_the_per_tensor_numbers(spec, monkeypatch):
    """The trainer's AdamW runs each update over all parameters together (foreach); the trained weights
    equal, to the last bit, those of AdamW updating one tensor at a time, weight decay and clipping on."""
    task = make_task("modadd", m=5)
    config = TrainConfig(steps=30, batch_size=16, lr=3e-3, weight_decay=0.1, clip=0.5, min_length=2, max_length=8,
                         early_stop_loss=None, device="cpu")
    together = make({**spec, "d_model": 16, "num_layers": 2}, task)
    trainer = Trainer(together, task, config, progress=False)
    assert trainer.optimizer.defaults["foreach"] is True
    trainer.fit()
    adamw = torch.optim.AdamW
    monkeypatch.setattr(torch.optim, "AdamW", lambda *args, **kw: adamw(*args, **{**kw, "foreach": False}))
    one_by_one = make({**spec, "d_model": 16, "num_layers": 2}, task)
    Trainer(one_by_one, task, config, progress=False).fit()
    after = one_by_one.state_dict()
    assert all(torch.equal(value, after[key]) for key, value in together.state_dict().items())
    assert not all(torch.equal(value, make({**spec, "d_model": 16, "num_layers": 2}, task).state_dict()[key])
                   for key, value in after.items())  # and training moved them


def test_checkpoints_hold_only_tensors_and_plain_data(tmp_path):
    """Checkpoints load with torch.load(weights_only=True): no arbitrary object is unpickled, and a
    checkpoint carrying one is refused."""
    task = make_task("parity")
    spec = {"name": "lstm", "d_model": 8}
    config = TrainConfig(steps=4, batch_size=4, min_length=2, max_length=4, warmup=2, schedule="cosine",
                         early_stop_loss=None, checkpoint_every=2, device="cpu")
    Trainer(make(spec, task), task, config, tmp_path / "run.pt", progress=False).fit()
    saved = torch.load(tmp_path / "run.pt", weights_only=True)
    assert saved["step"] == 4 and saved["curve"]
    saved["extra"] = _Arbitrary()
    torch.save(saved, tmp_path / "bad.pt")
    with pytest.raises(Exception, match="weights-only loader refuses it"):
        Trainer(make(spec, task), task, config, progress=False).load(tmp_path / "bad.pt")


@pytest.mark.parametrize("schedule", ["constant", "cosine", "linear"])
def test_learning_rate_schedules_warm_up_then_decay_to_their_floor(schedule):
    """Warm-up rises linearly to the peak; cosine and linear then fall to min_lr_ratio of it at the
    last step (Movahedi et al. 2025: cosine to 0.001 of the peak; linear after 300 warm-up steps)."""
    task = make_task("parity")
    config = TrainConfig(steps=110, warmup=10, schedule=schedule, min_lr_ratio=0.001, lr=1e-3, device="cpu")
    trainer = Trainer(make({"name": "lstm", "d_model": 8}, task), task, config, progress=False)
    factors = [trainer._lr_factor(step) for step in range(110)]
    assert factors[:10] == pytest.approx([(i + 1) / 10 for i in range(10)]) and factors[10] == pytest.approx(1.0)
    middle = {"constant": 1.0, "cosine": 0.001 + 0.999 * 0.5, "linear": 0.001 + 0.999 * 0.5}[schedule]
    assert factors[60] == pytest.approx(middle)
    last = {"constant": 1.0, "cosine": 0.001 + 0.999 * 0.5 * (1 + math.cos(math.pi * 0.99)), "linear": 0.001 + 0.999 * 0.01}
    assert factors[-1] == pytest.approx(last[schedule])
    assert all(a >= b - 1e-12 for a, b in zip(factors[10:], factors[11:]))


def test_non_finite_loss_raises():
    task = make_task("parity")
    model = make({"name": "lstm", "d_model": 8}, task)
    with torch.no_grad():
        model.readout.weight.fill_(float("nan"))
    with pytest.raises(FloatingPointError, match="loss became nan"):
        Trainer(model, task, TrainConfig(steps=3, device="cpu"), progress=False).fit()


def test_early_stopping_stops_before_the_step_budget():
    task = make_task("modadd", m=2)
    model = make({"name": "lstm", "d_model": 32}, task)
    config = TrainConfig(steps=3000, lr=1e-2, min_length=1, max_length=3, val_every=50, early_stop_loss=0.05, device="cpu")
    trainer = Trainer(model, task, config, progress=False).fit()
    assert trainer.stopped_early and trainer.step < 3000


@pytest.mark.parametrize("damage", ["garbage", "truncated", "another model", "another optimizer"])
def test_an_unreadable_checkpoint_is_moved_aside_and_the_run_starts_again(tmp_path, damage):
    """A checkpoint that cannot be read, or does not fit the run, is renamed <name>.corrupt with a
    warning, and the run trains from step 0: the same weights as a run that never had a checkpoint."""
    task = make_task("parity")
    spec = {"name": "deltanet", "eig_range": "[-1,1]", "d_model": 8, "num_heads": 1}
    config = dict(batch_size=8, lr=1e-2, min_length=2, max_length=6, early_stop_loss=None, checkpoint_every=5, device="cpu")
    straight = make(spec, task)
    uninterrupted = Trainer(straight, task, TrainConfig(steps=12, **config), progress=False).fit()

    path = tmp_path / "run.pt"
    if damage == "garbage":
        path.write_bytes(b"not a checkpoint at all")
    else:
        Trainer(make(spec, task, seed=5), task, TrainConfig(steps=7, **config), path, progress=False).fit()
        saved = torch.load(path, weights_only=True)
        if damage == "truncated":
            path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
        elif damage == "another model":
            saved["model"] = make({"name": "lstm", "d_model": 8}, task).state_dict()
            torch.save(saved, path)
        else:  # the weights fit, the optimizer's state does not: the model is loaded first, then put back
            saved["optimizer"] = {"state": {}, "param_groups": []}
            torch.save(saved, path)
    damaged = path.read_bytes()

    with pytest.warns(RuntimeWarning, match=r"run\.pt.*moved to .*run\.pt\.corrupt, the run starts again from step 0"):
        trainer = Trainer(make(spec, task), task, TrainConfig(steps=12, **config), path, progress=False).fit()
    assert (tmp_path / "run.pt.corrupt").read_bytes() == damaged
    assert trainer.step == 12 and [p["step"] for p in trainer.curve] == [p["step"] for p in uninterrupted.curve]
    for a, b in zip(straight.state_dict().values(), trainer.model.state_dict().values()):
        torch.testing.assert_close(a, b)
    assert torch.load(path, weights_only=True)["step"] == 12  # a readable checkpoint in its place


def test_clip_null_trains_without_clipping():
    """`clip: null` turns clipping off: the weights equal those of a threshold no gradient reaches,
    and differ from those of one every gradient exceeds."""
    task = make_task("modadd", m=5)
    spec = {"name": "lstm", "d_model": 8}

    def trained(clip):
        config = TrainConfig(steps=10, batch_size=8, lr=1e-2, clip=clip, min_length=2, max_length=6,
                             early_stop_loss=None, device="cpu")
        model = make(spec, task)
        Trainer(model, task, config, progress=False).fit()
        return model.state_dict()

    off, never, always = trained(None), trained(1e9), trained(1e-4)
    assert all(torch.equal(value, never[key]) for key, value in off.items())
    assert not all(torch.equal(value, always[key]) for key, value in off.items())


def test_a_finished_trainer_frees_its_model_without_the_cycle_collector(tmp_path):
    """Nothing a Trainer holds refers back to it (the scheduler's rate function included), so its
    model, optimizer and last pass go the moment the run lets go of it: a worker that trains run
    after run, or a benchmark timing setting after setting, holds one model at a time."""
    import gc
    import weakref

    task = make_task("parity")
    config = TrainConfig(steps=4, batch_size=4, min_length=2, max_length=4, warmup=2, schedule="cosine",
                         early_stop_loss=None, checkpoint_every=2, device="cpu")
    trainer = Trainer(make({"name": "lstm", "d_model": 8}, task), task, config, tmp_path / "run.pt", progress=False)
    model, optimizer = weakref.ref(trainer.model), weakref.ref(trainer.optimizer)
    gc.collect()
    gc.disable()
    try:
        trainer.fit()
        assert trainer.scheduler.get_last_lr()[0] < config.lr  # the rate function still reads the trainer's schedule
        del trainer
        assert model() is None and optimizer() is None
    finally:
        gc.enable()
