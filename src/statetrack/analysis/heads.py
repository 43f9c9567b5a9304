"""State-tracking heads of a delta-rule model (Siems et al. 2026, App. B.2, Figs. 6-9).

`statetrack analyze heads RUN` loads a finished DeltaNet / Gated DeltaNet / DeltaProduct run, feeds a
batch of task inputs and, per layer and head, reads what the layer's `gates(x)` produce:

- the distribution of beta over every token (micro-step) of the batch. With eig_range "[-1,1]" beta
  lies in (0, 2); beta > 1 gives the transition I - beta k k^T a negative eigenvalue 1 - beta along
  k, which a state-tracking head needs (Grazzi et al. 2025). Siems et al. 2026 find one head that
  sets beta to about 2 throughout (Figs. 6, 8);
- the cumulative explained variance of the principal components of its keys (the singular values of
  the centered keys over all tokens): that head's keys lie in a subspace of few dimensions (Fig. 9);
- the intervention of Fig. 7: the head's beta multiplied by 0.5, which maps (0, 2) onto (0, 1) and so
  takes its eigenvalues from [-1, 1] to [0, 1], on the same batch; the accuracy it loses ranks the
  heads, the head that loses most being the state-tracking head. The beta range is also shrunk
  gradually (the curve of Fig. 7), and once for every head at the same time.

The intervention wraps the layer instance's `gates` (an instance attribute, removed afterwards), which
the layer's forward calls for its q, k, v and beta; no layer code changes.
"""

from __future__ import annotations

from contextlib import ExitStack, contextmanager
from pathlib import Path

import torch

from statetrack.analysis.spectrum import save_figure
from statetrack.errors import StatetrackError
from statetrack.layers.deltanet import DeltaProduct
from statetrack.paths import under
from statetrack.results.trained import find_run, load_run_model
from statetrack.training.evaluate import eval_generator, predict

SUPPORTED = ("deltanet", "gated_deltanet", "deltaproduct")
FACTOR = 0.5  # (0, 2) -> (0, 1): eigenvalues 1 - beta from [-1, 1] to [0, 1]
SHARE = 0.9  # the explained variance the table counts key components for
CHUNK = 1024  # tokens fed per call (with the state carried), as evaluation does


def delta_layers(model, name: str = "this model") -> list[tuple[int, DeltaProduct]]:
    """(layer index, mixer) of every delta-rule layer of `model`; an error naming the supported models when none is."""
    layers = [(i, block.mixer) for i, block in enumerate(model.blocks) if isinstance(block.mixer, DeltaProduct)]
    if not layers:
        mixers = ", ".join(sorted({type(block.mixer).__name__ for block in model.blocks})) or "none"
        raise StatetrackError(
            f"the heads analysis needs a delta-rule model ({', '.join(SUPPORTED)}); "
            f"{name} has no such layer (mixers: {mixers})"
        )
    return layers


@contextmanager
def wrapped_gates(mixer: DeltaProduct, edit):
    """Within the block, the mixer's gates (`mixer.gates(x)`, and those its forward computes) are
    `edit(gates)` of the original gates; yields the number of calls so far as a one-element list (a
    forward that never computes them is an error)."""
    original, shadowed = mixer._gates, mixer.__dict__.get("_gates")
    calls = [0]

    def _gates(x, conv_state=None):
        calls[0] += 1
        gates, conv_state = original(x, conv_state)
        return edit(gates), conv_state

    mixer.__dict__["_gates"] = _gates  # an instance attribute, which shadows the method
    try:
        yield calls
    finally:
        if shadowed is None:
            del mixer.__dict__["_gates"]
        else:
            mixer.__dict__["_gates"] = shadowed


def scale_beta(mixer: DeltaProduct, heads: list[int], factor: float):
    """`wrapped_gates` that multiplies beta[..., h] by `factor` for every h in `heads`."""
    scale = torch.ones(mixer.num_heads)
    scale[heads] = factor

    def edit(gates):
        return {**gates, "beta": gates["beta"] * scale.to(gates["beta"])}

    return wrapped_gates(mixer, edit)


def _run_wrapped(model, inputs: torch.Tensor, contexts: list) -> torch.Tensor:
    """Predictions [B, T] of `model` with every context of `contexts` (each a `wrapped_gates`) entered."""
    with ExitStack() as stack:
        calls = [stack.enter_context(context) for context in contexts]
        predicted = predict(model, inputs, CHUNK)
    if any(c[0] == 0 for c in calls):
        raise StatetrackError(
            "a delta-rule layer's forward did not call its gates(x); the heads analysis cannot read or change beta"
        )
    return predicted


