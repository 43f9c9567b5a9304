"""Random state machine of Ebrahimi & Memisevic 2025."""

from __future__ import annotations

import torch

from statetrack import limits
from statetrack.tasks.base import FinalAnswerTask
from statetrack.tasks.registry import register_task


@register_task("fsm")
class RandomStateMachine(FinalAnswerTask):
    """Q = Sigma = {0..n-1}; delta(q, .) is a random permutation of Q for every state q.

    The first symbol is the initial state, each further symbol s moves q -> delta(q, s); the
    answer is the final state. The machine is fixed by `machine_seed`, independent of the
    sampling generator. Example (n = 6): `[BOS] 4 1 2 5 5 [EOI] 2`.
    """

    summary = "random permutation automaton on n states; answer = final state (Ebrahimi & Memisevic 2025)"

    def __init__(self, states: int = 6, machine_seed: int = 0):
        self.states = self.check_int(self.name, "states", states, 2, limits.MAX_CLASSES)
        self.machine_seed = self.check_int(self.name, "machine_seed", machine_seed, 0)
        # its table, [states, states] int64, built once from rows of as many: twice that at the stack
        limits.check_memory(16 * states * states, f"task 'fsm': states {states:,} (a {states:,} x {states:,} table)")
        g = torch.Generator().manual_seed(machine_seed)
        # transitions[q, s] = delta(q, s); each row is a permutation of the states.
        self.transitions = torch.stack([torch.randperm(states, generator=g) for _ in range(states)])
        names = [str(i) for i in range(states)]
        self._init_vocab(names, names)

    def _draw(self, batch_size, length, g):
        symbols = torch.randint(0, self.states, (batch_size, length), generator=g)
        state = symbols[:, 0]
        for t in range(1, length):
            state = self.transitions[state, symbols[:, t]]
        return symbols, state
