"""Data efficiency: training on a fixed set of N examples (`train.dataset_size`), its expansion in a
spec, and the report's accuracy-against-N plot and table (Ebrahimi & Memisevic 2025, Fig. 2)."""

import json
import textwrap
from collections import Counter

import pytest
import torch

from statetrack.cli import main
from statetrack.errors import StatetrackError
from statetrack.experiments import expand, load_spec
from statetrack.experiments.runner import RunOptions, run_experiment
from statetrack.experiments.spec import resolve
from statetrack.models import zoo
from statetrack.results.report import write_report
from statetrack.results.scoring import score_store
from statetrack.results.selection import data_efficiency, summarize
from statetrack.store import Store
from statetrack.tasks import make_task
from statetrack.tasks.base import masked_loss_and_accuracy
from statetrack.training.evaluate import Sampling, evaluate_lengths
from statetrack.training.train import FixedTrainingSet, TrainConfig, Trainer


def make(spec, task, seed=0):
    torch.manual_seed(seed)
    return zoo.build_model(spec, task.vocab_size, task.num_classes)


def examples(training_set):
    """The set's examples as hashable token tuples."""
    return [tuple(row.tolist()) for bucket in training_set.buckets for row in bucket.inputs]


def recording(model):
    """Every input row the model is run on, in order."""
    seen = []
    model.register_forward_pre_hook(lambda module, args: seen.extend(tuple(row.tolist()) for row in args[0]))
    return seen


CONFIG = dict(batch_size=8, lr=1e-2, min_length=2, max_length=6, early_stop_loss=None, device="cpu")


