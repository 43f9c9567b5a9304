"""The shipped checks: the papers' claims that need no training, each one number the library computes.

A paper's point is sometimes a construction (weights written down by hand), a probability (a
Monte Carlo estimate) or the behaviour of a recurrence in floating point, not a trained model's
accuracy. A check computes that number from fixed seeds in well under a second, so that it is
computed whenever a spec's claims are scored (the report, `statetrack results`, the book) and the
same code always gives the same figure. A claim reads one with `measure: check:NAME` and an
`at_least` or `below` bound (`statetrack.results.claims.check_verdict`); docs/analysis.md lists
them.

A new check is one function with `@register_check(name, measures)`: `measures` says in words what
the number is, and the claims page prints it as the claim's test.
"""

from __future__ import annotations

import functools
import math

from statetrack.checks.registry import register_check

# ---- Anonymous 2025, App. I: offset prediction by one complex S4D mode --------------------------
BURSTS = (2, 3, 4, 8)  # the burst lengths n the construction is checked at
ON_RUN = 8  # the runs of 1s between bursts are 1..ON_RUN tokens long
AT_ONE = 1e-3  # |h - 1| below this reads as h = 1 (the sleep state)


def burst_inputs(n: int, batch: int, length: int, generator) -> tuple:
    """([B, T] float 0/1 tokens: runs of 1s of 1..ON_RUN tokens, each followed by a burst of exactly
    n 0s; [B, T] bool: the positions whose next token is the first 0 of a burst, which nothing can
    predict)."""
    import torch

    segments = length // (n + 1) + 1  # enough runs-and-bursts to fill the length
    ones = torch.randint(1, ON_RUN + 1, (batch, segments), generator=generator)  # [B, K]
    ends = (ones + n).cumsum(dim=1)  # [B, K]: where each run-and-burst ends
    t = torch.arange(length).expand(batch, length).contiguous()  # [B, T]
    segment = torch.searchsorted(ends, t, right=True)  # [B, T]
    offset = t - (ends.gather(1, segment) - (ones + n).gather(1, segment))  # position within the segment
    run = ones.gather(1, segment)
    return (offset < run).float(), offset == run - 1


def s4d_burst_accuracy(n: int, batch: int = 16, length: int = 2000, seed: int = 0) -> float:
    """Next-token accuracy of the one-mode S4D of Anonymous 2025, App. I on 1s and bursts of n 0s:
    h_0 = 1, h_t = A h_{t-1} + B x_t with A = exp(i 2 pi / n), B = 1 - exp(i 2 pi / n), read out as
    phi(h_t) = 1{h_t = 1} (predict 1 in the sleep state, 0 while counting), over every position
    but those before the first 0 of a burst. Computed in complex64 by the library's diagonal scan."""
    import torch

    from statetrack.ops.diagonal import diagonal_scan

    tokens, onset = burst_inputs(n, batch, length, torch.Generator().manual_seed(seed))
    a = torch.full((batch, length, 1), complex(math.cos(2 * math.pi / n), math.sin(2 * math.pi / n)))
    h, _ = diagonal_scan(a, (1 - a) * tokens[..., None], torch.ones(batch, 1, dtype=torch.complex64))
    predicted = ((h[..., 0] - 1).abs() < AT_ONE).float()  # [B, T]: the prediction of token t + 1
    scored = ~onset[:, :-1]
    return (predicted[:, :-1] == tokens[:, 1:])[scored].float().mean().item()


@register_check(
    "s4d_offset_construction",
    f"worst next-token accuracy over burst lengths n = {', '.join(map(str, BURSTS))} of the one-mode S4D "
    "A = exp(i2π/n), B = 1 - exp(i2π/n), h_0 = 1 (Anonymous 2025, App. I), every token but a burst's first, "
    "16 sequences x 2000 tokens, no training",
)
def s4d_offset_construction() -> float:
    return min(s4d_burst_accuracy(n) for n in BURSTS)


