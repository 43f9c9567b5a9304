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
import re
from dataclasses import dataclass, field
from pathlib import Path

import torch

from statetrack.analysis.spectrum import save_figure
from statetrack.errors import StatetrackError
from statetrack.tasks import make_task
from statetrack.tasks.registry import TASKS

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


# ---- text ----------------------------------------------------------------------------------------
def _spread(lengths: torch.Tensor) -> str:
    """'median [min, max]' of the lengths that are not NEVER."""
    hit = lengths[lengths != NEVER]
    if hit.numel() == 0:
        return "none"
    return f"{int(hit.median())} [{int(hit.min())}, {int(hit.max())}]"


def _max(values: torch.Tensor) -> str:
    defined = values[~values.isnan()]
    return "no belief" if defined.numel() == 0 else f"{defined.max().item():.1e}"


def format_decay(decay: BeliefDecay) -> str:
    """The underflow table (predicted vs observed, per dtype) and the trackers' deviation from the exact belief."""
    from statetrack.results.tables import text_table

    samples, length, rate = decay.log_survival.shape[0], decay.length, decay.mean_log_survival
    halving = f"||h||_1 halves every {math.log(2) / -rate:.2f} tokens" if rate < 0 else "no decay"
    lines = [f"mean log survival per token: {rate:.4f} ({halving})", ""]
    header = [
        "dtype",
        "smallest normal",
        "typical (log tiny / mean log s)",
        "predicted underflow",
        "observed underflow",
        "underflowed",
        "predicted = observed",
        "|diff| <= 1",
        "state exactly 0",
    ]
    body = []
    for dtype in DTYPES:
        predicted, observed = decay.predicted(dtype), decay.observed(dtype)
        body.append(
            [
                dtype_name(dtype),
                f"{torch.finfo(dtype).tiny:.2e}",
                f"{decay.typical(dtype):.0f}",
                _spread(predicted),
                _spread(observed),
                f"{int((observed != NEVER).sum())}/{samples}",
                f"{int((predicted == observed).sum())}/{samples}",
                f"{int(((predicted - observed).abs() <= 1).sum())}/{samples}",
                _spread(decay.zero(dtype)),
            ]
        )
    lines.append("underflow length (tokens until ||h_t||_1 < smallest normal; median [range] over sequences):")
    lines.append(text_table(header, body))
    if decay.flush_to_zero:
        lines.append(
            "note: this process flushes subnormals to zero (torch.set_flush_denormal(True)): "
            "a state drops to 0 as soon as its largest component falls below the smallest normal, "
            "which can be before its norm does"
        )
    for dtype in DTYPES:
        if (decay.observed(dtype) == NEVER).all() and decay.typical(dtype) > length:
            lines.append(
                f"{dtype_name(dtype)}: no sequence underflows within {length} tokens; "
                f"pass --length above {decay.typical(dtype):.0f} to see it"
            )
    window = max(1, length // 10)
    header = [
        "tracker",
        "while ||h||_1 >= smallest normal",
        f"last {window} tokens",
        "while subnormal",
        "tokens with h = 0",
    ]
    body = []
    for key, error in decay.errors.items():
        if key.startswith("linear"):
            dtype = torch.float32 if key.endswith("float32") else torch.float64
            norms = decay.norms[dtype_name(dtype)]
            normal, subnormal = (
                error[norms >= torch.finfo(dtype).tiny],
                error[(norms > 0) & (norms < torch.finfo(dtype).tiny)],
            )
        else:  # ||b_t||_1 = 1 at every token
            normal, subnormal = error, error[:0]
        body.append(
            [
                key,
                _max(normal),
                _max(error[:, -window:]),
                _max(subnormal) if subnormal.numel() else "never",
                f"{100 * error.isnan().double().mean().item():.1f}%",
            ]
        )
    lines += [
        "",
        "decoded belief h_t / ||h_t||_1 vs the exact float64 renormalised tracker "
        "(max over states and sequences of |b - b_exact|):",
        text_table(header, body),
    ]
    return "\n".join(lines)


# ---- plot ----------------------------------------------------------------------------------------
def plot_decay(decay: BeliefDecay, title: str, path: str | Path, example: int = 0) -> Path:
    """Left: log10 ||h_t||_1 of one sequence (observed per dtype) and log10 P_t (predicted), with the
    dtypes' smallest normal and subnormal numbers. Right: the trackers' deviation from the exact belief."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = torch.arange(1, decay.length + 1).tolist()
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.5))
    colours, widths = {"float32": "tab:blue", "float64": "tab:orange"}, {"float32": 3.5, "float64": 1.2}
    for dtype in DTYPES:
        name, info = dtype_name(dtype), torch.finfo(dtype)
        norm = decay.norms[name][example]
        observed = torch.where(norm > 0, norm.log10(), torch.nan)  # a zero state has no log
        left.plot(
            steps,
            observed.tolist(),
            color=colours[name],
            lw=widths[name],
            alpha=0.7,
            label=f"||h_t||_1 observed, {name}",
        )
        left.axhline(math.log10(info.tiny), color=colours[name], lw=0.8, ls="--", label=f"smallest normal, {name}")
        left.axhline(
            math.log10(info.tiny) + math.log10(info.eps),
            color=colours[name],
            lw=0.8,
            ls=":",
            label=f"smallest subnormal, {name}",
        )
        for lengths, marker, what in (
            (decay.predicted(dtype), "o", "predicted"),
            (decay.observed(dtype), "x", "observed"),
        ):
            if lengths[example] != NEVER:
                style = {"facecolors": "none", "edgecolors": "black"} if marker == "o" else {"color": "black"}
                left.scatter(
                    [int(lengths[example])],
                    [math.log10(info.tiny)],
                    marker=marker,
                    s=50,
                    zorder=3,
                    **style,
                    label=f"{what} underflow" if dtype == torch.float32 else None,
                )
    predicted = decay.log_product[example] / math.log(10)
    left.plot(
        steps, predicted.tolist(), color="black", lw=0.8, ls="--", label="prod of survival probabilities (predicted)"
    )
    left.set_xlabel("token t")
    left.set_ylabel("log10 norm")
    left.set_title(f"linear recurrence, sequence {example}")
    left.legend(fontsize=7)
    for key, error in decay.errors.items():
        worst = torch.where(error.isnan().all(dim=0), torch.nan, error.nan_to_num(nan=-1.0).amax(dim=0))
        right.plot(steps, worst.clamp(min=1e-17).tolist(), lw=1.0, label=key)
    right.set_yscale("log")
    right.set_xlabel("token t")
    right.set_ylabel("max |b - b_exact| over sequences")
    right.set_title("decoded belief vs exact (a line ends where every h = 0)")
    right.legend(fontsize=7)
    return save_figure(fig, title, path)


def analyze_belief(
    task_name: str,
    params: dict | None = None,
    length: int = 4000,
    samples: int = 64,
    seed: int = 0,
    out: str | Path | None = None,
    results_dir: str | Path = "results",
) -> tuple[str, Path]:
    """Text report and plot path for `samples` sequences of `length` tokens of a PFSA-SR task drawn with `seed`
    (plot default: RESULTS_DIR/belief/belief_TASK_PARAMS.png)."""
    task = make_task(task_name, **(params or {}))
    require_tracker(task)
    for label, value in (("length", length), ("samples", samples)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise StatetrackError(f"--{label} must be an integer >= 1, got {value!r}")
    task.check_length(length)
    batch = task.sample(samples, length, torch.Generator().manual_seed(seed))
    decay = belief_decay(task, batch.inputs)
    title = f"{task!r}: {samples} sequences x {length} tokens, seed {seed}"
    slug = re.sub(r"[^\w.=-]+", "_", "_".join(f"{k}={v}" for k, v in task.params.items()))
    path = (Path(out) if out else Path(results_dir) / "belief") / f"belief_{task.name}_{slug}.png"
    return title + "\n" + format_decay(decay), plot_decay(decay, title, path)