# ---- the trainer -------------------------------------------------------------------------------
def test_two_examples_are_all_the_trainer_ever_sees():
    task = make_task("modadd", m=3)
    model = make({"name": "lstm", "d_model": 8}, task)
    seen = recording(model)
    trainer = Trainer(model, task, TrainConfig(steps=30, dataset_size=2, **CONFIG), progress=False)
    fixed = examples(trainer.training_set)
    assert len(fixed) == 2
    trainer.fit()
    assert set(seen) == set(fixed)
    # each example once per epoch: 30 steps are 30 / batches_per_epoch whole epochs (1 or 2 batches)
    counts = Counter(seen)
    assert all(c == 30 // trainer.training_set.batches_per_epoch for c in counts.values()), counts
    assert trainer.curve[-1]["epochs"] == pytest.approx(trainer.epochs) and trainer.epochs == 30 / trainer.training_set.batches_per_epoch


def test_four_examples_are_memorised_not_generalised():
    """The protocol's point: an LSTM fits 4 parity examples perfectly and stays at chance on fresh
    inputs of the same lengths, while the same budget on fresh batches learns parity."""
    task = make_task("modadd", m=2)
    scores = {}
    for size in (4, None):
        model = make({"name": "lstm", "d_model": 16}, task)
        config = TrainConfig(steps=300, batch_size=32, lr=1e-2, min_length=2, max_length=6, early_stop_loss=None,
                             device="cpu", dataset_size=size)
        trainer = Trainer(model, task, config, progress=False).fit()
        if size:
            with torch.no_grad():
                assert all(masked_loss_and_accuracy(model(b.inputs)[0], b)[1].item() == 1.0 for b in trainer.training_set.buckets)
        scores[size] = evaluate_lengths(model, task, [6], Sampling(samples=256))[0]["scaled_accuracy"]
    assert scores[4] < 0.3 and scores[None] > 0.9, scores


def test_fresh_batches_without_dataset_size():
    task = make_task("modadd", m=3)
    model = make({"name": "lstm", "d_model": 8}, task)
    seen = recording(model)
    trainer = Trainer(model, task, TrainConfig(steps=10, **CONFIG), progress=False).fit()
    assert trainer.training_set is None and trainer.epochs is None and "epochs" not in trainer.curve[-1]
    assert len(set(seen)) > 20  # 80 rows drawn fresh: far more than a handful of distinct ones


def test_every_example_once_per_epoch_in_batches_of_at_most_batch_size():
    task = make_task("modadd", m=3)
    training_set = FixedTrainingSet(task, 50, range(2, 7), 8, torch.Generator().manual_seed(0))
    sizes = [len(bucket.inputs) for bucket in training_set.buckets]
    assert sum(sizes) == len(training_set) == 50 and set(training_set.lengths) <= set(range(2, 7))
    assert len(set(training_set.lengths)) == len(sizes) >= 4  # one bucket per length drawn
    assert max(sizes) > 8  # some bucket needs more than one batch
    orders = []
    for epoch in range(3):
        plan = training_set.epoch_plan(epoch)
        orders.append([(bucket, index.tolist()) for bucket, index in plan])
        for bucket, n in enumerate(sizes):
            parts = [index for b, index in plan if b == bucket]
            assert sorted(torch.cat(parts).tolist()) == list(range(n))  # each example exactly once
            batch_sizes = [len(p) for p in parts]
            assert len(parts) == -(-n // 8) and max(batch_sizes) <= 8 and max(batch_sizes) - min(batch_sizes) <= 1
        for position, (bucket, index) in enumerate(plan):  # what the trainer is served
            batch = training_set.batch(epoch * training_set.batches_per_epoch + position)
            assert torch.equal(batch.inputs, training_set.buckets[bucket].inputs[index])
            assert torch.equal(batch.targets, training_set.buckets[bucket].targets[index])
    assert orders[0] != orders[1] != orders[2]  # reshuffled every epoch


def test_the_set_is_reproducible_from_the_seed():
    task = make_task("modadd", m=3)
    build = lambda seed: Trainer(make({"name": "lstm", "d_model": 8}, task), task,  # noqa: E731
                                 TrainConfig(steps=5, dataset_size=20, seed=seed, **CONFIG), progress=False)
    a, b, c = build(0), build(0), build(1)
    assert examples(a.training_set) == examples(b.training_set) != examples(c.training_set)
    for step in (0, 3, 17):
        assert torch.equal(a.training_set.batch(step).inputs, b.training_set.batch(step).inputs)


def test_resume_from_checkpoint_equals_uninterrupted(tmp_path):
    task = make_task("modadd", m=3)
    spec = {"name": "deltanet", "eig_range": "[-1,1]", "d_model": 8, "num_heads": 1}
    config = dict(CONFIG, dataset_size=12, checkpoint_every=5, log_every=1)

    straight = make(spec, task)
    seen_straight = recording(straight)
    full = Trainer(straight, task, TrainConfig(steps=23, **config), progress=False).fit()

    interrupted = make(spec, task)
    Trainer(interrupted, task, TrainConfig(steps=9, **config), tmp_path / "run.pt", progress=False).fit()
    resumed = make(spec, task, seed=99)  # different init: everything must come from the checkpoint
    seen_resumed = recording(resumed)
    trainer = Trainer(resumed, task, TrainConfig(steps=23, **config), tmp_path / "run.pt", progress=False).fit()
    assert trainer.step == 23 and trainer.training_set.batches_per_epoch < 14  # the resume crosses epochs
    assert seen_resumed == seen_straight[-len(seen_resumed):]
    for a, b in zip(straight.state_dict().values(), resumed.state_dict().values()):
        torch.testing.assert_close(a, b)
    assert len(trainer.curve) == len(full.curve) == 23
    for a, b in zip(trainer.curve, full.curve):  # loss, accuracy and epochs at every step
        assert a == pytest.approx(b)


@pytest.mark.parametrize("value", [0, -3, 2.5, True, "10"])
def test_dataset_size_must_be_a_positive_integer(value):
    with pytest.raises(StatetrackError, match="dataset_size must be an integer >= 1"):
        TrainConfig.from_dict({"dataset_size": value})


# ---- the spec ----------------------------------------------------------------------------------
SPEC = """
name: dataeff
description: accuracy against the number of training examples
task: {name: modadd, m: 3}
models:
  - {name: lstm}
  - {name: deltanet, eig_range: "[-1,1]", num_heads: 1}
model_defaults: {d_model: 8}
train: {steps: 12, batch_size: 8, min_length: 2, max_length: 5, early_stop_loss: null, device: cpu, dataset_size: %(sizes)s}
eval: {lengths: [5, 9], samples: 16}
lrs: [1.0e-2]
seeds: [0, 1]
"""


@pytest.fixture
def spec_file(tmp_path):
    def write(sizes="[2, 16]"):
        path = tmp_path / "dataeff.yaml"
        path.write_text(textwrap.dedent(SPEC % {"sizes": sizes}))
        return str(path)

    return write


def test_a_list_of_sizes_expands_to_one_run_per_size(spec_file, tiny_spec):
    runs = expand(load_spec(spec_file("[2, 16, 2]")))  # a value listed twice is one run
    assert len(runs) == 2 * 2 * 2
    assert Counter(r.train["dataset_size"] for r in runs) == {2: 4, 16: 4}
    assert all(r.dataset_size == r.train["dataset_size"] for r in runs)
    single = expand(load_spec(spec_file("16")))
    assert {r.id for r in single} == {r.id for r in runs if r.dataset_size == 16}  # same config, same id
    override = expand(load_spec(spec_file("16"), overrides=["train.dataset_size=[2,16]"], name=runs[0].experiment))
    assert {r.id for r in override} == {r.id for r in runs}
    # specs without the key keep their train dict (and so their run ids) as written
    assert all("dataset_size" not in r.train and r.dataset_size is None for r in expand(load_spec(str(tiny_spec()))))


@pytest.mark.parametrize("sizes", ["[]", "[2, 0]", "[2, -1]", "[2, 1.5]", "[true]", "0"])
def test_bad_sizes_are_one_line_errors(spec_file, sizes):
    with pytest.raises(StatetrackError, match="dataset_size must be") as error:
        expand(load_spec(spec_file(sizes)))
    assert "\n" not in str(error.value)


# ---- scoring and the report ----------------------------------------------------------------------
def test_data_efficiency_selects_the_lr_per_size():
    # (N, lr, seed) -> accuracy at length 10 and 20 (chance 0: scaled == accuracy)
    table = {
        (2, 0.1, 0): (0.5, 0.1), (2, 0.1, 1): (0.5, 0.3),    # lr 0.1 wins at N=2: mean score 0.35
        (2, 0.01, 0): (0.2, 0.2), (2, 0.01, 1): (0.2, 0.2),
        (50, 0.1, 0): (0.6, 0.6), (50, 0.1, 1): (0.6, 0.6),
        (50, 0.01, 0): (1.0, 0.9), (50, 0.01, 1): (1.0, 0.7),  # lr 0.01 wins at N=50: mean score 0.9
    }
    rows = [{"task": "t", "model": "m", "dataset_size": size, "lr": lr, "seed": seed, "length": n, "accuracy": a, "scaled_accuracy": a}
            for (size, lr, seed), accs in table.items() for n, a in zip((10, 20), accs)]
    summary = summarize(rows)
    assert [(e["dataset_size"], e["lr"]) for e in summary] == [(2, 0.1), (50, 0.01)]
    [entry] = data_efficiency(summary)
    assert entry["length"] == 20 and list(entry["by_size"]) == [2, 50]
    # 0.1 and 0.3: the sample std (n - 1) is 0.1 * sqrt(2)
    assert entry["by_size"][2]["mean"] == pytest.approx(0.2) and entry["by_size"][2]["std"] == pytest.approx(0.1 * 2**0.5)
    assert entry["by_size"][50]["mean"] == pytest.approx(0.8) and entry["by_size"][50]["best"] == pytest.approx(0.9)
    # runs of a single size (or none) give no data-efficiency entry
    assert data_efficiency(summarize([r for r in rows if r["dataset_size"] == 2])) == []
    assert data_efficiency(summarize([{**r, "dataset_size": None} for r in rows])) == []


def test_report_plots_accuracy_against_n(spec_file, tmp_path, capsys):
    results = tmp_path / "r"
    run_experiment(resolve(spec_file()), results, RunOptions(workers=1, progress=False), log=lambda *_: None)
    store = Store(results / "statetrack.db")
    rows = store.results("dataeff")
    assert len(rows) == 2 * 2 * 2 * 2 and Counter(r["dataset_size"] for r in rows) == {2: 8, 16: 8}

    out = write_report(score_store(store, "dataeff", run_data=True), results)
    assert (out / "accuracy_vs_dataset_size.png").stat().st_size > 0
    md = (out / "report.md").read_text()
    assert "## Data efficiency" in md and "| model | length | N=2 | N=16 |" in md and "task modadd(m=3)" in md  # one task: named once
    assert md.count("| LSTM | 9 |") == 1  # one row per model, figures at length 9
    headline = md.split("## Headline")[1].split("##")[0]
    for model in ("LSTM", "DeltaNet [-1,1]"):  # runs differing only in N stay apart
        assert f"| {model} N=2 |" in headline and f"| {model} N=16 |" in headline
    assert "accuracy_vs_dataset_size" in (out / "report.html").read_text()

    main(["results", "dataeff", "--json", "--results-dir", str(results)])
    printed = json.loads(capsys.readouterr().out)
    assert {r["dataset_size"] for r in printed} == {2, 16}


def test_report_without_sizes_has_no_data_efficiency_section(tiny_spec, tmp_path):
    results = tmp_path / "r"
    run_experiment(resolve(str(tiny_spec(steps=5, seeds="[0]"))), results, RunOptions(workers=1, progress=False), log=lambda *_: None)
    store = Store(results / "statetrack.db")
    assert all("dataset_size" not in r for r in store.results("tiny"))
    out = write_report(score_store(store, "tiny", run_data=True), results)
    assert not (out / "accuracy_vs_dataset_size.png").exists()
    assert "Data efficiency" not in (out / "report.md").read_text() and "N=" not in (out / "report.md").read_text()


def test_a_balanced_fixed_set_holds_every_answer():
    """Two parity examples: one odd, one even, for every seed (Ebrahimi & Memisevic 2025's setting)."""
    from statetrack.tasks import make_task
    from statetrack.training.train import FixedTrainingSet, _last_answer

    task = make_task("parity")
    for seed in range(10):
        fixed = FixedTrainingSet(task, 2, range(2, 11), 64, torch.Generator().manual_seed(seed), balanced=True)
        answers = sorted(a for b in fixed.buckets for a in _last_answer(b).tolist())
        assert answers == [0, 1]
        for b in fixed.buckets:  # the answers are the task's own
            assert (_last_answer(b) == b.inputs[:, 1:-1].sub(task.token_id("0")).sum(1) % 2).all()
    modadd = make_task("modadd", m=5)
    fixed = FixedTrainingSet(modadd, 12, range(2, 5), 64, torch.Generator().manual_seed(0), balanced=True)
    counts = torch.bincount(torch.cat([_last_answer(b) for b in fixed.buckets]), minlength=5).tolist()
    assert sorted(counts) == [2, 2, 2, 3, 3]


def test_dataset_balanced_without_a_fixed_set_is_an_error():
    from statetrack.training.train import TrainConfig

    with pytest.raises(StatetrackError, match="dataset_balanced needs a fixed training set"):
        TrainConfig.from_dict({"dataset_balanced": True})
