"""The last-k-symbols floor of the random state machine, against machines whose floor is known and
against the best last-k guess counted on the task's own samples."""

from collections import Counter, defaultdict

import pytest
import torch

from statetrack.analysis.shortcuts import last_symbols_accuracy, shortcut_floor
from statetrack.errors import StatetrackError
from statetrack.tasks import make_task


def test_a_group_machine_has_no_shortcut_and_a_reset_machine_is_all_shortcut():
    n = 5
    cyclic = (torch.arange(n).view(n, 1) + torch.arange(n).view(1, n)) % n  # delta(q, s) = q + s: Z_5
    reset = torch.arange(n).view(1, n).expand(n, n)  # delta(q, s) = s: the last symbol is the state
    for k in range(4):
        assert last_symbols_accuracy(cyclic, k) == pytest.approx(1 / n)
        assert last_symbols_accuracy(reset, k) == pytest.approx(1 / n if k == 0 else 1.0)


def test_the_floor_equals_the_best_last_k_guess_on_sampled_inputs():
    """Count, on 40,000 sampled inputs of length 30, the final states seen after each last-k
    window; guessing each window's most frequent state scores the exact floor within sampling error."""
    task = make_task("fsm", states=4, machine_seed=3)
    batch = task.sample(40000, 30, torch.Generator().manual_seed(0))
    answer = batch.targets[batch.mask]
    symbols = batch.inputs[:, -3:-1]  # the last 2 symbols before [EOI] (tokens; one token per symbol)
    seen: dict = defaultdict(Counter)
    for window, state in zip(map(tuple, symbols.tolist()), answer.tolist()):
        seen[window][state] += 1
    empirical = sum(c.most_common(1)[0][1] for c in seen.values()) / len(answer)
    assert empirical == pytest.approx(last_symbols_accuracy(task.transitions, 2), abs=0.01)


def test_the_floor_grows_with_the_window_and_rejects_bad_input():
    floor = shortcut_floor(states=6, machine_seed=0, window=4)
    scaled = [floor[k][1] for k in range(5)]
    assert scaled[0] == pytest.approx(0.0) and all(a < b for a, b in zip(scaled, scaled[1:]))
    with pytest.raises(StatetrackError, match="k must be an integer >= 0"):
        last_symbols_accuracy(make_task("fsm").transitions, -1)
    with pytest.raises(StatetrackError, match="at most"):
        last_symbols_accuracy(make_task("fsm", states=10).transitions, 9)
    with pytest.raises(StatetrackError, match="--window must be an integer >= 0"):
        shortcut_floor(window=-1)
    with pytest.raises(StatetrackError, match="states must be at most 1000"):
        shortcut_floor(states=10**9)
