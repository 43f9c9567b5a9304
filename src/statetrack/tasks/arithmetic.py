"""Parity, modular addition and modular arithmetic in the papers/000 format (SPEC section 2)."""

from __future__ import annotations

import torch

from statetrack.tasks.base import FinalAnswerTask
from statetrack.tasks.registry import register


def _integers(m: int) -> list[str]:
    return [str(i) for i in range(m)]


@register
class Parity(FinalAnswerTask):
    """`[BOS] b_1 ... b_n [EOI]` -> (sum_i b_i) mod 2."""

    name = "parity"
    summary = "bits; answer = number of ones mod 2 (papers/000 format)"

    def __init__(self):
        self._init_vocab(["0", "1"], ["0", "1"])

    def _draw(self, batch_size, length, g):
        bits = torch.randint(0, 2, (batch_size, length), generator=g)
        return bits, bits.sum(dim=1) % 2


@register
class ModularAddition(FinalAnswerTask):
    """`[BOS] a_1 ... a_n [EOI]` -> (sum_i a_i) mod m, each a_i in [0, m) a single token."""

    name = "modadd"
    summary = "integers in [0, m); answer = sum mod m (papers/000)"

    def __init__(self, m: int = 20):
        self.m = self.check_int(self.name, "m", m, 2)
        self._init_vocab(_integers(m), _integers(m))

    def _draw(self, batch_size, length, g):
        values = torch.randint(0, self.m, (batch_size, length), generator=g)
        return values, values.sum(dim=1) % self.m


@register
class ModularArithmetic(FinalAnswerTask):
    """`[BOS] a_1 o_1 a_2 ... o_{n-1} a_n [EOI]`, o in {+, -, *}, evaluated left to right mod m.

    `length` counts the operands a_i (papers/000 App. B samples n operands and interleaves n - 1
    operators), so an example has 2n - 1 task tokens. Example (m = 20):
    `[BOS] 3 * 9 - 17 + 6 + 12 [EOI] 8`.
    """

    name = "modarith"
    summary = "integers and + - * in [0, m), evaluated left to right mod m (papers/000); length = operands"
    operators = ("+", "-", "*")

    def __init__(self, m: int = 20):
        self.m = self.check_int(self.name, "m", m, 2)
        self._init_vocab(_integers(m) + list(self.operators), _integers(m))

    def _draw(self, batch_size, length, g):
        operands = torch.randint(0, self.m, (batch_size, length), generator=g)
        ops = torch.randint(0, len(self.operators), (batch_size, length - 1), generator=g)
        value = operands[:, 0].clone()
        for i in range(length - 1):
            a, op = operands[:, i + 1], ops[:, i]
            value = torch.where(op == 0, value + a, torch.where(op == 1, value - a, value * a)) % self.m
        symbols = torch.empty(batch_size, 2 * length - 1, dtype=torch.long)
        symbols[:, 0::2] = operands
        symbols[:, 1::2] = ops + self.m  # operator symbols follow the m integers
        return symbols, value
