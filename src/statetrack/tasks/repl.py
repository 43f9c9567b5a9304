"""REPL traces (Siems et al. 2026, section 3): S_n permutation tracking written as a Python REPL session.

A trace assigns n distinct values to n variables, then issues `length` commands that permute the
variables' contents, and every `spacing` commands prints one variable. Tokens are text fragments
whose concatenation is the trace text, e.g. (n = 3, swaps, spacing 1):

    >>> a, b, c = 2, 0, 1
    >>> a, c = c, a
    >>> print(a)
    1

Only the printed values are supervised (next-token prediction at the newline that precedes each
output line). Executing the `>>>` lines in a Python interpreter prints exactly the output lines.
"""

from __future__ import annotations

import string

import torch

from statetrack import limits
from statetrack.errors import StatetrackError
from statetrack.tasks.base import PAD, Batch, Task
from statetrack.tasks.registry import register_task

PROMPT, COMMA, ASSIGN, PRINT, CLOSE, NEWLINE = ">>> ", ", ", " = ", "print(", ")", "\n"
CURRICULUM = ((8, 1), (16, 2), (32, 4), (64, 8))
"""Curriculum stages of Siems et al. 2026 (commands, reveal spacing), 15,000 traces each: the paper
scale of the repl-traces experiment trains through them (a test checks it)."""


@register_task("repl")
class ReplTrace(Task):
    """S_n permutation tracking as a Python REPL trace (Siems et al. 2026).

    Parameters: `n` variables (a, b, c, ...) holding the distinct values 0..n-1 in a random
    initial order; `moves="full"` commands assign a uniformly random permutation of all n
    variables (`a, b, c = c, a, b`), `moves="swap"` swap two distinct variables (`a, c = c, a`);
    every `spacing` commands a `print(x)` of a uniformly random variable x reveals its value.
    `length` is the number of commands (at least `spacing`, so there is a reveal); there are
    length // spacing reveals. Classes are the n values; chance 1/n. Per-position accuracy is
    counted per reveal (the k-th print of each trace), as in Siems et al. 2026, Fig. 3; train with
    the paper's curriculum by listing (commands, spacing) stages in `train.curriculum`.
    """

    summary = "S_n permutation tracking as Python REPL traces with print reveals (Siems et al. 2026); length = commands"
    position_unit, position_label = "supervised", "reveal (print)"  # per-position accuracy is per reveal

    def __init__(self, n: int = 5, spacing: int = 1, moves: str = "full"):
        self.n = self.check_int(self.name, "n", n, 2, limits.MAX_CLASSES)
        if n > 26:
            raise StatetrackError(
                f"task {self.name!r}: n must be an integer <= 26 (one letter per variable), got {n!r}"
            )
        self.spacing = self.check_int(self.name, "spacing", spacing, 1, limits.MAX_LENGTH)
        if moves not in ("full", "swap"):
            raise StatetrackError(f"task {self.name!r}: moves must be 'full' or 'swap', got {moves!r}")
        self.moves = moves
        self.min_length = spacing
        self.variables = list(string.ascii_lowercase[:n])
        values = [str(i) for i in range(n)]
        self.vocab = [PAD, PROMPT, COMMA, ASSIGN, PRINT, CLOSE, NEWLINE] + self.variables + values
        self.answers = values
        self._var0 = self.vocab.index("a")
        self._val0 = self._var0 + n

    # ---- building blocks: [B, k] token tensors -----------------------------------------------
    def _const(self, batch_size: int, token: str) -> torch.Tensor:
        return torch.full((batch_size, 1), self.vocab.index(token), dtype=torch.long)

    def _listing(self, ids: torch.Tensor) -> list[torch.Tensor]:
        """Columns of `ids` [B, k] interleaved with ', '."""
        b = ids.shape[0]
        parts = []
        for i in range(ids.shape[1]):
            if i:
                parts.append(self._const(b, COMMA))
            parts.append(ids[:, i : i + 1])
        return parts

    def _assignment(self, lhs: torch.Tensor, rhs: torch.Tensor, offset_rhs: int) -> torch.Tensor:
        b = lhs.shape[0]
        parts = [self._const(b, PROMPT)] + self._listing(lhs + self._var0) + [self._const(b, ASSIGN)]
        parts += self._listing(rhs + offset_rhs) + [self._const(b, NEWLINE)]
        return torch.cat(parts, dim=1)

    def sample(self, batch_size: int, length: int, generator: torch.Generator) -> Batch:
        self.check_length(length)
        b, n, g = batch_size, self.n, generator
        rows = torch.arange(b)[:, None]
        state = torch.rand(b, n, generator=g).argsort(dim=1)  # state[:, i] = value held by variable i
        everyone = torch.arange(n).expand(b, n)
        blocks = [self._assignment(everyone, state, self._val0)]
        supervised: list[tuple[int, torch.Tensor]] = []  # (block index, values) of each reveal
        for command in range(1, length + 1):
            if self.moves == "full":
                perm = torch.rand(b, n, generator=g).argsort(dim=1)  # variable i receives variable perm[i]
                blocks.append(self._assignment(everyone, perm, self._var0))
                state = state[rows, perm]
            else:
                i = torch.randint(0, n, (b,), generator=g)
                j = (i + torch.randint(1, n, (b,), generator=g)) % n
                pair = torch.stack([torch.minimum(i, j), torch.maximum(i, j)], dim=1)  # `a, c = c, a`
                blocks.append(self._assignment(pair, pair.flip(1), self._var0))
                swapped = state.clone()
                swapped[rows[:, 0], pair[:, 0]] = state[rows[:, 0], pair[:, 1]]
                swapped[rows[:, 0], pair[:, 1]] = state[rows[:, 0], pair[:, 0]]
                state = swapped
            if command % self.spacing == 0:
                shown = torch.randint(0, n, (b, 1), generator=g)
                value = state.gather(1, shown)  # [B, 1]
                blocks.append(
                    torch.cat(
                        [
                            self._const(b, PROMPT),
                            self._const(b, PRINT),
                            shown + self._var0,
                            self._const(b, CLOSE),
                            self._const(b, NEWLINE),
                            value + self._val0,
                            self._const(b, NEWLINE),
                        ],
                        dim=1,
                    )
                )
                supervised.append((len(blocks) - 1, value[:, 0]))
        inputs = torch.cat(blocks, dim=1)
        targets = torch.zeros_like(inputs)
        mask = torch.zeros_like(inputs, dtype=torch.bool)
        starts = torch.tensor([0] + [blk.shape[1] for blk in blocks]).cumsum(0)
        for block, value in supervised:
            position = int(starts[block]) + 4  # the newline after `print(x)` predicts the value
            targets[:, position] = value
            mask[:, position] = True
        return Batch(inputs, targets, mask)

    def text(self, batch: Batch, index: int = 0) -> str:
        """The trace of example `index` as text (padding removed)."""
        return "".join(self.vocab[i] for i in batch.inputs[index].tolist() if i != 0)

    def describe(self, batch: Batch, index: int = 0) -> str:
        return self.text(batch, index).rstrip("\n")
