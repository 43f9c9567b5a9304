"""Chomsky-hierarchy tasks (Deletang et al. 2023; Grazzi et al. 2025; Movahedi et al. 2025): even pairs,
cycle navigation and modular arithmetic with brackets. All use the `[BOS] ... [EOI] answer` format.
"""

from __future__ import annotations

import torch

from statetrack.errors import StatetrackError
from statetrack.tasks.base import FinalAnswerTask
from statetrack.tasks.registry import register


@register
class EvenPairs(FinalAnswerTask):
    """Strings over {a, b}; answer "even" when the number of `ab` plus `ba` substrings is even.

    That count is even exactly when the first and last symbols agree (regular; Deletang et al.).
    """

    name = "even_pairs"
    summary = "strings over {a, b}; is the number of ab and ba pairs even? (Deletang et al. 2023; regular)"

    def __init__(self):
        self._init_vocab(["a", "b"], ["odd", "even"])

    def _draw(self, batch_size, length, g):
        symbols = torch.randint(0, 2, (batch_size, length), generator=g)
        return symbols, (symbols[:, 0] == symbols[:, -1]).long()


@register
class CycleNavigation(FinalAnswerTask):
    """Moves on a cycle of `cycle` positions starting at 0: `0` stay, `+1` forward, `-1` back.

    The answer is the final position (Deletang et al.: cycle of 5).
    """

    name = "cycle_navigation"
    summary = "moves 0/+1/-1 on a cycle of 5 positions from 0; answer = final position (Deletang et al. 2023; regular)"
    steps = (0, 1, -1)

    def __init__(self, cycle: int = 5):
        self.cycle = self.check_int(self.name, "cycle", cycle, 2)
        self._init_vocab(["0", "+1", "-1"], [str(i) for i in range(cycle)])

    def _draw(self, batch_size, length, g):
        moves = torch.randint(0, 3, (batch_size, length), generator=g)
        delta = torch.tensor(self.steps)[moves]
        return moves, delta.sum(dim=1) % self.cycle


class _Parser:
    """Recursive-descent evaluator mod m with Python's precedence: unary minus, then *, then + -.

    expr := term (('+' | '-') term)*;  term := factor ('*' factor)*;  factor := '-' factor | digit | '(' expr ')'.
    """

    def __init__(self, tokens: list[int], m: int):
        self.tokens, self.m, self.pos = tokens, m, 0
        self.plus, self.minus, self.times, self.open, self.close = m, m + 1, m + 2, m + 3, m + 4

    def expr(self) -> int:
        value = self.term()
        while self.pos < len(self.tokens) and self.tokens[self.pos] in (self.plus, self.minus):
            op = self.tokens[self.pos]
            self.pos += 1
            right = self.term()
            value = (value + right) % self.m if op == self.plus else (value - right) % self.m
        return value

    def term(self) -> int:
        value = self.factor()
        while self.pos < len(self.tokens) and self.tokens[self.pos] == self.times:
            self.pos += 1
            value = value * self.factor() % self.m
        return value

    def factor(self) -> int:
        token = self.tokens[self.pos]
        self.pos += 1
        if token == self.minus:
            return -self.factor() % self.m
        if token == self.open:
            value = self.expr()
            self.pos += 1  # ')'
            return value
        return token


@register
class ModularArithmeticBrackets(FinalAnswerTask):
    """Expressions with + - * and brackets over digits in [0, m), evaluated mod m (Grazzi et al. 2025;
    Movahedi et al. 2025).

    Drawn from the recursive grammar of the Chomsky-hierarchy task, sized to exactly `length`
    tokens (here `length` counts every task token, brackets and operators included):
    E(1) = d, E(2) = -d (unary minus), E(L >= 3) = ( E(L-2) ) with probability 1/4, otherwise
    E(k) o E(L-1-k) with k uniform in [1, L-2] and o uniform in {+, -, *}. The answer is the
    value of the written expression with Python's precedence (unary minus, then *, then + and -),
    reduced mod m into [0, m); chance 1/m. Example (m = 5): `[BOS] ( 3 - -1 ) * 4 [EOI] 1`.
    """

    name = "modarith_brackets"
    summary = "expressions with + - * and brackets mod m = 5 (Grazzi et al. 2025; Movahedi et al. 2025); length = all expression tokens"
    operators = ("+", "-", "*")

    def __init__(self, m: int = 5):
        self.m = self.check_int(self.name, "m", m, 2)
        self._init_vocab([str(i) for i in range(m)] + list(self.operators) + ["(", ")"], [str(i) for i in range(m)])

    def _expression(self, length: int, draws: list[float], out: list[int]) -> None:
        """Append the tokens of one random expression of exactly `length` tokens, consuming draws."""
        m = self.m
        if length == 1:
            out.append(min(int(draws.pop() * m), m - 1))
        elif length == 2:
            out.append(m + 1)
            out.append(min(int(draws.pop() * m), m - 1))
        elif draws.pop() < 0.25:
            out.append(m + 3)
            self._expression(length - 2, draws, out)
            out.append(m + 4)
        else:
            left = 1 + min(int(draws.pop() * (length - 2)), length - 3)
            self._expression(left, draws, out)
            out.append(m + min(int(draws.pop() * 3), 2))
            self._expression(length - 1 - left, draws, out)

    def _draw(self, batch_size, length, g):
        # Every node consumes at most three draws, so 3 * length per example always suffices.
        uniforms = torch.rand(batch_size, 3 * length, generator=g, dtype=torch.float64).tolist()
        symbols, answers = [], []
        for row in uniforms:
            row.reverse()  # pop() from the end consumes the draws in order
            tokens: list[int] = []
            try:
                self._expression(length, row, tokens)
            except RecursionError:
                raise StatetrackError(f"task {self.name!r}: length {length} nests too deeply for Python's recursion limit") from None
            symbols.append(tokens)
            answers.append(_Parser(tokens, self.m).expr())
        return torch.tensor(symbols, dtype=torch.long), torch.tensor(answers, dtype=torch.long)

