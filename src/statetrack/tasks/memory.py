"""Memory tasks: copying (Jelassi et al. 2024), copy memory and denoising / selective copying
(Anonymous 2025, after Arjovsky et al. 2016 and Jing et al. 2019).
"""

from __future__ import annotations

import string

import torch

from statetrack import limits
from statetrack.errors import StatetrackError
from statetrack.tasks.base import PAD, Batch, Task
from statetrack.tasks.registry import register_task


@register_task("copy")
class Copying(Task):
    """`$ x_1 .. x_n | x_1 .. x_n .` over `symbols` letters (Jelassi et al. 2024: 26 letters).

    Teacher-forced next-token prediction on the copied span: the positions of `|` and of the
    copied x_1 .. x_n are supervised with the next token (x_1 .. x_n, then the end mark `.`), so a
    string is right when all n + 1 supervised positions are: evaluation reports that string
    accuracy as `sequence_accuracy`, beside the per-character `accuracy`. `length` = n (train 5..50, evaluate
    up to 100). Classes: the letters, then `.`.
    """

    summary = "copy a string: $ x | x . over 26 letters (Jelassi et al. 2024); length = string length n"
    BOS, SEP, EOS = "$", "|", "."

    def __init__(self, symbols: int = 26):
        self.symbols = self.check_int(self.name, "symbols", symbols, 2, limits.MAX_CLASSES)
        if symbols > 26:
            raise StatetrackError(f"task {self.name!r}: symbols must be an integer <= 26 (letters), got {symbols!r}")
        letters = list(string.ascii_lowercase[:symbols])
        self.vocab = [PAD, self.BOS, self.SEP, self.EOS] + letters
        self.answers = letters + [self.EOS]

    def sample(self, batch_size: int, length: int, generator: torch.Generator) -> Batch:
        self.check_length(length)
        n, offset = length, 4  # letters follow the 4 specials
        x = torch.randint(0, self.symbols, (batch_size, n), generator=generator)
        col = lambda token: torch.full((batch_size, 1), self.vocab.index(token), dtype=torch.long)  # noqa: E731
        inputs = torch.cat([col(self.BOS), x + offset, col(self.SEP), x + offset, col(self.EOS)], dim=1)  # [B, 2n+3]
        targets = torch.zeros_like(inputs)
        mask = torch.zeros_like(inputs, dtype=torch.bool)
        # position n+1 is `|`; positions n+1 .. 2n+1 predict x_1 .. x_n, then `.`
        targets[:, n + 1 : 2 * n + 1] = x
        targets[:, 2 * n + 1] = self.symbols
        mask[:, n + 1 : 2 * n + 2] = True
        return Batch(inputs, targets, mask)


class _DelayedRecall(Task):
    """Shared layout of copy memory and denoising: S+T input positions, an indicator, S output slots.

    `vary` picks what `length` means, for the two generalization settings of Anonymous 2025:
    `vary="blanks"`: length = T (blank count), S = `pattern` (train T in 10..50, test up to 500);
    `vary="pattern"`: length = S (pattern length), T = `blanks` (train S in 2..10, test up to 100).
    Vocabulary: `symbols` digits, blank `_`, indicator `:` (and padding). Targets are the pattern
    digits at the S output slots (mask there only); chance 1 / symbols.
    """

    BLANK, INDICATOR = "_", ":"

    def __init__(self, vary: str = "blanks", pattern: int = 10, blanks: int = 50, symbols: int = 8):
        if vary not in ("blanks", "pattern"):
            raise StatetrackError(f"task {self.name!r}: vary must be 'blanks' or 'pattern', got {vary!r}")
        self.vary = vary
        self.pattern = self.check_int(self.name, "pattern", pattern, 1, limits.MAX_LENGTH)
        self.blanks = self.check_int(self.name, "blanks", blanks, 0, limits.MAX_LENGTH)
        self.symbols = self.check_int(self.name, "symbols", symbols, 2, limits.MAX_CLASSES)
        digits = [str(i) for i in range(symbols)]
        self.vocab = [PAD] + digits + [self.BLANK, self.INDICATOR]
        self.answers = digits

    def sizes(self, length: int) -> tuple[int, int]:
        """(S, T) for a given `length`."""
        return (self.pattern, length) if self.vary == "blanks" else (length, self.blanks)

    def _body(self, x: torch.Tensor, blanks: int, g: torch.Generator) -> torch.Tensor:
        raise NotImplementedError

    def sample(self, batch_size: int, length: int, generator: torch.Generator) -> Batch:
        self.check_length(length)
        s, t = self.sizes(length)
        blank, indicator = self.vocab.index(self.BLANK), self.vocab.index(self.INDICATOR)
        x = torch.randint(0, self.symbols, (batch_size, s), generator=generator)
        body = self._body(x + 1, t, generator)  # [B, S+T] token ids (digits follow PAD)
        tail = torch.full((batch_size, s + 1), blank, dtype=torch.long)
        tail[:, 0] = indicator
        inputs = torch.cat([body, tail], dim=1)  # [B, 2S+T+1]
        targets = torch.zeros_like(inputs)
        targets[:, -s:] = x
        mask = torch.zeros_like(inputs, dtype=torch.bool)
        mask[:, -s:] = True
        return Batch(inputs, targets, mask)


@register_task("copy_memory")
class CopyMemory(_DelayedRecall):
    """Copy memory (Anonymous 2025): S digits, T blanks, the indicator `:`, then S output slots.

    The layout is S + T + 1 + S tokens; Anonymous 2025 counts the indicator inside its T + 2S.
    `vary="blanks"`: length = T, S = `pattern` (train T in 10..50, test up to 500);
    `vary="pattern"`: length = S, T = `blanks` (train S in 2..10, test up to 100).
    Targets: the pattern digits at the S output slots (mask there only); chance 1 / symbols.
    """

    summary = "copy memory: S digits, T blanks, indicator, recall S digits (Anonymous 2025); vary=blanks|pattern"

    def _body(self, x, blanks, g):
        blank = self.vocab.index(self.BLANK)
        return torch.cat([x, torch.full((x.shape[0], blanks), blank, dtype=torch.long)], dim=1)


@register_task("denoise")
class Denoising(_DelayedRecall):
    """Denoising / selective copying (Anonymous 2025): the S digits are scattered, in order,
    among S + T positions (uniformly random positions), the rest blank; then `:` and S slots.

    `vary="blanks"`: length = T, S = `pattern` (train T in 10..50, test up to 500);
    `vary="pattern"`: length = S, T = `blanks` (train S in 2..10, test up to 100).
    Targets: the pattern digits at the S output slots (mask there only); chance 1 / symbols.
    """

    summary = "selective copying: S digits scattered among S+T blanks, indicator, recall S digits (Anonymous 2025)"

    def _body(self, x, blanks, g):
        b, s = x.shape
        keys = torch.rand(b, s + blanks, generator=g)
        positions = keys.argsort(dim=1)[:, :s].sort(dim=1).values  # [B, S] increasing
        body = torch.full((b, s + blanks), self.vocab.index(self.BLANK), dtype=torch.long)
        return body.scatter(1, positions, x)
