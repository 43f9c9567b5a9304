"""Eigenvalues of the learned state transitions (interpretability; Grazzi et al. 2025).

`statetrack analyze spectrum RUN` loads a finished run's checkpoint, feeds a batch of task inputs,
captures each layer's mixer input, materialises the transitions A(x_t) of every token and head
(`transition_eigenvalues` of the layer: eigenvalues of I - beta k k^T for DeltaNet, of the product of
n_h Householders for DeltaProduct, the diagonal a_t for Mamba / S4D / GLA / mLSTM), prints statistics
and saves a plot: histograms for real spectra, the complex plane with the unit circle otherwise.
The point is to see the negative (or rotating) eigenvalues a [-1,1] model learned to use.
"""

from __future__ import annotations

from pathlib import Path

import torch

from statetrack.errors import StatetrackError
from statetrack.layers.bilinear import Bilinear
from statetrack.layers.registry import TransitionEigenvalues
from statetrack.paths import under
from statetrack.results.trained import find_run, load_run_model

TOLERANCE = 1e-6


def first_bilinear_mixer(model, structure: str, analysis: str):
    """The first layer's mixer when it is a bilinear model of `structure`, else a one-line error naming `analysis`."""
    mixer = model.blocks[0].mixer if len(model.blocks) else None
    if not isinstance(mixer, Bilinear) or mixer.structure != structure:
        raise StatetrackError(
            f"the {analysis} analysis needs a bilinear model with structure {structure!r} (its first layer), "
            f"got {type(mixer).__name__}"
            + (f" with structure {mixer.structure!r}" if isinstance(mixer, Bilinear) else "")
        )
    return mixer


@torch.no_grad()
def layer_spectra(model, inputs: torch.Tensor) -> list[dict]:
    """Per block: {layer, mixer, eigenvalues [B, T, ...] or None when the mixer has no linear transition}."""
    captured: dict[int, torch.Tensor] = {}
    hooks = [
        block.mixer.register_forward_pre_hook(lambda module, args, i=i: captured.__setitem__(i, args[0]))
        for i, block in enumerate(model.blocks)
    ]
    try:
        model(inputs)
    finally:
        for hook in hooks:
            hook.remove()
    out = []
    for i, block in enumerate(model.blocks):
        mixer = block.mixer
        eig = None
        if isinstance(mixer, TransitionEigenvalues):
            try:
                eig = mixer.transition_eigenvalues(captured[i])
            except NotImplementedError:
                eig = None
        out.append({"layer": i, "mixer": type(mixer).__name__, "eigenvalues": eig})
    return out


def spectrum_stats(eig: torch.Tensor) -> dict:
    """Counts and extremes of a flat tensor of eigenvalues (real or complex)."""
    eig = eig.flatten()
    eig = eig.to(torch.complex128) if eig.is_complex() else eig.double()
    real = eig.real if eig.is_complex() else eig
    modulus = eig.abs()
    stats = {
        "count": eig.numel(),
        "min_real": real.min().item(),
        "max_real": real.max().item(),
        "fraction_negative_real": (real < -TOLERANCE).double().mean().item(),
        "fraction_below_minus_half": (real < -0.5).double().mean().item(),
        "max_modulus": modulus.max().item(),
        "fraction_complex": (eig.imag.abs() > TOLERANCE).double().mean().item() if eig.is_complex() else 0.0,
    }
    return stats


def per_token_minimum(eig: torch.Tensor, inputs: torch.Tensor, vocab: list[str], max_tokens: int = 16) -> list[str]:
    """For each input token: the median over its occurrences of the smallest real part of the
    transition's eigenvalues (what that token does to the state: about -1 = a reflection)."""
    real = (eig.real if eig.is_complex() else eig).flatten(2).amin(-1)  # [B, T]
    lines = []
    for token in inputs.unique()[:max_tokens].tolist():
        values = real[inputs == token]
        name = vocab[token] if token < len(vocab) else str(token)
        lines.append(f"{name!s}: {values.median().item():+.3f}")
    return lines


