"""`statetrack analyze heads`: beta per head, keys' PCA and the beta-range intervention (Siems et al. 2026, Figs. 6-9)
on a DeltaNet [-1,1] trained in the test, one of whose heads is kept from ever reaching beta > 1."""

import pytest
import torch

from cli_helpers import run_cli
from statetrack import StatetrackError
from statetrack.analysis.heads import components_for, delta_layers, head_analysis, key_explained_variance
from statetrack.models import zoo
from statetrack.store import Outcome, RunClaim, Store
from statetrack.tasks import make_task
from statetrack.training.evaluate import eval_generator, predict
from statetrack.training.train import TrainConfig, Trainer

TASK = {"name": "word_problem", "group": "Z2"}  # prefix parity at every position: dense supervision, learned in ~300 steps
SPEC = {"name": "deltanet", "eig_range": "[-1,1]", "num_heads": 2, "d_model": 16, "num_layers": 2}
LENGTH = 16


def save_run(tmp_path, model, model_spec, task_spec, run_id="feedc0ffee123456"):
    """A finished run in a store under tmp_path with `model` as its checkpoint (what the runner leaves behind)."""
    store = Store(tmp_path / "statetrack.db")
    config = {"experiment": "exp", "model": zoo.resolve(model_spec), "task": task_spec, "train": {"max_length": LENGTH}, "eval": {}}
    store.start_run(RunClaim(run_id, "exp", zoo.display_name(model_spec), task_spec["name"], 0, 1e-2, config, "test"))
    store.finish_run(run_id, Outcome([], [], 0, model.num_parameters(), 0.0, 0.0))
    path = tmp_path / "exp" / "checkpoints" / f"{run_id}.pt"
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"model": model.state_dict()}, path)
    return store


@pytest.fixture(scope="module")
def trained():
    """The model, the task, and an evaluation batch. Layer 0 head 0's beta bias is -20, so its beta
    stays near 0 (< 1) through training: it cannot give a negative eigenvalue, and another head has to
    track parity."""
    task = make_task(**TASK)
    torch.manual_seed(0)
    model = zoo.build_model(SPEC, task.vocab_size, task.num_classes)
    with torch.no_grad():
        model.blocks[0].mixer.b_proj.bias[0] = -20.0
    config = TrainConfig(steps=300, batch_size=32, lr=1e-2, min_length=2, max_length=LENGTH, early_stop_loss=None,
                         val_every=10**6, log_every=10**6, checkpoint_every=10**6, device="cpu")
    Trainer(model, task, config, progress=False).fit()
    model.eval()
    return model, task, task.sample(64, LENGTH, eval_generator(0, LENGTH))


def test_the_intervention_finds_the_state_tracking_head(trained):
    model, task, batch = trained
    result = head_analysis(model, batch, delta_layers(model))
    rows = {(r["layer"], r["head"]): r for r in result["rows"]}
    assert sorted(rows) == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert result["accuracy"] > 0.9  # the model solves the task, so what an intervention breaks means something
    top = result["rows"][0]
    assert top["drop"] > 0.3 and top["drop"] == max(r["drop"] for r in result["rows"])
    # the head whose beta never exceeds 1 has no negative eigenvalue to lose
    forced = rows[(0, 0)]
    assert forced["above_one"] == 0.0 and forced["beta_high"] < 1e-3
    assert (top["layer"], top["head"]) != (0, 0) and abs(forced["drop"]) < 0.02
    # the state-tracking head uses beta > 1 (a negative eigenvalue); halving every head's beta breaks at least as much
    assert top["above_one"] > 0.4
    assert result["accuracy"] - result["all_heads"] >= top["drop"] - 0.02
    assert len(top["curve"]) == 4 and top["curve"][-1] == top["accuracy"]


def test_all_heads_halved_is_the_same_model_with_eigenvalues_in_zero_one(trained):
    """beta = 2 sigmoid(.) x 0.5 = sigmoid(.): the intervention on every head is DeltaNet [0,1] with the same weights."""
    model, task, batch = trained
    result = head_analysis(model, batch, delta_layers(model), sweep=1)
    positive = zoo.build_model({**SPEC, "eig_range": "[0,1]"}, task.vocab_size, task.num_classes)
    positive.load_state_dict(model.state_dict())
    predicted = predict(positive.eval(), batch.inputs)
    assert result["all_heads"] == ((predicted == batch.targets) & batch.mask).sum().item() / batch.mask.sum().item()
    # the layers' gates are the class's again afterwards, and the model predicts as before
    assert all("_gates" not in block.mixer.__dict__ for block in model.blocks)
    assert ((predict(model, batch.inputs) == batch.targets) & batch.mask).sum().item() / batch.mask.sum().item() == result["accuracy"]


