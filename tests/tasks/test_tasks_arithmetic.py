"""Arithmetic and automata targets against Python's own evaluation and direct simulation."""

import pytest
import torch

from statetrack.errors import StatetrackError
from statetrack.tasks import make_task


def _gen(seed=0):
    return torch.Generator().manual_seed(seed)


def _answer(task, batch, i):
    return task.answers[batch.targets[i, -1].item()]


def test_parity_and_modadd():
    task = make_task("parity")
    batch = task.sample(64, 13, _gen())
    for i in range(64):
        bits = [int(s) for s in task.decode_symbols(batch, i)]
        assert len(bits) == 13 and int(_answer(task, batch, i)) == sum(bits) % 2
    task = make_task("modadd", m=7)
    batch = task.sample(64, 9, _gen())
    for i in range(64):
        assert int(_answer(task, batch, i)) == sum(int(s) for s in task.decode_symbols(batch, i)) % 7


def test_parity_lm_format():
    task = make_task("parity_lm")
    batch = task.sample(64, 10, _gen())  # 9 bits + the answer token
    assert batch.inputs.shape == (64, 10) and batch.inputs.min() >= 1
    assert batch.mask.sum(dim=1).eq(1).all() and batch.mask[:, -2].all()
    for i in range(64):
        bits = [task.vocab[t] for t in batch.inputs[i, :-1].tolist()]
        parity = sum(map(int, bits)) % 2
        assert batch.targets[i, -2].item() == parity
        assert task.vocab[batch.inputs[i, -1].item()] == str(parity)


def test_modarith_left_to_right_against_python():
    task = make_task("modarith", m=20)
    batch = task.sample(64, 7, _gen(2))
    for i in range(64):
        symbols = task.decode_symbols(batch, i)
        assert len(symbols) == 13
        value = int(symbols[0])
        for op, operand in zip(symbols[1::2], symbols[2::2]):
            value = eval(f"{value} {op} {operand}") % 20  # noqa: S307 - Python is the oracle
        assert int(_answer(task, batch, i)) == value


def test_modarith_precedence_against_python():
    task = make_task("modarith_precedence")
    for length in (1, 2, 5, 12):
        batch = task.sample(64, length, _gen(length))
        for i in range(64):
            expression = " ".join(task.decode_symbols(batch, i))
            assert int(_answer(task, batch, i)) == eval(expression) % 5, expression  # noqa: S307


@pytest.mark.parametrize("grammar", ["bracketed", "precedence"])
def test_modarith_brackets_against_python(grammar):
    task = make_task("modarith_brackets", grammar=grammar)
    seen_brackets = False
    for length in (1, 2, 3, 4, 5, 6, 7, 8, 15, 40, 97):
        batch = task.sample(64, length, _gen(length))
        for i in range(64):
            symbols = task.decode_symbols(batch, i)
            assert len(symbols) == length  # `length` counts every expression token
            seen_brackets |= "(" in symbols
            expression = " ".join(symbols)
            assert int(_answer(task, batch, i)) == eval(expression) % 5, expression  # noqa: S307
    assert seen_brackets


def _fully_bracketed(symbols):
    """Check `symbols` against E := d | -d | (d) | (-d) | ( E o E ); return the number of operations.

    Written independently of the generator: a bare d or -d may stand alone or be an operand, a
    bracket pair holds either one bare terminal or exactly one binary operation.
    """
    position = 0

    def take(expected=None):
        nonlocal position
        assert position < len(symbols), f"expression ends early: {symbols}"
        token = symbols[position]
        assert expected is None or token in expected, f"{token!r} at {position} in {' '.join(symbols)}"
        position += 1
        return token

    def expression():  # returns (operations, is a bare d or -d)
        token = take()
        if token.isdigit():
            return 0, True
        if token == "-":
            assert take().isdigit(), " ".join(symbols)
            return 0, True
        assert token == "(", " ".join(symbols)
        operations, bare = expression()
        if symbols[position] == ")":
            assert bare, f"brackets around a bracketed expression: {' '.join(symbols)}"
            take(")")
            return 0, False
        take(("+", "-", "*"))
        right, _ = expression()
        take(")")
        return operations + right + 1, False

    operations, _ = expression()
    assert position == len(symbols), f"trailing tokens: {' '.join(symbols)}"
    return operations


def test_modarith_brackets_default_brackets_every_operation():
    task = make_task("modarith_brackets")
    assert task.grammar == "bracketed" and task.min_length == 1
    operators = set()
    for length in (1, 2, 3, 4, 5, 9, 17, 40, 128):
        batch = task.sample(32, length, _gen(length))
        for i in range(32):
            symbols = task.decode_symbols(batch, i)
            operations = _fully_bracketed(symbols)
            binary = sum(s in "+*" for s in symbols) + sum(
                s == "-" and k > 0 and (symbols[k - 1].isdigit() or symbols[k - 1] == ")") for k, s in enumerate(symbols)
            )
            assert operations == binary and symbols.count("(") >= operations
            operators |= set(symbols) & {"+", "-", "*"}
    assert operators == {"+", "-", "*"}
    # the precedence variant leaves most operations unbracketed
    old = make_task("modarith_brackets", grammar="precedence")
    batch = old.sample(8, 40, _gen())
    assert any(old.decode_symbols(batch, i).count("(") < 5 for i in range(8))


