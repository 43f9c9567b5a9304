"""The arithmetic of each quick experiment: how long its matrix products alone would take on this
machine, beside the wall time the book measured.

    python benchmarks/suite_flops.py               # a plain table
    python benchmarks/suite_flops.py --markdown    # the table of docs/performance-training.md
    python benchmarks/suite_flops.py --json

For every run of every shipped experiment at `--scale` (quick by default): the FLOPs of its training
(per curriculum stage, steps x batch x one forward + backward at the stage's shortest and longest
length, averaged: the cost the runner schedules by) and of its evaluation (one forward per test
length, variant and sample), as torch's FLOP counter sees them (`statetrack.models.sizing.pass_flops`:
matrix products; the recurrences' own compiled kernels are not counted, so the figure is a floor),
each run's steps as its committed snapshot (`statetrack.paths.snapshot_file`) records them (a run that stopped early did fewer;
every step of a run the snapshot lacks). `arith min` is that total at the matmul rate measured in
this run (a [4096, 256] x [256, 256] product, or `--rate`), spread over `--workers` cores; `wall
min` is the snapshot's wall time, and `x arith` how
far the experiment is from the cost of its arithmetic. The fixed-point models are counted at their
initial weights, so at the iteration counts of an untrained model.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "benchmarks"))

from common import matmul_rate, report  # noqa: E402

from statetrack.experiments.runner import training_cost  # noqa: E402
from statetrack.experiments.spec import expand, load_spec, shipped_specs  # noqa: E402
from statetrack.models.sizing import pass_flops  # noqa: E402
from statetrack.paths import snapshot_file  # noqa: E402


def run_flops(run, steps: int | None = None) -> tuple[float, float]:
    """(training FLOPs, evaluation FLOPs) of one run: the runner's scheduling cost (of its first
    `steps` steps, else all), and one forward per test length, variant and sample."""
    passes = 1 + len(run.eval.get("variants") or {})
    evaluation = sum(run.eval["samples"] * pass_flops(run.model, run.task, n, backward=False) * passes
                     for n in run.eval["lengths"])
    return training_cost(run, steps), evaluation


def measure(args) -> tuple[list[dict], float]:
    rate = args.rate or matmul_rate(4096, 256, 256, 30)[1]
    rows = []
    for name in args.experiments or shipped_specs():
        snapshot = snapshot_file(name, args.scale)
        measured = json.loads(snapshot.read_text()) if snapshot.exists() else {"parts": [], "runs": []}
        trained = {r["id"]: r["steps"] for r in measured["runs"] if r.get("steps")}
        runs = expand(load_spec(name, args.scale))
        train = evaluation = 0.0
        for run in runs:
            t, e = run_flops(run, trained.get(run.id))
            train, evaluation = train + t, evaluation + e
        wall = sum(p["seconds"] for p in measured["parts"]) or None
        arith = (train + evaluation) / (rate * 1e9) / args.workers
        rows.append({"experiment": name, "runs": len(runs), "train_gflop": train / 1e9, "eval_gflop": evaluation / 1e9,
                     "arith_s": arith, "wall_s": wall, "x_arith": wall / arith if wall and arith else None})
        print(f"  counted {name}", file=sys.stderr)
    return rows, rate


def _minutes(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds / 60:.1f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("experiments", nargs="*", help="shipped experiments (default: all)")
    parser.add_argument("--scale", default="quick")
    parser.add_argument("--workers", type=int, default=2, help="cores the runs are spread over")
    parser.add_argument("--rate", type=float, default=None, help="GFLOP/s per core (default: measured here)")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--markdown", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(1)
    rows, rate = measure(args)
    if args.json:
        print(json.dumps(report(rows, args, matmul_gflops=rate, workers=args.workers), indent=1))
    else:
        print(render(rows, rate, args.workers, args.scale, args.markdown))


def render(rows: list[dict], rate: float, workers: int, scale: str, markdown: bool = True) -> str:
    """The rows and their total as a Markdown (or plain) table, under a line naming the rate."""
    total = {k: sum(r[k] or 0 for r in rows) for k in ("train_gflop", "eval_gflop", "arith_s", "wall_s")}
    rows = rows + [{"experiment": "total", "runs": sum(r["runs"] for r in rows), **total,
                    "x_arith": total["wall_s"] / total["arith_s"] if total["arith_s"] else None}]
    lines = [f"matmul rate {rate:.1f} GFLOP/s per core, {workers} workers, {scale} scale"]
    if markdown:
        lines += ["", "| experiment | runs | train GFLOP | eval GFLOP | arith min | wall min | x arith |", "|---|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        cells = [r["experiment"], str(r["runs"]), f"{r['train_gflop']:.0f}", f"{r['eval_gflop']:.0f}", _minutes(r["arith_s"]),
                 _minutes(r["wall_s"]), "-" if r["x_arith"] is None else f"{r['x_arith']:.1f}"]
        lines.append(("| " + " | ".join(cells) + " |") if markdown else
                     f"{cells[0]:26s} {cells[1]:>5s} {cells[2]:>12s} {cells[3]:>10s} {cells[4]:>9s} {cells[5]:>9s} {cells[6]:>7s}")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
