"""The tasks of Ebrahimi & Memisevic 2025: targets against an independent computation from the decoded tokens."""

import pytest
import torch

from statetrack import StatetrackError
from statetrack.tasks import FinalAnswerTask, make_task


def sample(task, length, seed=0, batch=64):
    return task.sample(batch, length, torch.Generator().manual_seed(seed))


def decoded_examples(task: FinalAnswerTask, batch):
    for i in range(batch.inputs.shape[0]):
        answer = task.answers[batch.targets[i, -1].item()]
        yield task.decode_symbols(batch, i), answer


@pytest.mark.parametrize("length", [1, 2, 7, 40])
def test_parity_counts_ones(length):
    task = make_task("parity")
    batch = sample(task, length)
    for symbols, answer in decoded_examples(task, batch):
        assert len(symbols) == length
        assert int(answer) == symbols.count("1") % 2


@pytest.mark.parametrize("m", [2, 5, 20])
def test_modadd_sums(m):
    task = make_task("modadd", m=m)
    for symbols, answer in decoded_examples(task, sample(task, 9)):
        assert int(answer) == sum(int(s) for s in symbols) % m


@pytest.mark.parametrize("m", [5, 20])
def test_modarith_left_to_right_matches_python(m):
    task = make_task("modarith", m=m)
    for symbols, answer in decoded_examples(task, sample(task, 6, batch=128)):
        assert len(symbols) == 11  # 6 operands, 5 operators
        # Parenthesise so Python evaluates strictly left to right, then reduce mod m.
        expression = symbols[0]
        for op, operand in zip(symbols[1::2], symbols[2::2]):
            expression = f"({expression}) {op} {operand}"
        assert int(answer) == eval(expression) % m


def test_modarith_paper_example():
    # Ebrahimi & Memisevic 2025, App. B, m = 20: [BOS] 3 * 9 - 17 + 6 + 12 [EOI] 8 (left to right)
    assert ((((3 * 9) - 17) + 6) + 12) % 20 == 8


def test_fsm_simulation_and_permutation_rows():
    task = make_task("fsm", states=6, machine_seed=3)
    table = task.transitions.tolist()
    for row in table:
        assert sorted(row) == list(range(6))  # delta(q, .) is a permutation
    for symbols, answer in decoded_examples(task, sample(task, 12)):
        state = int(symbols[0])
        for s in symbols[1:]:
            state = table[state][int(s)]
        assert int(answer) == state


def test_fsm_supervised_at_every_position_walks_the_same_machine():
    """supervise=all: the symbols alone, the state after every prefix as the target, every position
    supervised; its last target is the final-answer form's answer on the same symbols."""
    dense, final = make_task("fsm", states=6, machine_seed=3, supervise="all"), make_task("fsm", states=6, machine_seed=3)
    batch = dense.sample(16, 9, torch.Generator().manual_seed(0))
    assert batch.inputs.shape == batch.targets.shape == (16, 9) and bool(batch.mask.all())
    table = dense.transitions.tolist()
    for symbols, states in zip(batch.inputs.tolist(), batch.targets.tolist()):
        walked = [symbols[0]]
        for s in symbols[1:]:
            walked.append(table[walked[-1]][s])
        assert states == walked
    assert torch.equal(dense.transitions, final.transitions) and dense.vocab == [str(i) for i in range(6)]
    with pytest.raises(StatetrackError, match="supervise must be 'final' or 'all'"):
        make_task("fsm", supervise="every")


def test_fsm_machine_depends_on_machine_seed_only():
    a, b, c = make_task("fsm", machine_seed=1), make_task("fsm", machine_seed=1), make_task("fsm", machine_seed=2)
    assert torch.equal(a.transitions, b.transitions)
    assert not torch.equal(a.transitions, c.transitions)


@pytest.mark.parametrize("name", ["parity", "modadd", "modarith", "fsm"])
def test_format_and_determinism(name):
    task = make_task(name)
    a, b, c = sample(task, 10, seed=1), sample(task, 10, seed=1), sample(task, 10, seed=2)
    assert torch.equal(a.inputs, b.inputs) and torch.equal(a.targets, b.targets)
    assert not torch.equal(a.inputs, c.inputs)
    assert (a.inputs[:, 0] == task.token_id("[BOS]")).all() and (a.inputs[:, -1] == task.token_id("[EOI]")).all()
    assert a.mask[:, -1].all() and not a.mask[:, :-1].any()
    assert 0 <= a.targets.min() and a.targets.max() < task.num_classes
    assert a.inputs.max() < task.vocab_size
    assert task.chance == pytest.approx(1 / task.num_classes)
    assert "[EOI]" in task.describe(a)


def test_sampling_ignores_global_rng():
    task = make_task("modadd")
    torch.manual_seed(0)
    a = sample(task, 5)
    torch.manual_seed(123)
    b = sample(task, 5)
    assert torch.equal(a.inputs, b.inputs)


@pytest.mark.parametrize(
    "name, params, message",
    [("nope", {}, "unknown task 'nope'"), ("modadd", {"m": 1}, "m must be an integer >= 2"), ("modadd", {"q": 3}, "no parameter 'q'")],
)
def test_bad_parameters(name, params, message):
    with pytest.raises(StatetrackError, match=message):
        make_task(name, **params)


def test_length_below_minimum():
    with pytest.raises(StatetrackError, match="length must be an integer >= 1"):
        sample(make_task("parity"), 0)