def format_stats(spectra: list[dict], inputs: torch.Tensor | None = None, vocab: list[str] | None = None) -> str:
    lines = []
    for s in spectra:
        head = f"layer {s['layer']} ({s['mixer']})"
        if s["eigenvalues"] is None:
            lines.append(f"{head}: no linear state transition to materialise")
            continue
        st = spectrum_stats(s["eigenvalues"])
        lines.append(
            f"{head}: {st['count']} eigenvalues, real part in [{st['min_real']:.4f}, {st['max_real']:.4f}], "
            f"negative {100 * st['fraction_negative_real']:.1f}%, "
            f"below -0.5 {100 * st['fraction_below_minus_half']:.1f}%, "
            f"complex {100 * st['fraction_complex']:.1f}%, max |lambda| {st['max_modulus']:.4f}"
        )
        if inputs is not None and s["eigenvalues"].shape[:2] == inputs.shape:
            tokens = per_token_minimum(s["eigenvalues"], inputs, vocab or [])
            lines.append("  smallest real eigenvalue by input token (median): " + ", ".join(tokens))
    return "\n".join(lines)


def plot_spectra(spectra: list[dict], title: str, path: str | Path) -> Path:
    """One panel per layer: histogram of real spectra, complex-plane scatter with the unit circle otherwise."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    shown = [s for s in spectra if s["eigenvalues"] is not None]
    if not shown:
        raise StatetrackError("no layer of this model has a linear state transition to plot")
    fig, axes = plt.subplots(1, len(shown), figsize=(max(7.0, 4.5 * len(shown)), 4), squeeze=False)
    for ax, s in zip(axes[0], shown):
        eig = s["eigenvalues"].flatten()
        if eig.is_complex() and (eig.imag.abs() > TOLERANCE).any():
            theta = torch.linspace(0, 2 * torch.pi, 200)
            ax.plot(theta.cos(), theta.sin(), color="grey", lw=0.8)
            ax.scatter(eig.real.float().tolist(), eig.imag.float().tolist(), s=3, alpha=0.3)
            ax.set_aspect("equal")
            ax.set_xlabel("Re lambda")
            ax.set_ylabel("Im lambda")
        else:
            real = eig.real if eig.is_complex() else eig
            ax.hist(real.float().tolist(), bins=100, range=(-1.05, 1.05), log=True)
            ax.axvline(0, color="grey", lw=0.8)
            ax.set_xlabel("eigenvalue")
            ax.set_ylabel("count (log)")
        ax.set_title(f"layer {s['layer']} ({s['mixer']})")
    return save_figure(fig, title, path)


def save_figure(fig, title: str, path: str | Path) -> Path:
    """Title, lay out, write and close an analysis figure; returns its path (folders created)."""
    import matplotlib.pyplot as plt

    from statetrack.results import plots

    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    plots.save_figure(fig, path, dpi=110)
    plt.close(fig)
    return path


def analyze_run(
    store,
    run: str,
    results_dir: str | Path = "results",
    samples: int = 64,
    length: int | None = None,
    seed: int = 0,
    out: str | Path | None = None,
    model: str | None = None,
    run_seed: int | None = None,
) -> tuple[str, Path]:
    """Text report and plot path for a run (`find_run`); inputs at `length` (default: the run's
    longest training length), drawn with `seed`. A model with no linear transition in any layer is
    a StatetrackError."""
    row = find_run(store, run, model, run_seed)
    model, task = load_run_model(row, results_dir)
    length = length or (row["config"].get("train") or {}).get("max_length", 40)
    task.check_length(length)
    batch = task.sample(samples, length, torch.Generator().manual_seed(seed))
    spectra = layer_spectra(model, batch.inputs)
    title = f"{row['model']} on {row['task']} (run {row['id']}, length {length})"
    text = title + "\n" + format_stats(spectra, batch.inputs, getattr(task, "vocab", None))
    if all(s["eigenvalues"] is None for s in spectra):
        raise StatetrackError(
            f"{row['model']} (run {row['id']}) has no linear state transition to materialise in any layer; "
            "the spectrum applies to linear RNNs (DeltaNet, DeltaProduct, Mamba, GLA, the bilinear models, ...)"
        )
    path = (Path(out) if out else under(results_dir, row["experiment"])) / f"spectrum_{row['id']}.png"
    return text, plot_spectra(spectra, title, path)