def test_cli_prints_the_table_and_writes_three_plots(trained, tmp_path, capsys):
    model, task, _ = trained
    save_run(tmp_path, model, SPEC, TASK)
    code, out, err = run_cli(capsys, "analyze", "heads", "feedc0", "--results-dir", str(tmp_path), "--samples", "32",
                             "--sweep", "2", "--out", str(tmp_path / "plots"))
    assert code == 0, err
    assert "DeltaNet [-1,1]" in out and "state-tracking head: layer" in out
    assert "beta median" in out and "keys 90%" in out and out.count("+0.") + out.count("-0.") >= 4
    for kind in ("beta", "keys", "intervention"):
        path = tmp_path / "plots" / f"heads_feedc0ffee123456_{kind}.png"
        assert path.is_file() and path.stat().st_size > 0 and f"plot: {path}" in out
    # default plot paths sit next to the experiment's report
    code, out, _ = run_cli(capsys, "analyze", "heads", "exp", "--model", "DeltaNet [-1,1]", "--results-dir", str(tmp_path),
                           "--samples", "8", "--sweep", "1")
    assert code == 0 and (tmp_path / "exp" / "heads_feedc0ffee123456_keys.png").is_file()


def test_cli_errors_are_one_line(tmp_path, capsys):
    task = make_task(name="parity_lm")
    mamba = {"name": "mamba", "d_model": 8, "d_state": 4}
    save_run(tmp_path, zoo.build_model(mamba, task.vocab_size, task.num_classes), mamba, {"name": "parity_lm"})
    code, _, err = run_cli(capsys, "analyze", "heads", "feed", "--results-dir", str(tmp_path))
    assert code == 2 and "deltanet, gated_deltanet, deltaproduct" in err and "Mamba" in err and len(err.strip().splitlines()) == 1
    code, _, err = run_cli(capsys, "analyze", "heads", "nope", "--results-dir", str(tmp_path))
    assert code == 2 and "nope" in err
    code, _, err = run_cli(capsys, "analyze", "heads", "feed", "--results-dir", str(tmp_path), "--samples", "0")
    assert code == 2 and "--samples" in err


@pytest.mark.parametrize("spec, steps", [
    ({"name": "deltaproduct", "n_h": 2, "eig_range": "[-1,1]", "d_model": 8, "num_heads": 2, "num_layers": 2}, 2),
    ({"name": "gated_deltanet", "eig_range": "[-1,1]", "d_model": 8, "num_heads": 2, "num_layers": 1}, 1),
])
def test_deltaproduct_and_gated_deltanet(spec, steps):
    torch.manual_seed(0)
    task = make_task(**TASK)
    model = zoo.build_model(spec, task.vocab_size, task.num_classes).eval()
    batch = task.sample(4, 6, torch.Generator().manual_seed(0))
    result = head_analysis(model, batch, delta_layers(model), sweep=2)
    assert len(result["rows"]) == 2 * spec["num_layers"]
    assert all(r["beta"].numel() == 4 * 6 * steps for r in result["rows"])  # every micro-step of every token
    assert all(0 < r["beta_low"] <= r["beta_median"] <= r["beta_high"] < 2 for r in result["rows"])


def test_key_explained_variance_against_a_known_spectrum():
    """Keys spread along 2 axes with variances 9 and 1 (head 0) and along 1 axis (head 1)."""
    g = torch.Generator().manual_seed(0)
    n, d = 4000, 6
    k = torch.zeros(n, 2, d, dtype=torch.float64)
    k[:, 0, 0] = 3 * torch.randn(n, generator=g, dtype=torch.float64)
    k[:, 0, 3] = torch.randn(n, generator=g, dtype=torch.float64)
    k[:, 1, 5] = 5 + torch.randn(n, generator=g, dtype=torch.float64)  # offset: the PCA centers first
    cumulative = key_explained_variance(k)
    assert cumulative.shape == (2, d)
    assert cumulative[0, 0].item() == pytest.approx(0.9, abs=0.01) and cumulative[0, 1].item() == pytest.approx(1.0)
    assert cumulative[1, 0].item() == pytest.approx(1.0)
    assert components_for(cumulative, share=0.95).tolist() == [2, 1]
    assert components_for(torch.tensor([[0.5, 0.95, 1.0]]), share=0.9).tolist() == [2]


def test_a_model_without_delta_rule_layers_is_refused():
    model = zoo.build_model({"name": "lstm", "d_model": 8}, 3, 2)
    with pytest.raises(StatetrackError, match="deltanet, gated_deltanet, deltaproduct"):
        delta_layers(model)
