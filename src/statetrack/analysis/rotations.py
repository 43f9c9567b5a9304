"""Learned rotation angles of a rotation bilinear model on Z_m (Ebrahimi & Memisevic 2025, App. C.2).

`statetrack analyze rotations RUN` loads a finished run of a `bilinear` model with
`structure: rotation` on modular addition, reads the angle theta_j(a) = Theta_j^T x_a with which input
integer a rotates each 2-D plane j of the state (x_a the first layer's input for token a), and ranks
the planes by their readout weight, the norm of the two out_proj columns of the plane. Its harmonic
value is theta_j(1) m / (2 pi): an integer k means the plane rotates by exactly k times the angle
2 pi / m that represents Z_m (Prop. 2.3 uses k = 1); the table prints k and the distance to the
nearest integer, and, over every input integer a, the largest distance of theta_j(a) m / (2 pi) from
a k multiple, i.e. how far the plane is from representing a -> a k 2 pi / m exactly.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import torch

from statetrack.analysis.spectrum import first_bilinear_mixer, save_figure
from statetrack.errors import StatetrackError
from statetrack.paths import under
from statetrack.results.trained import find_run, load_run_model


def _rotation_mixer(model):
    return first_bilinear_mixer(model, "rotation", "rotation")


def modulus(task) -> int:
    """m of the task's Z_m: `m` of modadd (and the other modular tasks), the order of a cyclic word problem."""
    if getattr(task, "m", None):
        return task.m
    group = getattr(task, "group", None)
    if isinstance(group, str) and re.fullmatch(r"Z\d+", group):
        return task.group_object.order
    raise StatetrackError(
        f"the rotation analysis needs a task on Z_m (modadd, or word_problem with a group Z<m>), got {task!r}"
    )


@torch.no_grad()
def rotation_angles(model, token_ids: list[int]) -> torch.Tensor:
    """theta [len(token_ids), planes] in (-pi, pi]: the angle each token rotates each plane of layer 0 by."""
    mixer = _rotation_mixer(model)
    x = model.blocks[0].norm1(model.embedding.weight[token_ids])  # [tokens, d_model]: the layer input
    theta = x.double() @ mixer.Theta.double()
    return torch.remainder(theta + math.pi, 2 * math.pi) - math.pi


@torch.no_grad()
def plane_readout_weights(model) -> torch.Tensor:
    """[planes]: the norm of out_proj's columns 2j, 2j + 1 (what plane j contributes to the output)."""
    weight = _rotation_mixer(model).out_proj.weight.double()  # [d_model, hidden]
    return weight.reshape(weight.shape[0], -1, 2).pow(2).sum((0, 2)).sqrt()


def harmonic_table(model, task, one: str = "1") -> list[dict]:
    """One row per plane, by readout weight (largest first): plane, weight, angle = theta_j(1),
    value = angle m / 2pi, k = round(value) mod m, distance = |value - round(value)|, and worst = the
    largest |theta_j(a) m / 2pi - a k| (mod m) over the task's integers a."""
    m = modulus(task)
    if one not in task.vocab:
        raise StatetrackError(f"task {task!r} has no token {one!r}; its tokens: {', '.join(task.vocab)}")
    integers = [str(a) for a in range(m) if str(a) in task.vocab]
    angles = rotation_angles(model, [task.token_id(t) for t in integers])  # [m, planes]
    theta_one = rotation_angles(model, [task.token_id(one)])[0]
    weights = plane_readout_weights(model)
    a = torch.tensor([int(t) for t in integers], dtype=torch.float64)[:, None]
    rows = []
    for j in torch.argsort(weights, descending=True).tolist():
        value = theta_one[j].item() * m / (2 * math.pi)
        k = round(value)
        off = angles[:, j] * m / (2 * math.pi) - a[:, 0] * k  # should be a multiple of m
        worst = (off - m * torch.round(off / m)).abs().max().item()
        rows.append(
            {
                "plane": j,
                "weight": weights[j].item(),
                "angle": theta_one[j].item(),
                "value": value,
                "k": k % m,
                "distance": abs(value - k),
                "worst": worst,
            }
        )
    return rows


def format_table(rows: list[dict], top: int | None = None) -> str:
    from statetrack.results.tables import text_table

    header = ["rank", "plane", "readout weight", "theta(1)", "theta(1) m/2pi", "k", "distance", "worst over a"]
    body = [
        [
            str(i + 1),
            str(r["plane"]),
            f"{r['weight']:.4f}",
            f"{r['angle']:+.4f}",
            f"{r['value']:+.4f}",
            str(r["k"]),
            f"{r['distance']:.4f}",
            f"{r['worst']:.4f}",
        ]
        for i, r in enumerate(rows[:top])
    ]
    return text_table(header, body)


def plot_rotations(rows: list[dict], m: int, title: str, path: str | Path, top: int = 16) -> Path:
    """Left: e^{i theta_j(1)} of the `top` planes on the unit circle (size by readout weight) over the m-th
    roots of unity; right: harmonic distance against readout-weight rank, every plane."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (circle, ranks) = plt.subplots(1, 2, figsize=(10, 4.5))
    t = torch.linspace(0, 2 * math.pi, 200)
    circle.plot(t.cos(), t.sin(), color="grey", lw=0.8)
    roots = torch.arange(m) * 2 * math.pi / m
    circle.scatter(roots.cos(), roots.sin(), marker="x", color="grey", s=20, label=f"multiples of 2 pi / {m}")
    shown = rows[:top]
    biggest = max((r["weight"] for r in rows), default=1.0) or 1.0
    for r in shown:
        circle.scatter([math.cos(r["angle"])], [math.sin(r["angle"])], s=20 + 200 * r["weight"] / biggest, alpha=0.7)
        circle.annotate(
            str(r["plane"]), (1.08 * math.cos(r["angle"]), 1.08 * math.sin(r["angle"])), fontsize=7, ha="center"
        )
    circle.set_aspect("equal")
    circle.set_title(f"theta_j(1), top {len(shown)} planes by readout weight", fontsize=9)
    circle.legend(fontsize=7, loc="center")
    ranks.scatter(range(1, len(rows) + 1), [r["distance"] for r in rows], s=12)
    ranks.set_xlabel("plane rank by readout weight")
    ranks.set_ylabel("distance of theta(1) m / 2pi to an integer")
    ranks.set_ylim(-0.02, 0.52)
    return save_figure(fig, title, path)


def analyze_rotations(
    store,
    run: str,
    results_dir: str | Path = "results",
    out: str | Path | None = None,
    model: str | None = None,
    run_seed: int | None = None,
    top: int = 20,
) -> tuple[str, Path]:
    """Text report (the `top` planes) and plot path for a run (`trained.find_run`)."""
    row = find_run(store, run, model, run_seed)
    net, task = load_run_model(row, results_dir)
    _rotation_mixer(net)
    rows = harmonic_table(net, task)
    m = modulus(task)
    exact = sum(r["distance"] < 0.05 for r in rows)
    title = f"{row['model']} on {row['task']} (run {row['id']}): rotation angles for Z_{m}"
    text = (
        f"{title}\n{len(rows)} planes, {exact} within 0.05 of a multiple of 2 pi / {m}; "
        f"top {min(top, len(rows))} by readout weight:\n{format_table(rows, top)}"
    )
    path = (Path(out) if out else under(results_dir, row["experiment"])) / f"rotations_{row['id']}.png"
    return text, plot_rotations(rows, m, title, path)
