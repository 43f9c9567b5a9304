"""`statetrack analyze belief`: the belief decay of a PFSA-SR task (statetrack.checks.belief, Siems et
al. 2026, section 4.1) as a table of predicted and observed underflow lengths and a plot."""

from __future__ import annotations

import math
import re
from pathlib import Path

import torch

from statetrack.analysis.spectrum import save_figure
from statetrack.checks.belief import DTYPES, NEVER, BeliefDecay, belief_decay, dtype_name, require_tracker
from statetrack.errors import StatetrackError
from statetrack.tasks import make_task


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
