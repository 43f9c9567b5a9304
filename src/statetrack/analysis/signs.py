"""Which coordinate of a real-diagonal bilinear model carries parity at long lengths (Ebrahimi &
Memisevic 2025, Prop. 2.4).

For a pure real-diagonal model h_T[i] = h0[i] prod_t a_{x_t}[i], with a_0 and a_1 the diagonals of
A(x) for the two bits. The sign of coordinate i follows the parity of the ones when a_0[i] > 0 >
a_1[i] ("flips on 1"), the parity of the zeros when a_1[i] > 0 > a_0[i] ("flips on 0": the parity
of the ones at even lengths, its complement at odd ones), and no parity at all when a_0[i] and
a_1[i] share a sign ("no flip"). On balanced bits coordinate i grows by
(log|a_0[i]| + log|a_1[i]|) / 2 per bit, so at long lengths the normalised state is the coordinate
with the largest growth rate, and a readout fitted at short lengths extrapolates only when that
coordinate flips. The paper's probability 1 - 2^-d_h counts the draws where *some* coordinate flips;
which coordinate dominates decides what a learned readout does at length 500.

`statetrack analyze signs RUN` prints, for a run (or every real-diagonal parity run of an
experiment), the dominant coordinate, its a_0 and a_1, its lead over the next one, what it predicts,
and the scaled accuracy the run measured at its longest evaluation length.
"""

from __future__ import annotations

from pathlib import Path

import torch

from statetrack.analysis.spectrum import first_bilinear_mixer
from statetrack.errors import StatetrackError
from statetrack.results.trained import find_run, load_run_model

KINDS = {
    "flips on 1": "tracks parity",
    "flips on 0": "tracks parity at even lengths (the complement at odd)",
    "no flip": "cannot track parity",
}


def kind(a0: float, a1: float) -> str:
    """How the sign of a coordinate with transitions a0 (bit 0) and a1 (bit 1) follows the input."""
    if a0 > 0 > a1:
        return "flips on 1"
    if a1 > 0 > a0:
        return "flips on 0"
    return "no flip"


@torch.no_grad()
def bit_transitions(model, task) -> tuple[torch.Tensor, torch.Tensor]:
    """(a_0, a_1) [d_h]: the diagonal transition of the first layer for the tokens "0" and "1"."""
    mixer = first_bilinear_mixer(model, "diagonal", "sign")
    if "0" not in task.vocab or "1" not in task.vocab:
        raise StatetrackError(f"the sign analysis needs a task on bits (tokens '0' and '1'), got {task!r}")
    ids = [task.token_id("0"), task.token_id("1")]
    x = model.blocks[0].norm1(model.embedding.weight[ids])  # [2, d_model]: the layer input
    a = mixer.transition(x[None])[0].to(torch.float64)  # [2, d_h]
    return a[0], a[1]


def sign_table(a0: torch.Tensor, a1: torch.Tensor) -> list[dict]:
    """Every coordinate {coordinate, a0, a1, growth, kind}, by growth rate on balanced bits, largest first."""
    growth = (a0.abs().log() + a1.abs().log()) / 2
    rows = [
        {
            "coordinate": i,
            "a0": float(a0[i]),
            "a1": float(a1[i]),
            "growth": float(growth[i]),
            "kind": kind(float(a0[i]), float(a1[i])),
        }
        for i in range(a0.numel())
    ]
    return sorted(rows, key=lambda r: -r["growth"])


def prediction(model, task) -> dict:
    """The dominant coordinate's row, with `lead` (its growth rate minus the next one's) and `predicts`."""
    rows = sign_table(*bit_transitions(model, task))
    top = dict(rows[0])
    top["lead"] = top["growth"] - rows[1]["growth"] if len(rows) > 1 else float("inf")
    top["predicts"] = KINDS[top["kind"]]
    return top


def _diagonal_parity_runs(store, experiment: str) -> list[dict]:
    rows = [r for r in store.runs(experiment) if r["status"] == "done"]
    return [
        r
        for r in rows
        if (r["config"].get("model") or {}).get("name") == "bilinear"
        and (r["config"].get("model") or {}).get("structure") == "diagonal"
        and r["config"]["task"].get("name") == "parity"
    ]


def analyze_signs(
    store, run: str, results_dir: str | Path = "results", model: str | None = None, run_seed: int | None = None
) -> str:
    """Text report: one line per run (`run` a run id, or an experiment: with --model one run as
    `trained.find_run` picks it, without it every finished real-diagonal parity run)."""
    if run in store.experiments() and model is None:
        rows = _diagonal_parity_runs(store, run)
        if not rows:
            raise StatetrackError(f"experiment {run!r} has no finished real-diagonal bilinear run on parity")
    else:
        rows = [find_run(store, run, model, run_seed)]
    lines: list[str] = []
    counts: dict[str, int] = {}  # runs per kind of dominant coordinate
    header = (
        f"{'run':16}  {'model':32}  {'N':>4}  {'seed':>4}  {'coord':>5}  "
        f"{'a(0)':>7}  {'a(1)':>7}  {'lead':>6}  {'kind':10}  {'longest: scaled acc':>19}"
    )
    for row in sorted(
        rows, key=lambda r: (r["model"], str((r["config"].get("train") or {}).get("dataset_size")), r["seed"])
    ):
        net, task = load_run_model(row, results_dir)
        top = prediction(net, task)
        evals = store.evals(row["id"])
        observed = f"{evals[-1]['length']}: {evals[-1]['scaled_accuracy']:+.2f}" if evals else "not evaluated"
        size = (row["config"].get("train") or {}).get("dataset_size") or "-"
        lines.append(
            f"{row['id'][:16]:16}  {row['model'][:32]:32}  {size!s:>4}  {row['seed']:>4}  {top['coordinate']:>5}  "
            f"{top['a0']:>+7.3f}  {top['a1']:>+7.3f}  {top['lead']:>6.3f}  {top['kind']:10}  {observed:>19}"
        )
        counts[top["kind"]] = counts.get(top["kind"], 0) + 1
    summary = "; ".join(f"{counts.get(k, 0)} of {len(rows)} {k} ({v})" for k, v in KINDS.items())
    return (
        "Dominant coordinate on balanced bits (largest (log|a(0)| + log|a(1)|) / 2) of each run; "
        "lead = its growth rate minus the next coordinate's, per bit\n"
        + header
        + "\n"
        + "\n".join(lines)
        + f"\n{summary}"
    )
