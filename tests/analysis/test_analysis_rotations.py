"""`statetrack analyze rotations`: the angles of a rotation bilinear run per plane, ranked by readout weight."""

import math

import pytest
import torch

from statetrack.analysis.constructions import construct
from statetrack.analysis.rotations import harmonic_table, plane_readout_weights, rotation_angles
from statetrack.cli import main
from statetrack.models import zoo
from statetrack.store import Outcome, RunClaim, Store
from statetrack.tasks import make_task

M = 5
SPEC = {"name": "bilinear", "structure": "rotation", "hidden": 6, "d_model": 10, "mlp": False}


def known_angles_model(task):
    """Three planes with chosen angles theta_j(a) and readout norms: plane 1 rotates by exactly 2 * (2 pi a / 5)
    (k = 2) and reads out most; plane 2 by 0.3 a (not harmonic); plane 0 by a * 2 pi * 0.9 / 5 (0.1 off k = 1)."""
    torch.manual_seed(0)
    model = zoo.build_model(SPEC, task.vocab_size, task.num_classes)
    a = torch.tensor([float(w) if w.isdigit() else 0.0 for w in task.vocab], dtype=torch.float64)
    targets = torch.stack([a * 2 * math.pi * 0.9 / M, a * 2 * 2 * math.pi / M, 0.3 * a], 1)  # [vocab, planes]
    with torch.no_grad():
        x = model.blocks[0].norm1(model.embedding.weight).double()
        mixer = model.blocks[0].mixer
        mixer.Theta.copy_(torch.linalg.pinv(x) @ targets)
        out = torch.randn(10, 3, 2)
        out = out / out.pow(2).sum((0, 2), keepdim=True).sqrt() * torch.tensor([1.0, 3.0, 0.5])[None, :, None]  # plane norms
        mixer.out_proj.weight.copy_(out.reshape(10, 6))
    return model.eval()


def test_table_ranks_planes_by_readout_weight_and_measures_harmonics():
    task = make_task("modadd", m=M)
    model = known_angles_model(task)
    assert torch.allclose(plane_readout_weights(model), torch.tensor([1.0, 3.0, 0.5], dtype=torch.float64))
    rows = harmonic_table(model, task)
    assert [r["plane"] for r in rows] == [1, 0, 2]
    top, off, random = rows
    assert top["k"] == 2 and top["distance"] < 1e-5 and top["worst"] < 1e-4
    assert off["k"] == 1 and abs(off["distance"] - 0.1) < 1e-5 and abs(off["angle"] - 2 * math.pi * 0.9 / M) < 1e-5
    assert abs(off["worst"] - 0.4) < 1e-4  # a = 4: 4 * 0.9 = 3.6, 0.4 from 4 * k
    assert random["k"] == 0 and abs(random["value"] - 0.3 * M / (2 * math.pi)) < 1e-5
    angles = rotation_angles(model, [task.token_id("3")])[0]
    assert abs(angles[2].item() - 0.9) < 1e-5 and abs(angles[1].item() - math.remainder(6 * 2 * math.pi / M, 2 * math.pi)) < 1e-5


def test_the_exact_construction_is_harmonic():
    task = make_task("modadd", m=7)
    [row] = harmonic_table(construct(task, "rotation").model, task)
    assert row["k"] == 1 and row["distance"] < 1e-5 and row["worst"] < 1e-4


def fake_run(tmp_path, model, spec, task_spec, run_id="feed1234beef5678"):
    store = Store(tmp_path / "statetrack.db")
    config = {"experiment": "exp", "model": zoo.resolve(spec), "task": task_spec, "train": {"max_length": 10}, "eval": {}}
    store.start_run(RunClaim(run_id, "exp", zoo.display_name(spec), task_spec["name"], 0, 1e-3, config, "test"))
    store.finish_run(run_id, Outcome([], [], 0, model.num_parameters(), 0.0, 0.0))
    path = tmp_path / "exp" / "checkpoints" / f"{run_id}.pt"
    path.parent.mkdir(parents=True)
    torch.save({"model": model.state_dict()}, path)
    return store


def test_cli_prints_the_table_and_writes_the_plot(tmp_path, capsys):
    task_spec = {"name": "modadd", "m": M}
    fake_run(tmp_path, known_angles_model(make_task(**task_spec)), SPEC, task_spec)
    code = main(["analyze", "rotations", "exp", "--model", "Bilinear rotation", "--results-dir", str(tmp_path)])
    out = capsys.readouterr().out
    assert code == 0
    plot = tmp_path / "exp" / "rotations_feed1234beef5678.png"
    assert plot.is_file() and plot.stat().st_size > 0 and f"plot: {plot}" in out
    assert "3 planes, 1 within 0.05 of a multiple of 2 pi / 5" in out
    first = out.splitlines()[4].split()  # rank, plane, weight, theta(1), value, k, distance, worst
    assert first[:2] == ["1", "1"] and first[2] == "3.0000" and first[5] == "2" and first[6] == "0.0000"


@pytest.mark.parametrize("spec, task_spec, expected", [
    ({"name": "bilinear", "structure": "full", "d_model": 8, "hidden": 4}, {"name": "modadd", "m": 5}, "structure 'rotation'"),
    (SPEC, {"name": "parity"}, "needs a task on Z_m"),
])
def test_cli_errors_are_one_line(tmp_path, capsys, spec, task_spec, expected):
    task = make_task(**task_spec)
    fake_run(tmp_path, zoo.build_model(spec, task.vocab_size, task.num_classes), spec, task_spec)
    assert main(["analyze", "rotations", "feed", "--results-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and expected in err
