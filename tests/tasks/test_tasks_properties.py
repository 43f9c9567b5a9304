"""Properties every registered task must have: determinism, ranges, errors, documentation."""

import pytest
import torch

from statetrack.errors import StatetrackError
from statetrack.tasks import TASKS, Batch, make_task, task_parameters
from statetrack.tasks.catalog import markdown

ALL = sorted(TASKS)
EXPECTED = {
    "parity", "parity_lm", "modadd", "modarith", "modarith_precedence", "modarith_brackets", "fsm", "even_pairs",
    "cycle_navigation", "word_problem", "copy", "copy_memory", "denoise", "counting", "repl", "pfsa",
}


def _length(task):
    # counting's first ISI starts after an ITI of at least 20 steps
    return max(task.min_length, 100 if task.name == "counting" else 12)


def test_registry_has_every_task():
    assert EXPECTED <= set(TASKS)
    for name in ALL:
        cls = TASKS[name]
        assert cls.name == name and cls.summary and cls.__doc__
        assert isinstance(task_parameters(name), dict)


@pytest.mark.parametrize("name", ALL)
def test_batches_are_well_formed_and_deterministic(name):
    task = make_task(name)
    length = _length(task)
    a = task.sample(8, length, torch.Generator().manual_seed(5))
    b = task.sample(8, length, torch.Generator().manual_seed(5))
    c = task.sample(8, length, torch.Generator().manual_seed(6))
    assert isinstance(a, Batch)
    assert torch.equal(a.inputs, b.inputs) and torch.equal(a.targets, b.targets) and torch.equal(a.mask, b.mask)
    assert not (torch.equal(a.inputs, c.inputs) and torch.equal(a.targets, c.targets))
    assert a.inputs.dtype == a.targets.dtype == torch.long and a.mask.dtype == torch.bool
    assert 0 <= a.inputs.min() and a.inputs.max() < task.vocab_size
    assert 0 <= a.targets[a.mask].min() and a.targets[a.mask].max() < task.num_classes
    assert a.mask.any(dim=1).all()
    assert task.chance == pytest.approx(1 / task.num_classes)
    assert 0 < task.chance < 1
    assert isinstance(task.describe(a, 0), str) and task.describe(a, 0)
    assert task.params == {k: getattr(task, k) for k in task_parameters(name)}
    # the global RNG is never used
    torch.manual_seed(0)
    before = torch.rand(1)
    torch.manual_seed(0)
    task.sample(2, length, torch.Generator().manual_seed(1))
    assert torch.equal(torch.rand(1), before)


@pytest.mark.parametrize("name", ALL)
def test_length_below_minimum_is_one_line_error(name):
    task = make_task(name)
    with pytest.raises(StatetrackError) as info:
        task.sample(2, task.min_length - 1, torch.Generator())
    assert "length" in str(info.value) and "\n" not in str(info.value)


@pytest.mark.parametrize(
    "name,params,match",
    [
        ("modadd", {"m": 1}, "m must be"),
        ("modarith", {"m": 0}, "m must be"),
        ("modarith_precedence", {"m": 1}, "m must be"),
        ("modarith_brackets", {"m": 1}, "m must be"),
        ("modarith_brackets", {"grammar": "infix"}, "unknown grammar"),
        ("cycle_navigation", {"cycle": 1}, "cycle must be"),
        ("word_problem", {"group": "Q8"}, "unknown group"),
        ("word_problem", {"group": "S9"}, "order"),
        ("copy", {"symbols": 27}, "symbols"),
        ("copy_memory", {"vary": "both"}, "vary"),
        ("denoise", {"pattern": 0}, "pattern"),
        ("counting", {"preset": "huge"}, "preset"),
        ("counting", {"pattern": "three"}, "pattern"),
        ("repl", {"moves": "rotate"}, "moves"),
        ("repl", {"n": 1}, "n must be"),
        ("pfsa", {"noise": 1.5}, "noise"),
        ("pfsa", {"n": 9}, "n must be"),
        ("parity", {"m": 3}, "no parameter"),
    ],
)
def test_bad_parameters_are_one_line_errors(name, params, match):
    with pytest.raises(StatetrackError, match=match) as info:
        make_task(name, **params)
    assert "\n" not in str(info.value)


def test_the_catalogue_documents_every_task():
    """docs/tasks.md is `markdown()` (tests/test_docs.py checks the committed page)."""
    page = markdown()
    for name in ALL:
        assert f"## `{name}`" in page


@pytest.mark.parametrize("name", ALL)
def test_tokens_counts_an_input_whole_and_extrapolates_long_lengths_exactly(name):
    """`Task.tokens` (what the memory estimate sizes a batch by) is the width of a batch drawn at that
    length, special tokens included; beyond what it samples, its line through two lengths gives every
    shipped task's count at a length it still draws here."""
    from statetrack.tasks.base import TOKENS_SAMPLED

    task = make_task(name)
    length = _length(task)
    assert task.tokens(length) == task.sample(4, length, torch.Generator().manual_seed(3)).inputs.shape[1]
    far = 4 * max(TOKENS_SAMPLED, task.min_length)
    assert task.tokens(far) == task.sample(1, far, torch.Generator().manual_seed(3)).inputs.shape[1]


def test_a_repl_trace_is_many_tokens_a_command():
    """The paper scale's traces: 64 commands of 5 variables are 1,421 tokens, not 64."""
    assert make_task("repl", n=5, spacing=8, moves="full").tokens(64) == 1421
