"""Chomsky-hierarchy tasks (Deletang et al. 2023; Grazzi et al. 2025; Movahedi et al. 2025): even pairs,
cycle navigation and modular arithmetic with brackets. All use the `[BOS] ... [EOI] answer` format.
"""

from __future__ import annotations

import torch

from statetrack import limits
from statetrack.errors import StatetrackError
from statetrack.tasks.base import FinalAnswerTask
from statetrack.tasks.registry import register_task


@register_task("even_pairs")
class EvenPairs(FinalAnswerTask):
    """Strings over {a, b}; answer "even" when the number of `ab` plus `ba` substrings is even.

    That count is even exactly when the first and last symbols agree (regular; Deletang et al.).
    """

    summary = "strings over {a, b}; is the number of ab and ba pairs even? (Deletang et al. 2023; regular)"

    def __init__(self):
        self._init_vocab(["a", "b"], ["odd", "even"])

    def _draw(self, batch_size, length, g):
        symbols = torch.randint(0, 2, (batch_size, length), generator=g)
        return symbols, (symbols[:, 0] == symbols[:, -1]).long()


@register_task("cycle_navigation")
class CycleNavigation(FinalAnswerTask):
    """Moves on a cycle of `cycle` positions starting at 0: `0` stay, `+1` forward, `-1` back.

    The answer is the final position (Deletang et al.: cycle of 5).
    """

    summary = "moves 0/+1/-1 on a cycle of 5 positions from 0; answer = final position (Deletang et al. 2023; regular)"
    steps = (0, 1, -1)

    def __init__(self, cycle: int = 5):
        self.cycle = self.check_int(self.name, "cycle", cycle, 2, limits.MAX_CLASSES)
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


