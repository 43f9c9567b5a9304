"""Counting / timing (Anonymous 2025, section 4.3): an on/off signal of fixed-length stimuli (ISI)
separated by random gaps (ITI); next-step prediction.
"""

from __future__ import annotations

import torch

from statetrack import limits
from statetrack.errors import StatetrackError
from statetrack.tasks.base import PAD, Batch, Task
from statetrack.tasks.registry import register_task

PRESETS = {
    # name: (ISI, ITI min, ITI max, sequence length of Anonymous 2025)
    "short": (10, 20, 40, 200),
    "medium": (30, 60, 120, 600),
    "long": (50, 100, 200, 1000),
}
PATTERNS = ("train", "two_isi", "double_isi")


@register_task("counting")
class Counting(Task):
    """Binary signal: off for an ITI ~ U[iti_min, iti_max], on for exactly `isi` steps, repeated.

    Every sequence starts with an ITI followed by an ISI, and the pattern repeats to `length`
    time steps (`length` = T, the papers use 200 / 600 / 1000 for the short / medium / long
    presets: ISI 10 / 30 / 50, ITI [20, 40] / [60, 120] / [100, 200]). Next-step prediction:
    the target at t is the signal at t + 1. `supervise="all"` supervises every t < T - 1;
    `supervise="isi"` only the steps where the signal is on, whose next value is predictable
    (this contains the ISI offset, the measure of success).

    Phase-alignment test sets (`pattern`): `two_isi` = ITI, ISI, an ITI of `long_iti` steps
    (default 2 * iti_max, longer than any in training), ISI, then off; `double_isi` = ITI, ISI, a
    short gap of `gap` steps (default max(1, iti_min // 2): half the shortest off interval of
    training, so the model must restart its count sooner than it ever did), ISI, then off. They
    need `length` of at least iti_max + 2 isi + the middle gap + 1. The paper does not give its
    gap; the default is this library's reading of "deactivate briefly".
    """

    summary = (
        "timing: on/off signal, fixed ISI, random ITI; next-step prediction (Anonymous 2025); presets short|medium|long"
    )

    def __init__(
        self,
        preset: str = "short",
        isi: int | None = None,
        iti_min: int | None = None,
        iti_max: int | None = None,
        pattern: str = "train",
        long_iti: int | None = None,
        gap: int | None = None,
        supervise: str = "all",
    ):
        if preset not in PRESETS:
            raise StatetrackError(
                f"task {self.name!r}: unknown preset {preset!r}; expected one of: {', '.join(PRESETS)}"
            )
        if pattern not in PATTERNS:
            raise StatetrackError(
                f"task {self.name!r}: unknown pattern {pattern!r}; expected one of: {', '.join(PATTERNS)}"
            )
        if supervise not in ("all", "isi"):
            raise StatetrackError(f"task {self.name!r}: supervise must be 'all' or 'isi', got {supervise!r}")
        p_isi, p_min, p_max, self.paper_length = PRESETS[preset]
        self.preset, self.pattern, self.supervise = preset, pattern, supervise
        self.isi = self.check_int(self.name, "isi", p_isi if isi is None else isi, 1, limits.MAX_LENGTH)
        self.iti_min = self.check_int(self.name, "iti_min", p_min if iti_min is None else iti_min, 1, limits.MAX_LENGTH)
        self.iti_max = self.check_int(
            self.name, "iti_max", p_max if iti_max is None else iti_max, self.iti_min, limits.MAX_LENGTH
        )
        self.long_iti = self.check_int(
            self.name, "long_iti", 2 * self.iti_max if long_iti is None else long_iti, 1, limits.MAX_LENGTH
        )
        self.gap = self.check_int(
            self.name, "gap", max(1, self.iti_min // 2) if gap is None else gap, 1, limits.MAX_LENGTH
        )
        middle = {"train": None, "two_isi": self.long_iti, "double_isi": self.gap}[pattern]
        self.min_length = 2 if middle is None else self.iti_max + 2 * self.isi + middle + 1
        self.vocab = [PAD, "0", "1"]
        self.answers = ["0", "1"]

    def _onsets(self, batch_size: int, length: int, g: torch.Generator) -> torch.Tensor:
        """[B, K] onset times of the ISIs (may exceed the length; those are cut off)."""
        first_iti = torch.randint(self.iti_min, self.iti_max + 1, (batch_size, 1), generator=g)
        if self.pattern == "two_isi":
            return torch.cat([first_iti, first_iti + self.isi + self.long_iti], dim=1)
        if self.pattern == "double_isi":
            return torch.cat([first_iti, first_iti + self.isi + self.gap], dim=1)
        cycles = length // (self.iti_min + self.isi) + 1
        itis = torch.cat(
            [first_iti, torch.randint(self.iti_min, self.iti_max + 1, (batch_size, cycles - 1), generator=g)], dim=1
        )
        return itis.cumsum(dim=1) + self.isi * torch.arange(cycles)  # onset_k = sum_{j<=k} ITI_j + k ISI

    def signal(self, batch_size: int, length: int, generator: torch.Generator) -> torch.Tensor:
        """[B, T] 0/1 signal."""
        onsets = self._onsets(batch_size, length, generator)
        events = torch.zeros(batch_size, length + 1, dtype=torch.long)
        events.scatter_add_(1, onsets.clamp(max=length), torch.ones_like(onsets))
        events.scatter_add_(1, (onsets + self.isi).clamp(max=length), -torch.ones_like(onsets))
        return events.cumsum(dim=1)[:, :length]

    def sample(self, batch_size: int, length: int, generator: torch.Generator) -> Batch:
        self.check_length(length)
        x = self.signal(batch_size, length, generator)
        targets = torch.zeros_like(x)
        targets[:, :-1] = x[:, 1:]
        mask = torch.zeros_like(x, dtype=torch.bool)
        mask[:, :-1] = True if self.supervise == "all" else x[:, :-1] == 1
        return Batch(x + 1, targets, mask)

    def describe(self, batch: Batch, index: int = 0) -> str:
        signal = "".join(self.vocab[i] for i in batch.inputs[index].tolist())
        return f"signal: {signal}\nsupervised steps: {int(batch.mask[index].sum())}"
