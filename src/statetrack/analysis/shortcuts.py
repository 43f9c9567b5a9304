"""The shortcut floor of the random state machine: how well the final state can be guessed from the
last k input symbols alone, without tracking the state at all.

A model that reads only a short window of the input (Mamba's causal convolution sees the last 4
tokens; Gu & Dao 2023) reaches this floor at every length, in and out of distribution, so a claim
that such a model "fails" on the machine must set its threshold above the floor, not at chance.

In the random machine of Ebrahimi & Memisevic 2025 every row of the transition table, delta(q, .),
is a permutation of the states, so the next state is uniform whatever the current one: the state
before the last k symbols w of any input longer than k is uniform, and the best guess from w is the
state most states reach under w. The floor is exact, not sampled:

    accuracy_k = n^-k * sum_w max_s #{q : delta*(q, w) = s} / n.
"""

from __future__ import annotations

import torch

from statetrack.errors import StatetrackError
from statetrack.tasks import make_task

MAX_WORDS = 10**7  # n^k words are enumerated
MAX_STATES = 1000


def last_symbols_accuracy(transitions: torch.Tensor, k: int) -> float:
    """The accuracy of the best predictor of the final state that sees only the last `k` symbols of
    an input longer than `k`, for a machine whose rows `transitions[q]` are permutations (exact)."""
    n = transitions.shape[0]
    if transitions.shape != (n, n):
        raise StatetrackError(f"transitions must be [n, n], got {tuple(transitions.shape)}")
    if isinstance(k, bool) or not isinstance(k, int) or k < 0:
        raise StatetrackError(f"k must be an integer >= 0, got {k!r}")
    if n**k > MAX_WORDS:
        raise StatetrackError(f"{n}^{k} words to enumerate; at most {MAX_WORDS:g} (a smaller k)")
    reached = torch.arange(n).unsqueeze(0)  # [words, n]: where each start state is after the word so far
    for _ in range(k):
        # extend every word by each symbol s: delta(q, s) for every current state q
        reached = transitions[reached.unsqueeze(1).expand(-1, n, -1), torch.arange(n).view(1, n, 1)].reshape(-1, n)
    counts = torch.zeros(reached.shape[0], n, dtype=torch.long).scatter_add_(1, reached, torch.ones_like(reached))
    return counts.max(dim=1).values.double().mean().item() / n


def shortcut_floor(states: int = 6, machine_seed: int = 0, window: int = 4) -> dict:
    """{k: (accuracy, scaled accuracy)} of the last-k-symbols predictor for k = 0..`window` on the
    random machine `fsm(states, machine_seed)`; scaled = (acc - 1/n) / (1 - 1/n)."""
    if isinstance(window, bool) or not isinstance(window, int) or window < 0:
        raise StatetrackError(f"--window must be an integer >= 0, got {window!r}")
    if isinstance(states, int) and not isinstance(states, bool) and states > MAX_STATES:
        raise StatetrackError(f"states must be at most {MAX_STATES} for the shortcut floor, got {states}")
    task = make_task("fsm", states=states, machine_seed=machine_seed)
    chance = 1.0 / task.states
    out = {}
    for k in range(window + 1):
        accuracy = last_symbols_accuracy(task.transitions, k)
        out[k] = (accuracy, (accuracy - chance) / (1.0 - chance))
    return out


def format_floor(states: int, machine_seed: int, floor: dict) -> str:
    lines = [
        f"fsm(states={states}, machine_seed={machine_seed}): the best guess of the final state from the last k symbols",
        "k  accuracy  scaled",
    ]
    lines += [f"{k:<2} {acc:8.3f}  {scaled:6.3f}" for k, (acc, scaled) in floor.items()]
    return "\n".join(lines)
