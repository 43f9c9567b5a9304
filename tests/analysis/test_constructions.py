"""Exact bilinear constructions: every structure simulates its automaton at every position, through the
normal chunked evaluation path, at 10,000 and 100,000 steps; bad requests get one-line errors."""

import math

import pytest
import torch

from cli_helpers import run_cli
from statetrack import StatetrackError
from statetrack.analysis.constructions import Automaton, build_exact, construct, evaluate_construction
from statetrack.tasks import make_task
from statetrack.training.evaluate import predict


def fsm_states(task, inputs):
    """Independent oracle for the fsm task: the machine's state after every token (-1 before the first symbol)."""
    out = torch.full_like(inputs, -1)
    for b in range(inputs.shape[0]):
        state = -1
        for t, token in enumerate(inputs[b].tolist()):
            word = task.vocab[token]
            if word.isdigit():
                state = int(word) if state < 0 else int(task.transitions[state, int(word)])
            out[b, t] = state
    return out


@pytest.mark.parametrize("structure, machine_seed", [("full", 0), ("full", 1), ("cp", 1), ("block", 2)])
def test_fsm_exact_at_10000_steps_and_at_every_position(structure, machine_seed):
    task = make_task("fsm", states=6, machine_seed=machine_seed)
    built = construct(task, structure)
    assert built.margin > 1.0
    [row] = evaluate_construction(built.model, task, [10_000], samples=4, batch_size=4)
    assert row["accuracy"] == 1.0
    batch = task.sample(2, 3000, torch.Generator().manual_seed(5))
    predicted = predict(built.model, batch.inputs, chunk_size=1024)
    states = fsm_states(task, batch.inputs)
    known = states >= 0
    assert torch.equal(predicted[known], states[known])  # every position after the first symbol, not only [EOI]


@pytest.mark.parametrize("group, structure", [("S3", "full"), ("A4", "full"), ("A5", "full"), ("S3", "cp"), ("A4", "block"),
                                              ("Z2xZ3xZ4", "rotation"), ("Z2xZ2", "diagonal")])
def test_word_problems_exact_at_10000_steps(group, structure):
    task = make_task("word_problem", group=group)  # targets: prefix products at every position (sympy-checked tables)
    built = construct(task, structure)
    [row] = evaluate_construction(built.model, task, [10_000], samples=4, batch_size=4)
    assert row["accuracy"] == 1.0


def test_modadd_by_one_rotation_plane_with_angle_two_pi_over_m():
    task = make_task("modadd", m=20)
    built = construct(task, "rotation")
    mixer = built.model.blocks[0].mixer
    assert mixer.hidden == 2  # one plane (Ebrahimi & Memisevic 2025, Prop. 2.3)
    x = built.model.blocks[0].norm1(built.model.embedding.weight)
    theta = (x @ mixer.Theta)[:, 0].detach().double()
    for a in range(20):
        expected = 2 * math.pi * a / 20
        assert abs(math.remainder(theta[task.token_id(str(a))].item() - expected, 2 * math.pi)) < 1e-5
    assert theta[:3].abs().max() < 1e-5  # [PAD], [BOS], [EOI] do not rotate
    [row] = evaluate_construction(built.model, task, [10_000], samples=8, batch_size=8)
    assert row["accuracy"] == 1.0


def test_parity_by_a_real_diagonal_sign_flip():
    task = make_task("parity")
    built = construct(task, "diagonal")
    mixer = built.model.blocks[0].mixer
    a = (built.model.blocks[0].norm1(built.model.embedding.weight) @ mixer.D).detach()[:, 0]
    assert torch.allclose(a, torch.tensor([1.0, 1.0, 1.0, 1.0, -1.0]), atol=1e-5)  # specials, bit 0: +1; bit 1: -1 (Prop. 2.4)
    [row] = evaluate_construction(built.model, task, [10_000], samples=8, batch_size=8)
    assert row["accuracy"] == 1.0


def divisible_by_three():
    """Binary numbers read most significant bit first: state = value mod 3, answer = (value mod 3 == 0).
    Two classes over three states: class 0 holds two of them."""
    transitions = torch.tensor([[(2 * q + b) % 3 for q in range(3)] for b in range(2)])
    return Automaton(transitions, 0, torch.tensor([1, 0, 0]), 2, "divisible by 3")


@pytest.mark.parametrize("structure", ["full", "cp", "block"])
def test_any_automaton_with_labels_shared_by_states(structure):
    built = build_exact(divisible_by_three(), structure)
    bits = torch.randint(0, 2, (3, 300), generator=torch.Generator().manual_seed(0))
    predicted = predict(built.model, bits, chunk_size=64)
    for b in range(3):
        value = 0
        for t, bit in enumerate(bits[b].tolist()):
            value = 2 * value + bit  # the oracle: Python integers
            assert predicted[b, t].item() == int(value % 3 == 0)