def test_modarith_brackets_split_and_operator_are_uniform():
    # E(9) = ( E(k) o E(6-k) ), k uniform in [1, 5]: the left operand's length shows in the tokens
    task = make_task("modarith_brackets")
    batch = task.sample(3000, 9, _gen(1))
    splits, ops = [], []
    for i in range(3000):
        symbols = task.decode_symbols(batch, i)
        depth, k = 0, 1
        while True:  # find the root operator: the first operator at depth 1 after a full operand
            s = symbols[k]
            depth += s == "("
            depth -= s == ")"
            if depth == 0 and s in "+-*" and k > 1 and (symbols[k - 1].isdigit() or symbols[k - 1] == ")"):
                break
            k += 1
        splits.append(k - 1)
        ops.append(symbols[k])
    for left in range(1, 6):
        assert abs(splits.count(left) / 3000 - 1 / 5) < 0.03
    for op in "+-*":
        assert abs(ops.count(op) / 3000 - 1 / 3) < 0.03


def test_modarith_brackets_paper_example():
    # Deletang et al. 2023's example (((3-2)*2)-(2*3)): 17 tokens, ((1 * 2) - 6) mod 5 = 1
    example = list("(((3-2)*2)-(2*3))")
    assert len(example) == 17 and _fully_bracketed(example) == 4
    assert eval("".join(example)) % 5 == 1  # noqa: S307
    # the default grammar produces it: draws in pre-order (split, operator at each operation;
    # digit at each terminal), chosen to land on k = 9, -, k = 5, *, k = 1, -, 3, 2, 2, k = 1, *, 2, 3
    task = make_task("modarith_brackets")
    draws = [8.5 / 13, 0.5, 0.9, 0.9, 0.5, 0.5, 0.7, 0.5, 0.5, 0.5, 0.9, 0.5, 0.7]
    tokens, value = task._bracketed(17, draws)
    assert [task.symbols[t] for t in tokens] == example and value == 1


def test_modarith_brackets_deterministic_in_the_generator():
    for grammar in ("bracketed", "precedence"):
        task = make_task("modarith_brackets", grammar=grammar)
        a, b = task.sample(16, 33, _gen(7)), task.sample(16, 33, _gen(7))
        c = task.sample(16, 33, _gen(8))
        assert torch.equal(a.inputs, b.inputs) and torch.equal(a.targets, b.targets)
        assert not torch.equal(a.inputs, c.inputs)
        assert a.inputs.shape == (16, 35)  # [BOS] + 33 tokens + [EOI]
    # the precedence variant draws exactly as the task did before `grammar` existed
    old = make_task("modarith_brackets", grammar="precedence")
    assert old.describe(old.sample(1, 11, _gen(0)), 0) == "[BOS] ( 1 ) - 1 - 0 - 2 - 1 [EOI]  ->  2"


def test_modarith_brackets_long_and_bad_parameters():
    task = make_task("modarith_brackets", m=7)
    batch = task.sample(4, 1000, _gen(3))  # iterative: no recursion limit
    assert batch.inputs.shape == (4, 1002)
    for i in range(4):
        assert _fully_bracketed(task.decode_symbols(batch, i)) >= 1
    with pytest.raises(StatetrackError, match="length") as info:
        task.sample(2, 0, _gen())
    assert "\n" not in str(info.value)
    with pytest.raises(StatetrackError) as info:
        make_task("modarith_brackets", grammar="infix")
    message = str(info.value)
    assert "grammar" in message and "bracketed" in message and "precedence" in message and "\n" not in message


def test_fsm_against_direct_simulation():
    task = make_task("fsm", states=6, machine_seed=3)
    table = task.transitions.tolist()
    batch = task.sample(64, 11, _gen())
    for i in range(64):
        symbols = [int(s) for s in task.decode_symbols(batch, i)]
        state = symbols[0]
        for s in symbols[1:]:
            state = table[state][s]
        assert int(_answer(task, batch, i)) == state


def test_even_pairs_and_cycle_navigation():
    task = make_task("even_pairs")
    batch = task.sample(64, 9, _gen())
    for i in range(64):
        word = "".join(task.decode_symbols(batch, i))
        pairs = sum(word[k : k + 2] in ("ab", "ba") for k in range(len(word) - 1))
        assert _answer(task, batch, i) == ("even" if pairs % 2 == 0 else "odd")
    task = make_task("cycle_navigation", cycle=5)
    batch = task.sample(64, 9, _gen())
    for i in range(64):
        position = 0
        for move in task.decode_symbols(batch, i):
            position = (position + int(move)) % 5
        assert int(_answer(task, batch, i)) == position