# ---- Siems et al. 2026, section 4.2: the belief recurrence in floating point --------------------
BELIEF_TASK = {"n": 3, "noise": 0.5, "reveal_prob": 0.3}  # pfsa-belief's quick task
BELIEF_SAMPLES, BELIEF_LENGTH = 8, 600


@functools.cache
def _belief_decay():
    import torch

    from statetrack.checks.belief import belief_decay
    from statetrack.tasks import make_task

    task = make_task("pfsa", **BELIEF_TASK)
    batch = task.sample(BELIEF_SAMPLES, BELIEF_LENGTH, torch.Generator().manual_seed(0))
    return belief_decay(task, batch.inputs)


_BELIEF_RUN = f"{BELIEF_SAMPLES} sequences x {BELIEF_LENGTH} tokens of pfsa(n=3, noise=0.5, reveal_prob=0.3), seed 0"


@register_check(
    "belief_norm_is_survival_product",
    "largest relative difference between the unnormalised float64 belief's norm ‖h_t‖₁ and the product "
    f"of survivals s_0 ... s_(t-1), over {_BELIEF_RUN}, wherever the product is a normal float64",
)
def belief_norm_is_survival_product() -> float:
    import torch

    decay = _belief_decay()
    product = decay.log_product.exp()
    normal = product >= torch.finfo(torch.float64).tiny
    return ((decay.norms["float64"] - product).abs() / product)[normal].max().item()


@register_check(
    "belief_float32_underflow",
    "share of sequences whose unnormalised float32 belief's norm falls below the smallest normal float32 "
    f"(underflows), over {_BELIEF_RUN}",
)
def belief_float32_underflow() -> float:
    import torch

    observed = _belief_decay().observed(torch.float32)
    return (observed > 0).float().mean().item()


@register_check(
    "belief_renormalised_error",
    "largest deviation max over q of abs(b_t(q) - b_exact(q)) of the renormalised float32 belief from the float64 "
    f"one, over every token of {_BELIEF_RUN}",
)
def belief_renormalised_error() -> float:
    return _belief_decay().errors["renormalised float32"].max().item()


# ---- Movahedi et al. 2025, Thm. 4.1: the expected memory of a selective gate ---------------------
GATE_BIAS = 5.0  # b > logit(0.99) ~ 4.6, so that every gate stays open when omega = 0
GATE_NORMS = (0.25, 0.5, 1.0, 2.0)  # ||omega||
MEMORY_SAMPLES, MEMORY_LENGTH = 4000, 200


def expected_memory(omega: float, bias: float = GATE_BIAS, seed: int = 0) -> float:
    """Monte Carlo estimate of M(omega, b) (Movahedi et al. 2025, Thm. 4.1): the expected length T of
    the first stretch with lambda_t = sigma(omega^T x_t + b) > 0.99 for every t in (0, T], x_t ~ N(0, I).
    omega^T x_t ~ N(0, ||omega||^2), so a scalar omega of that norm stands for any omega. Sequences
    of MEMORY_LENGTH tokens (far beyond the stretches of the norms checked)."""
    import torch

    x = torch.randn(MEMORY_SAMPLES, MEMORY_LENGTH, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    open_gate = torch.sigmoid(omega * x + bias) > 0.99
    return open_gate.long().cumprod(dim=1).sum(dim=1).double().mean().item()


@register_check(
    "gate_memory_falls_with_omega",
    "largest ratio M(ω_(k+1), b) / M(ω_k, b) of Monte Carlo expected memories (Movahedi et al. 2025, Thm. 4.1: "
    "the first stretch with every gate σ(ω^T x_t + b) > 0.99), b = 5, "
    f"‖ω‖ = {', '.join(f'{w:g}' for w in GATE_NORMS)}, {MEMORY_SAMPLES} sequences of N(0, 1) inputs, seed 0",
)
def gate_memory_falls_with_omega() -> float:
    memories = [expected_memory(w) for w in GATE_NORMS]
    return max(later / earlier for earlier, later in zip(memories, memories[1:]))
