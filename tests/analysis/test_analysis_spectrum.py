"""`statetrack analyze spectrum`: finds a run, loads its checkpoint, reports the transition spectrum."""

import pytest
import torch

from statetrack import StatetrackError
from statetrack.analysis.spectrum import analyze_run, layer_spectra, spectrum_stats
from statetrack.cli import main
from statetrack.models import zoo
from statetrack.store import Outcome, RunClaim, Store
from statetrack.tasks import make_task


def fake_run(tmp_path, model_spec, run_id="abc123def4567890", bias=3.0):
    """A finished run in a store with a checkpoint whose DeltaNet beta is pushed to the top of its range."""
    task_spec = {"name": "parity_lm"}
    task = make_task(**task_spec)
    torch.manual_seed(0)
    model = zoo.build_model(model_spec, task.vocab_size, task.num_classes)
    if hasattr(model.blocks[0].mixer, "b_proj"):
        with torch.no_grad():
            model.blocks[0].mixer.b_proj.bias.fill_(bias)
    store = Store(tmp_path / "statetrack.db")
    config = {"experiment": "exp", "model": zoo.resolve(model_spec), "task": task_spec, "train": {"max_length": 12}, "eval": {}}
    store.start_run(RunClaim(run_id, "exp", zoo.display_name(model_spec), "parity_lm", 0, 1e-3, config, "test"))
    store.finish_run(run_id, Outcome([], [], 0, model.num_parameters(), 0.0, 0.0))
    path = tmp_path / "exp" / "checkpoints" / f"{run_id}.pt"
    path.parent.mkdir(parents=True)
    torch.save({"model": model.state_dict()}, path)
    return store


@pytest.mark.parametrize("eig_range, negative", [("[-1,1]", True), ("[0,1]", False)])
def test_spectrum_of_a_deltanet_run_shows_negative_eigenvalues_only_for_minus_one_one(tmp_path, eig_range, negative):
    store = fake_run(tmp_path, {"name": "deltanet", "eig_range": eig_range, "d_model": 8, "num_heads": 1})
    text, plot = analyze_run(store, "abc123", tmp_path, samples=4)
    assert plot.is_file() and plot.stat().st_size > 0
    assert f"DeltaNet {eig_range}" in text and "layer 0 (DeltaNet)" in text
    assert ("negative 0.0%" not in text) == negative


def test_cli_by_experiment_and_model_name(tmp_path, capsys):
    fake_run(tmp_path, {"name": "mamba", "eig_range": "[-1,1]", "d_model": 8, "d_state": 4})
    out = tmp_path / "plots"
    code = main(["analyze", "spectrum", "exp", "--model", "Mamba [-1,1]", "--results-dir", str(tmp_path), "--samples", "2", "--out", str(out)])
    assert code == 0 and len(list(out.glob("spectrum_*.png"))) == 1
    assert "plot:" in capsys.readouterr().out


def test_cli_errors_name_what_exists(tmp_path, capsys):
    fake_run(tmp_path, {"name": "mamba", "d_model": 8, "d_state": 4})
    assert main(["analyze", "spectrum", "nope", "--results-dir", str(tmp_path)]) == 2
    assert "experiment with results (exp)" in capsys.readouterr().err
    assert main(["analyze", "spectrum", "exp", "--results-dir", str(tmp_path)]) == 2
    assert "abc123def4567890 = Mamba [0,1]" in capsys.readouterr().err


def test_models_without_a_linear_transition_are_an_error(tmp_path, capsys):
    store = fake_run(tmp_path, {"name": "transformer", "d_model": 8})
    with pytest.raises(StatetrackError, match="has no linear state transition to materialise in any layer"):
        analyze_run(store, "abc", tmp_path, samples=2)
    assert main(["analyze", "spectrum", "abc123def4567890", "--results-dir", str(tmp_path), "--samples", "2"]) == 2
    assert "the spectrum applies to linear RNNs" in capsys.readouterr().err


def test_layer_spectra_of_a_two_layer_model_and_stats():
    torch.manual_seed(1)
    model = zoo.build_model({"name": "deltaproduct", "n_h": 2, "eig_range": "[-1,1]", "d_model": 8, "num_layers": 2}, 3, 2)
    spectra = layer_spectra(model, torch.randint(0, 3, (2, 5)))
    assert [s["layer"] for s in spectra] == [0, 1]
    stats = spectrum_stats(spectra[0]["eigenvalues"])
    assert stats["count"] == 2 * 5 * 8 and stats["max_modulus"] <= 1 + 1e-5
    with pytest.raises(StatetrackError):
        from statetrack.analysis.spectrum import plot_spectra

        plot_spectra([{"layer": 0, "mixer": "X", "eigenvalues": None}], "t", "/tmp/unused.png")
