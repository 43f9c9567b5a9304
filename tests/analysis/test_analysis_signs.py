"""`statetrack analyze signs`: the dominant coordinate of a real-diagonal parity model and what its sign tracks."""

import pytest
import torch

from statetrack.analysis.signs import bit_transitions, kind, prediction, sign_table
from statetrack.cli import main
from statetrack.models import zoo
from statetrack.store import Outcome, RunClaim, Store
from statetrack.tasks import make_task

SPEC = {"name": "bilinear", "structure": "diagonal", "hidden": 4, "d_model": 8, "mlp": False, "frozen_recurrence": True}


def chosen_model(task, a0, a1):
    """A diagonal model whose bits "0" and "1" have the transitions a0 and a1 (through its own embedding and norm)."""
    torch.manual_seed(0)
    model = zoo.build_model(SPEC, task.vocab_size, task.num_classes)
    with torch.no_grad():
        x = model.blocks[0].norm1(model.embedding.weight[[task.token_id("0"), task.token_id("1")]]).double()
        model.blocks[0].mixer.D.copy_(torch.linalg.pinv(x) @ torch.tensor([a0, a1], dtype=torch.float64))
    return model.eval()


def test_kinds():
    assert kind(0.5, -2.0) == "flips on 1" and kind(-0.5, 2.0) == "flips on 0"
    assert kind(0.5, 2.0) == kind(-0.5, -2.0) == "no flip"


@pytest.mark.parametrize("dominant, expected", [((1.5, -2.0), "flips on 1"), ((-1.5, 2.0), "flips on 0"), ((-1.5, -2.0), "no flip")])
def test_the_coordinate_with_the_largest_growth_rate_decides(dominant, expected):
    task = make_task("parity")
    a0 = [0.9, dominant[0], 1.1, -0.8]  # coordinate 1 grows fastest on balanced bits: |a0 a1| = 3
    a1 = [-1.2, dominant[1], -1.0, 1.3]  # the others flip but grow more slowly
    model = chosen_model(task, a0, a1)
    got0, got1 = bit_transitions(model, task)
    assert torch.allclose(got0, torch.tensor(a0, dtype=torch.float64), atol=1e-5)
    assert torch.allclose(got1, torch.tensor(a1, dtype=torch.float64), atol=1e-5)
    top = prediction(model, task)
    assert top["coordinate"] == 1 and top["kind"] == expected
    assert abs(top["lead"] - (0.5 * torch.tensor(3.0).log() - 0.5 * torch.tensor(1.1).log()).item()) < 1e-4
    assert [r["coordinate"] for r in sign_table(got0, got1)] == [1, 2, 0, 3]


def test_the_sign_of_the_dominant_coordinate_follows_the_parity_of_the_ones():
    """What the prediction rests on: with the dominant coordinate flipping on 1, the normalised state of
    the pure recurrence is that coordinate's unit vector with the sign of (-1)^ones at length 400."""
    task = make_task("parity")
    model = chosen_model(task, [0.9, 1.5, 1.1, -0.8], [-1.2, -2.0, -1.0, 1.3])
    a0, a1 = bit_transitions(model, task)
    bits = torch.randint(0, 2, (16, 400), generator=torch.Generator().manual_seed(1))
    a = torch.where(bits[..., None] == 1, a1, a0)  # [16, 400, 4]
    sign = a.sign().prod(1)
    log = a.abs().log().sum(1)
    state = sign * (log - log.max(-1, keepdim=True).values).exp()  # h0 = 1, renormalised
    assert torch.equal(state.abs().argmax(-1), torch.full((16,), 1))
    assert torch.equal(state[:, 1].sign(), (-1.0) ** bits.sum(1))


def test_cli_prints_one_line_per_run_and_refuses_other_structures(tmp_path, capsys):
    task_spec = {"name": "parity"}
    store = Store(tmp_path / "statetrack.db")
    for seed, (a0, a1) in enumerate([([1.5, 0.5, 0.5, 0.5], [-2.0, 0.5, 0.5, 0.5]), ([1.5, 0.5, 0.5, 0.5], [2.0, 0.5, 0.5, 0.5])]):
        model = chosen_model(make_task(**task_spec), a0, a1)
        run_id = f"feed1234beef000{seed}"
        config = {"experiment": "exp", "model": zoo.resolve(SPEC), "task": task_spec, "train": {"max_length": 10, "dataset_size": 2}, "eval": {}}
        store.start_run(RunClaim(run_id, "exp", zoo.display_name(SPEC), "parity", seed, 1e-2, config, "test"))
        store.finish_run(run_id, Outcome([{"length": 500, "accuracy": 1.0, "scaled_accuracy": 1.0, "samples": 8}], [], 0, model.num_parameters(), 0.0, 0.0))
        path = tmp_path / "exp" / "checkpoints" / f"{run_id}.pt"
        path.parent.mkdir(parents=True, exist_ok=True)
        torch.save({"model": model.state_dict()}, path)
    assert main(["analyze", "signs", "exp", "--results-dir", str(tmp_path), "--store", str(tmp_path / "statetrack.db")]) == 0
    out = capsys.readouterr().out
    assert "flips on 1" in out and "500: +1.00" in out
    assert "1 of 2 flips on 1 (tracks parity); 0 of 2 flips on 0" in out and "1 of 2 no flip (cannot track parity)" in out
    rotation = {**SPEC, "structure": "rotation"}
    store.start_run(RunClaim("feed1234beef0009", "rot", zoo.display_name(rotation), "parity", 0, 1e-2, {"experiment": "rot", "model": zoo.resolve(rotation), "task": task_spec, "train": {}, "eval": {}}, "test"))
    store.finish_run("feed1234beef0009", Outcome([], [], 0, 1, 0.0, 0.0))
    path = tmp_path / "rot" / "checkpoints" / "feed1234beef0009.pt"
    path.parent.mkdir(parents=True)
    torch.save({"model": zoo.build_model(rotation, 5, 2).state_dict()}, path)
    assert main(["analyze", "signs", "feed1234beef0009", "--results-dir", str(tmp_path), "--store", str(tmp_path / "statetrack.db")]) == 2
    assert "structure 'diagonal'" in capsys.readouterr().err
