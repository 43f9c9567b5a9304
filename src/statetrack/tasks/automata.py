"""Random state machine of Ebrahimi & Memisevic 2025."""

from __future__ import annotations

import torch

from statetrack import limits
from statetrack.errors import StatetrackError
from statetrack.tasks.base import Batch, FinalAnswerTask
from statetrack.tasks.registry import register_task


@register_task("fsm")
class RandomStateMachine(FinalAnswerTask):
    """Q = Sigma = {0..n-1}; delta(q, .) is a random permutation of Q for every state q.

    The first symbol is the initial state, each further symbol s moves q -> delta(q, s); the
    answer is the final state. The machine is fixed by `machine_seed`, independent of the
    sampling generator. Example (n = 6): `[BOS] 4 1 2 5 5 [EOI] 2`.

    `supervise="all"` is the word-problem form (as `word_problem`): the symbols alone, no special
    tokens, and the target at every position t is the state after s_1 .. s_t (so `length` is the
    number of symbols and every position is supervised). A symbol's map q -> delta(q, s) is in
    general not a permutation (only the rows are): the machine's transformations form a
    non-commutative monoid, not a group.
    """

    summary = (
        "random permutation automaton on n states; answer = final state (Ebrahimi & Memisevic 2025); "
        "supervise=all: the state at every position"
    )

    def __init__(self, states: int = 6, machine_seed: int = 0, supervise: str = "final"):
        self.states = self.check_int(self.name, "states", states, 2, limits.MAX_CLASSES)
        self.machine_seed = self.check_int(self.name, "machine_seed", machine_seed, 0)
        if supervise not in ("final", "all"):
            raise StatetrackError(f"task {self.name!r}: supervise must be 'final' or 'all', got {supervise!r}")
        self.supervise = supervise
        # its table, [states, states] int64, built once from rows of as many: twice that at the stack
        limits.check_memory(16 * states * states, f"task 'fsm': states {states:,} (a {states:,} x {states:,} table)")
        g = torch.Generator().manual_seed(machine_seed)
        # transitions[q, s] = delta(q, s); each row is a permutation of the states.
        self.transitions = torch.stack([torch.randperm(states, generator=g) for _ in range(states)])
        names = [str(i) for i in range(states)]
        self._init_vocab(names, names)

        if supervise == "all":
            self.vocab = names
            self.answers = names

    def _walk(self, symbols: torch.Tensor) -> torch.Tensor:
        """[B, n] symbols -> [B, n] states: the state after each prefix (the first symbol is the initial state)."""
        states = torch.empty_like(symbols)
        states[:, 0] = symbols[:, 0]
        for t in range(1, symbols.shape[1]):
            states[:, t] = self.transitions[states[:, t - 1], symbols[:, t]]
        return states

    def _draw(self, batch_size, length, g):
        symbols = torch.randint(0, self.states, (batch_size, length), generator=g)
        return symbols, self._walk(symbols)[:, -1]

    def sample(self, batch_size: int, length: int, generator: torch.Generator) -> Batch:
        if self.supervise == "final":
            return super().sample(batch_size, length, generator)
        self.check_length(length)
        symbols = torch.randint(0, self.states, (batch_size, length), generator=generator)
        return Batch(symbols, self._walk(symbols), torch.ones_like(symbols, dtype=torch.bool))