@register_task("modarith_brackets")
class ModularArithmeticBrackets(FinalAnswerTask):
    """Expressions with + - * and brackets over digits in [0, m), evaluated mod m (Deletang et al. 2023;
    Grazzi et al. 2025; Movahedi et al. 2025).

    `length` counts every task token (digits, operators, brackets), and every example has exactly
    `length` of them. Every length >= 1 can be produced, so the minimum length is 1.

    `grammar="bracketed"` (default) is the grammar of the Chomsky-hierarchy benchmark's generator
    (Deletang et al. 2023), which Grazzi et al. 2025 and Movahedi et al. 2025 use: every binary
    operation sits in its own brackets. The terminals are fixed by the length, E(1) = d,
    E(2) = -d, E(3) = (d), E(4) = (-d), with the digit d uniform in [0, m); for L >= 5,
    E(L) = ( E(k) o E(L-3-k) ) with k uniform in [1, L-4] and o uniform in {+, -, *} (the
    benchmark's experiments switch multiplication on).

    Every sub-expression's value is reduced
    mod m as in Python (-d gives (-d) mod m), so the answer is the written expression's value
    mod m, in [0, m). Example (m = 5): `[BOS] ( ( ( 3 - 2 ) * 2 ) - ( 2 * 3 ) ) [EOI] 1`.
    At length 40 an expression has on average 7.6 binary operators and 10.2 bracket pairs (one
    per operator, the rest around (d) and (-d) terminals; 20,000 samples, seed 0).

    `grammar="precedence"` brackets only at random and relies on precedence: E(1) = d, E(2) = -d,
    E(L >= 3) = ( E(L-2) ) with probability 1/4, otherwise E(k) o E(L-1-k) with k uniform in
    [1, L-2] and o uniform in {+, -, *}; the answer uses Python's precedence (unary minus, then *,
    then + and -), mod m. At length 40 it averages 12.9 binary operators but only 4.3 bracket pairs.
    Chance is 1/m for both.
    """

    summary = (
        "expressions mod m = 5, every + - * in its own brackets (Deletang et al. 2023; Grazzi et al. 2025; "
        "Movahedi et al. 2025); grammar=bracketed|precedence; length = all expression tokens"
    )
    operators = ("+", "-", "*")
    grammars = ("bracketed", "precedence")

    def __init__(self, m: int = 5, grammar: str = "bracketed"):
        self.m = self.check_int(self.name, "m", m, 2, limits.MAX_CLASSES)
        if grammar not in self.grammars:
            raise StatetrackError(
                f"task {self.name!r}: unknown grammar {grammar!r}; expected one of: {', '.join(self.grammars)}"
            )
        self.grammar = grammar
        self._init_vocab([str(i) for i in range(m)] + list(self.operators) + ["(", ")"], [str(i) for i in range(m)])

    # token ids of the symbols: digits 0..m-1, then + - * ( )
    def _ids(self) -> tuple[int, int, int, int, int]:
        m = self.m
        return m, m + 1, m + 2, m + 3, m + 4

    def _bracketed(self, length: int, draws: list[float]) -> tuple[list[int], int]:
        """Tokens and value (mod m) of one fully bracketed expression of exactly `length` tokens.

        Iterative, so deep nesting never meets Python's recursion limit. Draws are consumed in
        order: at each operation node the split then the operator, at each terminal its digit;
        nodes are visited left to right (pre-order). A tree with n operations has n + 1 terminals
        and at least 4n + 1 tokens, so it takes 3n + 1 <= `length` draws.
        """
        m = self.m
        plus, minus, times, open_, close = self._ids()
        tokens: list[int] = []
        values: list[int] = []
        position = 0
        # work items, last one first: ("expr", L) expands a sub-expression, ("tok", id) writes a
        # token, ("apply", op) writes ")" and combines the two topmost values with operator op.
        work: list[tuple[str, int]] = [("expr", length)]
        while work:
            kind, arg = work.pop()
            if kind == "tok":
                tokens.append(arg)
            elif kind == "apply":
                tokens.append(close)
                right, left = values.pop(), values.pop()
                if arg == plus:
                    values.append((left + right) % m)
                elif arg == minus:
                    values.append((left - right) % m)
                else:
                    values.append(left * right % m)
            elif arg <= 4:
                digit = min(int(draws[position] * m), m - 1)
                position += 1
                negative = arg in (2, 4)
                if arg >= 3:
                    tokens.append(open_)
                if negative:
                    tokens.append(minus)
                tokens.append(digit)
                if arg >= 3:
                    tokens.append(close)
                values.append(-digit % m if negative else digit)
            else:
                left = 1 + min(int(draws[position] * (arg - 4)), arg - 5)
                op = plus + min(int(draws[position + 1] * 3), 2)
                position += 2
                work += [("apply", op), ("expr", arg - 3 - left), ("tok", op), ("expr", left), ("tok", open_)]
        return tokens, values[0]

    def _precedence(self, length: int, draws: list[float], out: list[int]) -> None:
        """Append the tokens of one `grammar="precedence"` expression of exactly `length` tokens, consuming draws."""
        m = self.m
        if length == 1:
            out.append(min(int(draws.pop() * m), m - 1))
        elif length == 2:
            out.append(m + 1)
            out.append(min(int(draws.pop() * m), m - 1))
        elif draws.pop() < 0.25:
            out.append(m + 3)
            self._precedence(length - 2, draws, out)
            out.append(m + 4)
        else:
            left = 1 + min(int(draws.pop() * (length - 2)), length - 3)
            self._precedence(left, draws, out)
            out.append(m + min(int(draws.pop() * 3), 2))
            self._precedence(length - 1 - left, draws, out)

    def _draw(self, batch_size: int, length: int, g: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        symbols, answers = [], []
        if self.grammar == "bracketed":
            # at most `length` draws per example (see _bracketed)
            uniforms = torch.rand(batch_size, length, generator=g, dtype=torch.float64).tolist()
            for row in uniforms:
                tokens, value = self._bracketed(length, row)
                symbols.append(tokens)
                answers.append(value)
            return torch.tensor(symbols, dtype=torch.long), torch.tensor(answers, dtype=torch.long)
        # Every node consumes at most three draws, so 3 * length per example always suffices.
        uniforms = torch.rand(batch_size, 3 * length, generator=g, dtype=torch.float64).tolist()
        for row in uniforms:
            row.reverse()  # pop() from the end consumes the draws in order
            tokens = []  # filled in by _precedence
            try:
                self._precedence(length, row, tokens)
            except RecursionError:
                raise StatetrackError(
                    f"task {self.name!r}: length {length} nests too deeply for Python's recursion limit"
                ) from None
            symbols.append(tokens)
            answers.append(_Parser(tokens, self.m).expr())
        return torch.tensor(symbols, dtype=torch.long), torch.tensor(answers, dtype=torch.long)
