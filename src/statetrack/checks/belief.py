"""Belief decay: the unnormalised PFSA-SR recurrence underflows where the survival product predicts.

The exact belief over a PFSA-SR task's hidden states is b_{t+1} = f(T_s Z_s b_t), f(x) = x / ||x||_1
(Siems et al. 2026, section 4.1). The linear recurrence h_{t+1} = T_s Z_s h_t that defers f to the
decoder has ||h_t||_1 = prod_{k<=t} s_k, with s_k = ||Z b_k||_1 the survival probability of token k
(Siems et al. 2026, section 4.1 and Figure 5): it decays geometrically, at the mean log survival per
token, and leaves the range of a float after a length that the s_k predict.

"Underflow" is IEEE 754's: a result below the dtype's smallest normal number, `finfo.tiny` (2^-126
in float32, 2^-1022 in float64). From there on the state is subnormal and loses relative precision
with every step; it reaches exactly 0 (no belief: h / ||h||_1 = 0/0) some steps later, at a point
set by subnormal rounding rather than by the s_k (a weight of 0.5 halves one unit in the last place
to 0, a weight of 0.9 rounds it back up to one unit), so that point is observed and reported, not
predicted. The predicted underflow length is the first prefix with sum_k log s_k < log tiny, summed
in float64 log space (which never underflows); the observed one is the first prefix whose float
||h_t||_1 is below tiny. The renormalised tracker keeps ||b_t||_1 = 1 and stays exact at any length.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from statetrack.errors import StatetrackError
from statetrack.tasks import TASKS

DTYPES = (torch.float32, torch.float64)
NEVER = 0  # underflow length of a sequence that does not underflow (a length is >= 1)
TIE = 1e-9  # nats: log P_t this close to log tiny counts as equal (see `predicted_underflow`)
MAX_ELEMENTS = 1 << 23  # beliefs held at once per tracker: [chunk, T, states]


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def first_length(mask: torch.Tensor) -> torch.Tensor:
    """[B, T] bool -> [B] long: the length of the shortest prefix whose last token has mask set
    (t + 1 for the first such t), or NEVER."""
    return torch.where(mask.any(dim=1), mask.int().argmax(dim=1) + 1, NEVER)


def predicted_underflow(log_product: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """[B, T] log P_t = sum_{k<=t} log s_k -> [B] first length with P_t < finfo(dtype).tiny, or NEVER."""
    # a product of dyadic survivals can equal tiny exactly, which is no underflow, while the rounding
    # of the float64 sum of logs (~1e-12 over thousands of tokens) may put it a hair below
    return first_length(log_product < math.log(torch.finfo(dtype).tiny) - TIE)


def flushes_denormals() -> bool:
    """Whether this process flushes subnormal results to zero (`torch.set_flush_denormal(True)`): then
    a state reaches 0 as soon as its largest component would be subnormal, a few tokens before its norm
    falls below tiny, and the prediction no longer applies."""
    return bool(torch.tensor(torch.finfo(torch.float32).tiny) / 2 == 0)


def require_tracker(task) -> None:
    """A clear error unless `task` has a belief recurrence `track(inputs, renormalise, dtype)`."""
    if not callable(getattr(task, "track", None)):
        known = sorted(name for name, cls in TASKS.items() if callable(getattr(cls, "track", None)))
        raise StatetrackError(
            f"task {task.name!r} has no belief recurrence to analyse; tasks with one: {', '.join(known)}"
        )


@dataclass
class BeliefDecay:
    """Per sequence and token: the survival products and what each tracker computed (see `belief_decay`)."""

    length: int
    log_survival: torch.Tensor  # [B, T] float64 log s_t
    norms: dict[str, torch.Tensor] = field(default_factory=dict)  # dtype -> [B, T] observed ||h_t||_1 (as float64)
    errors: dict[str, torch.Tensor] = field(
        default_factory=dict
    )  # tracker -> [B, T] max_q |b_t(q) - b_exact(q)|, NaN where h = 0
    flush_to_zero: bool = False  # subnormals were flushed to 0 (see `flushes_denormals`)

    @property
    def log_product(self) -> torch.Tensor:
        """[B, T] log P_t, P_t = prod_{k<=t} s_k = ||h_t||_1 in exact arithmetic."""
        return self.log_survival.cumsum(dim=1)

    @property
    def mean_log_survival(self) -> float:
        """The decay rate: mean of log s_t over every sequence and token (nats per token)."""
        return self.log_survival.mean().item()

    def predicted(self, dtype: torch.dtype) -> torch.Tensor:
        return predicted_underflow(self.log_product, dtype)

    def observed(self, dtype: torch.dtype) -> torch.Tensor:
        """[B] first length whose float ||h_t||_1 is below finfo(dtype).tiny, or NEVER."""
        return first_length(self.norms[dtype_name(dtype)] < torch.finfo(dtype).tiny)

    def zero(self, dtype: torch.dtype) -> torch.Tensor:
        """[B] first length at which the float state is exactly 0, or NEVER."""
        return first_length(self.norms[dtype_name(dtype)] == 0)

    def typical(self, dtype: torch.dtype) -> float:
        """Closed-form underflow length of a sequence with the mean decay rate: log tiny / mean log s."""
        rate = self.mean_log_survival
        return math.log(torch.finfo(dtype).tiny) / rate if rate < 0 else math.inf


def belief_decay(task, inputs: torch.Tensor) -> BeliefDecay:
    """Run the exact float64 tracker, the renormalised float32 tracker and the linear (unnormalised)
    recurrence in float32 and float64 on token ids `inputs` [B, T] of a PFSA-SR task."""
    require_tracker(task)
    if inputs.dim() != 2 or inputs.shape[1] < 1:
        raise StatetrackError(f"inputs must be token ids of shape [batch, length >= 1], got {tuple(inputs.shape)}")
    states = len(task.states)
    chunk = max(1, MAX_ELEMENTS // (inputs.shape[1] * states))  # bounds memory for long inputs and n = 6
    parts = [_track_chunk(task, part) for part in inputs.split(chunk)]
    decay = BeliefDecay(inputs.shape[1], torch.cat([p[0] for p in parts]), flush_to_zero=flushes_denormals())
    for key in parts[0][1]:
        decay.norms[key] = torch.cat([p[1][key] for p in parts])
    for key in parts[0][2]:
        decay.errors[key] = torch.cat([p[2][key] for p in parts])
    return decay


def _track_chunk(task, inputs: torch.Tensor):
    exact, survival = task.track(inputs, renormalise=True, dtype=torch.float64)  # [B, T, N], [B, T]
    norms, errors = {}, {}
    renormalised, _ = task.track(inputs, renormalise=True, dtype=torch.float32)
    errors["renormalised float32"] = (renormalised.double() - exact).abs().amax(dim=-1)
    for dtype in DTYPES:
        h, norm = task.track(inputs, renormalise=False, dtype=dtype)
        norms[dtype_name(dtype)] = norm.double()
        decoded = h.double() / norm.double()[..., None]  # 0/0 = NaN where the state is zero
        errors[f"linear {dtype_name(dtype)}"] = (decoded - exact).abs().amax(dim=-1)
    return survival.log(), norms, errors