def accuracy(predicted: torch.Tensor, batch) -> float:
    """The share of supervised positions predicted right (evaluate_lengths' `accuracy`)."""
    return ((predicted == batch.targets) & batch.mask).sum().item() / batch.mask.sum().item()


@torch.no_grad()
def record_gates(model, inputs: torch.Tensor, layers) -> tuple[dict[int, dict], torch.Tensor]:
    """({layer: {"beta": [N, H], "k": [N, H, D]}} over the N tokens (micro-steps) of the batch, and
    the predictions [B, T] of the unmodified model)."""
    records: dict[int, list] = {i: [] for i, _ in layers}

    def keep(i):
        def edit(gates):
            records[i].append((gates["beta"], gates["k"]))  # [B, T n_h, H], [B, T n_h, H, D]
            return gates

        return edit

    predicted = _run_wrapped(model, inputs, [wrapped_gates(mixer, keep(i)) for i, mixer in layers])
    out = {}
    for i, chunks in records.items():
        beta = torch.cat([b for b, _ in chunks], dim=1)
        k = torch.cat([k for _, k in chunks], dim=1)
        out[i] = {"beta": beta.flatten(0, 1).float(), "k": k.flatten(0, 1).double()}
    return out, predicted


def quantiles(values: torch.Tensor, qs=(0.05, 0.5, 0.95)) -> list[float]:
    """Quantiles of a flat tensor by sorting (torch.quantile refuses inputs of more than 2^24 values)."""
    ordered = values.flatten().sort().values
    return [ordered[round(q * (ordered.numel() - 1))].item() for q in qs]


def key_explained_variance(k: torch.Tensor) -> torch.Tensor:
    """[H, D]: per head, the cumulative share of the variance of the keys k [N, H, D] explained by
    their first 1..D principal components (singular values of the centered keys); all ones when
    the keys do not vary."""
    if k.dim() != 3:
        raise StatetrackError(f"keys must be [N, H, D] (tokens, heads, key dim), got shape {list(k.shape)}")
    centered = (k - k.mean(0)).transpose(0, 1)  # [H, N, D]
    variance = torch.linalg.svdvals(centered).pow(2)  # [H, min(N, D)]
    total = variance.sum(-1, keepdim=True)
    cumulative = torch.where(total > 0, variance.cumsum(-1) / total.clamp_min(1e-300), torch.ones_like(variance))
    return torch.nn.functional.pad(cumulative, (0, k.shape[-1] - cumulative.shape[-1]), value=1.0)


def components_for(cumulative: torch.Tensor, share: float = SHARE) -> torch.Tensor:
    """[H]: the fewest principal components explaining at least `share` of the keys' variance."""
    return (cumulative < share - 1e-9).sum(-1) + 1


@torch.no_grad()
def head_analysis(model, batch, layers, sweep: int = 4) -> dict:
    """Per (layer, head) of the delta-rule `layers`: beta statistics, the keys' explained variance
    and the accuracy with that head's beta scaled by each factor of `factors` (from 1 down to FACTOR
    in `sweep` steps, the last one FACTOR); rows sorted by the accuracy lost at FACTOR, most first.
    Also the accuracy with every head's beta scaled by FACTOR at once (`all_heads`)."""
    if sweep < 1:
        raise StatetrackError(f"--sweep (steps of the gradual beta scaling) must be >= 1, got {sweep}")
    factors = [1 - (1 - FACTOR) * s / sweep for s in range(1, sweep + 1)]
    recorded, predicted = record_gates(model, batch.inputs, layers)
    base = accuracy(predicted, batch)
    rows = []
    for i, mixer in layers:
        beta, cumulative = recorded[i]["beta"], key_explained_variance(recorded[i]["k"])
        components = components_for(cumulative)
        for h in range(mixer.num_heads):
            curve = [accuracy(_run_wrapped(model, batch.inputs, [scale_beta(mixer, [h], f)]), batch) for f in factors]
            low, median, high = quantiles(beta[:, h])
            rows.append(
                {
                    "layer": i,
                    "head": h,
                    "scale": mixer.scale,
                    "beta": beta[:, h],
                    "beta_low": low,
                    "beta_median": median,
                    "beta_high": high,
                    "above_one": (beta[:, h] > 1).float().mean().item(),
                    "explained": cumulative[h],
                    "components": int(components[h]),
                    "dim": mixer.head_dim,
                    "curve": curve,
                    "accuracy": curve[-1],
                    "drop": base - curve[-1],
                }
            )
    everything = [scale_beta(mixer, list(range(mixer.num_heads)), FACTOR) for _, mixer in layers]
    all_heads = accuracy(_run_wrapped(model, batch.inputs, everything), batch)
    rows.sort(key=lambda r: (-r["drop"], r["layer"], r["head"]))
    return {"accuracy": base, "all_heads": all_heads, "factors": factors, "rows": rows}