def test_rotation_of_a_counter_with_labels_shared_by_states_uses_every_character():
    # Z4 counter, answer = parity of the count: labels are shared, so the state vectors are made orthonormal
    transitions = torch.stack([torch.arange(4), (torch.arange(4) + 1) % 4])
    built = build_exact(Automaton(transitions, 0, torch.arange(4) % 2, 2, "Z4 mod 2"), "rotation")
    assert built.model.blocks[0].mixer.hidden == 8
    tokens = torch.randint(0, 2, (2, 500), generator=torch.Generator().manual_seed(1))
    assert torch.equal(predict(built.model, tokens, chunk_size=128), tokens.cumsum(1) % 2)


CASES_100K = [("full", "fsm", {"states": 6}), ("cp", "fsm", {"states": 4, "machine_seed": 1}),
              ("block", "word_problem", {"group": "S3"}), ("rotation", "modadd", {"m": 20}), ("diagonal", "parity", {})]


@pytest.mark.parametrize("structure, name, params", CASES_100K, ids=[c[0] for c in CASES_100K])
def test_every_structure_exact_and_finite_at_100000_steps_in_chunks(structure, name, params):
    task = make_task(name, **params)
    built = construct(task, structure)  # the mixer's default: renormalise the state every step
    finite = []
    built.model.register_forward_hook(lambda module, args, out: finite.append(bool(torch.isfinite(out[0]).all())
                                                                              and all(bool(torch.isfinite(s).all()) for s in out[1])))
    [row] = evaluate_construction(built.model, task, [100_000], samples=1, batch_size=1, chunk_size=4096)
    assert len(finite) == math.ceil((100_000 + (2 if name != "word_problem" else 0)) / 4096) and all(finite)
    assert row["accuracy"] == 1.0


@pytest.mark.parametrize("name, params, structure, expected", [
    ("word_problem", {"group": "S3"}, "rotation", "do not commute"),
    ("word_problem", {"group": "A4"}, "diagonal", "do not commute"),
    ("modadd", {"m": 5}, "diagonal", "structure 'diagonal' computes only tokens of order 2"),
    ("fsm", {}, "rotation", "to the same state"),
    ("parity", {}, "hex", "unknown structure 'hex'; expected one of: block, cp, diagonal, full, rotation"),
])
def test_structures_that_cannot_compute_a_task_say_so(name, params, structure, expected):
    with pytest.raises(StatetrackError, match=expected):
        construct(make_task(name, **params), structure)


def test_automaton_checks_its_tables():
    with pytest.raises(StatetrackError, match=r"states in \[0, 2\)"):
        Automaton(torch.tensor([[0, 2]]), 0, torch.tensor([0, 1]), 2)
    with pytest.raises(StatetrackError, match=r"labels must be a long tensor \[2\]"):
        Automaton(torch.tensor([[0, 1]]), 0, torch.tensor([0]), 2)
    with pytest.raises(StatetrackError, match="unknown task for an exact construction 'repl'"):
        construct(make_task("repl"))


def test_cli_prints_accuracy_per_length(capsys):
    code, out, err = run_cli(capsys, "construct", "word_problem", "group=A4", "--lengths", "10", "1000", "--samples", "4")
    assert code == 0 and not err
    lines = out.splitlines()
    assert lines[0].startswith("Bilinear full (d_model 14, hidden 12") and "word_problem(group='A4')" in lines[0]
    assert lines[1].split() == ["length", "samples", "accuracy", "scaled", "accuracy"]
    assert [line.split() for line in lines[3:]] == [["10", "4", "1.0000", "1.0000"], ["1000", "4", "1.0000", "1.0000"]]
    code, out, _ = run_cli(capsys, "construct", "modadd", "m=7", "--structure", "rotation", "--lengths", "50")
    assert code == 0 and "Bilinear rotation (d_model 12, hidden 2" in out and out.splitlines()[-1].split()[2] == "1.0000"


@pytest.mark.parametrize("argv, expected", [
    (["construct", "repl"], "unknown task for an exact construction 'repl'; expected one of: fsm, modadd, parity, word_problem"),
    (["construct", "word_problem", "group=S3", "--structure", "rotation"], "tokens '1' and '2' do not commute"),
    (["construct", "modadd", "m=5", "--structure", "diagonal"], "use rotation for Z_m"),
    (["construct", "fsm", "--structure", "spiral"], "unknown structure 'spiral'"),
    (["construct", "fsm", "--lengths", "0"], "length must be an integer >= 1, got 0"),
    (["construct", "modadd", "q=3"], "has no parameter 'q'"),
])
def test_cli_bad_input_is_one_line_and_exit_2(capsys, argv, expected):
    code, out, err = run_cli(capsys, *argv)
    assert code == 2 and not out
    assert len(err.strip().splitlines()) == 1 and expected in err