def format_heads(result: dict, chance: float) -> str:
    from statetrack.results.tables import text_table

    base = result["accuracy"]
    header = [
        "rank",
        "layer",
        "head",
        "beta median",
        "beta 5-95%",
        "beta > 1",
        "keys PC1",
        f"keys {SHARE:.0%}",
        "accuracy",
        "drop",
    ]
    body = [
        [
            str(n),
            str(r["layer"]),
            str(r["head"]),
            f"{r['beta_median']:.3f}",
            f"{r['beta_low']:.2f}-{r['beta_high']:.2f}",
            f"{r['above_one']:.1%}",
            f"{r['explained'][0]:.1%}",
            f"{r['components']}/{r['dim']}",
            f"{r['accuracy']:.3f}",
            f"{r['drop']:+.3f}",
        ]
        for n, r in enumerate(result["rows"], 1)
    ]
    top = result["rows"][0]
    lines = [
        f"accuracy {base:.3f} (chance {chance:.3f}); with all heads' beta x {FACTOR:g}: {result['all_heads']:.3f}",
        "per head: beta over every token; "
        "keys PC1 = the share of the keys' variance on their first principal component, "
        f"keys {SHARE:.0%} = the components for {SHARE:.0%} of it;\naccuracy with that head's beta x {FACTOR:g} "
        f"(range (0, 2) -> (0, 1) for [-1,1]), and the drop from {base:.3f}",
        text_table(header, body),
    ]
    if base < 0.9:
        lines.append(
            f"note: the model is at {base:.3f} accuracy on these inputs; "
            "a ranking of heads by what they break says little"
        )
    if top["drop"] > 0.01:
        lines.append(
            f"state-tracking head: layer {top['layer']} head {top['head']} "
            f"(accuracy {base:.3f} -> {top['accuracy']:.3f} with its beta x {FACTOR:g})"
        )
    else:
        lines.append(
            f"no single head's beta x {FACTOR:g} lowers accuracy by more than 0.01 (largest drop {top['drop']:+.3f})"
        )
    return "\n".join(lines)


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _grid(result: dict) -> tuple[list[int], int]:
    layers = sorted({r["layer"] for r in result["rows"]})
    return layers, max(r["head"] for r in result["rows"]) + 1


def plot_betas(result: dict, title: str, path: str | Path) -> Path:
    """Histogram of beta per (layer, head), layers as rows and heads as columns (Siems et al. 2026, Fig. 8);
    the top-ranked head in red."""
    plt = _pyplot()
    layers, heads = _grid(result)
    top = result["rows"][0]
    fig, axes = plt.subplots(
        len(layers), heads, figsize=(max(6.0, 2.4 * heads), 1.9 * len(layers) + 0.6), squeeze=False
    )
    for ax in axes.flat:
        ax.set_visible(False)
    for r in result["rows"]:
        ax = axes[layers.index(r["layer"])][r["head"]]
        ax.set_visible(True)
        chosen = (r["layer"], r["head"]) == (top["layer"], top["head"])
        ax.hist(r["beta"].tolist(), bins=40, range=(0, r["scale"]), color="tab:red" if chosen else "tab:blue")
        if r["scale"] > 1:
            ax.axvline(1, color="grey", lw=0.8)
        ax.set_title(f"L{r['layer']} H{r['head']}: >1 {r['above_one']:.0%}", fontsize=8)
        ax.tick_params(labelsize=7)
    for ax in axes[-1]:
        ax.set_xlabel("beta", fontsize=8)
    return save_figure(fig, title, path)


def plot_keys(result: dict, title: str, path: str | Path) -> Path:
    """Cumulative explained variance of the keys against the number of principal components, a curve
    per head and a panel per layer (Siems et al. 2026, Fig. 9); the top-ranked head drawn thick."""
    plt = _pyplot()
    layers, _ = _grid(result)
    top = result["rows"][0]
    fig, axes = plt.subplots(1, len(layers), figsize=(max(6.0, 4.2 * len(layers)), 3.6), squeeze=False)
    for r in sorted(result["rows"], key=lambda r: (r["layer"], r["head"])):
        ax = axes[0][layers.index(r["layer"])]
        chosen = (r["layer"], r["head"]) == (top["layer"], top["head"])
        ax.plot(
            range(1, r["dim"] + 1),
            r["explained"].tolist(),
            marker=".",
            lw=2.5 if chosen else 1.0,
            label=f"head {r['head']}",
        )
    for ax, layer in zip(axes[0], layers):
        ax.axhline(SHARE, color="grey", lw=0.8, ls="--")
        ax.set_title(f"layer {layer}", fontsize=9)
        ax.set_xlabel("principal components of the keys")
        ax.set_ylim(0, 1.02)
        ax.legend(fontsize=7)
    axes[0][0].set_ylabel("cumulative explained variance")
    return save_figure(fig, title, path)


def plot_intervention(result: dict, chance: float, title: str, path: str | Path) -> Path:
    """Accuracy as one head's beta range shrinks from (0, s) to (0, s/2), a curve per head and a panel
    per layer (Siems et al. 2026, Fig. 7)."""
    plt = _pyplot()
    layers, _ = _grid(result)
    fig, axes = plt.subplots(1, len(layers), figsize=(max(6.0, 4.2 * len(layers)), 3.6), squeeze=False)
    factors = [1.0] + result["factors"]
    for r in sorted(result["rows"], key=lambda r: (r["layer"], r["head"])):
        ax = axes[0][layers.index(r["layer"])]
        ax.plot(
            [r["scale"] * f for f in factors], [result["accuracy"]] + r["curve"], marker=".", label=f"head {r['head']}"
        )
    for ax, layer in zip(axes[0], layers):
        ax.axhline(chance, color="grey", lw=0.8, ls="--")
        ax.invert_xaxis()
        ax.set_title(f"layer {layer}", fontsize=9)
        ax.set_xlabel("upper end of the head's beta range")
        ax.set_ylim(-0.02, 1.02)
        ax.legend(fontsize=7)
    axes[0][0].set_ylabel("accuracy")
    return save_figure(fig, title, path)


def analyze_heads(
    store,
    run: str,
    results_dir: str | Path = "results",
    samples: int = 64,
    length: int | None = None,
    seed: int = 0,
    out: str | Path | None = None,
    model: str | None = None,
    run_seed: int | None = None,
    sweep: int = 4,
) -> tuple[str, list[Path]]:
    """Text report and the three plot paths (OUT_beta.png, OUT_keys.png, OUT_intervention.png; OUT
    defaults to RESULTS_DIR/EXPERIMENT/heads_RUNID) of a run (`trained.find_run`), on `samples` inputs
    of `length` (default: the run's longest training length), the evaluation set of `seed` at that length."""
    row = find_run(store, run, model, run_seed)
    if samples < 1:
        raise StatetrackError(f"--samples must be >= 1, got {samples}")
    net, task = load_run_model(row, results_dir)
    layers = delta_layers(net, f"run {row['id']} ({row['model']})")
    length = (row["config"].get("train") or {}).get("max_length", 40) if length is None else length
    task.check_length(length)
    batch = task.sample(samples, length, eval_generator(seed, length))
    if not batch.mask.any():
        raise StatetrackError(
            f"the {samples} inputs of length {length} have no supervised position; "
            "use more --samples or another --length"
        )
    result = head_analysis(net, batch, layers, sweep)
    title = f"{row['model']} on {row['task']} (run {row['id']}, {samples} inputs of length {length})"
    prefix = str((Path(out) if out else under(results_dir, row["experiment"])) / f"heads_{row['id']}")
    prefix = prefix[:-4] if prefix.endswith(".png") else prefix
    paths = [
        plot_betas(result, f"beta per head: {title}", f"{prefix}_beta.png"),
        plot_keys(result, f"keys' explained variance: {title}", f"{prefix}_keys.png"),
        plot_intervention(result, task.chance, f"beta range intervention: {title}", f"{prefix}_intervention.png"),
    ]
    return f"{title}\n{format_heads(result, task.chance)}", paths
