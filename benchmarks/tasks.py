"""Sampling speed of every task: samples/s at batch 256, length 512 (prints figures; asserts nothing).

    python benchmarks/tasks.py [--batch 256] [--length 512] [--seconds 1.0] [--threads N]
"""

from __future__ import annotations

import argparse
import time

import torch

from statetrack.tasks import TASKS, make_task

VARIANTS = [
    ("word_problem", {"group": "S5"}),
    ("word_problem", {"group": "A4xZ5"}),
    ("word_problem", {"group": "Z60"}),
    ("copy_memory", {"vary": "pattern"}),
    ("counting", {"preset": "long"}),
    ("repl", {"moves": "swap"}),
    ("repl", {"spacing": 8}),
    ("pfsa", {"n": 5}),
    ("pfsa", {"n": 6}),
]


def measure(task, batch: int, length: int, seconds: float) -> tuple[float, int]:
    """Samples/s of the fastest of at least 3 calls (robust to other load on a shared machine)."""
    length = max(length, task.min_length)
    g = torch.Generator().manual_seed(0)
    task.sample(batch, length, g)  # warm-up
    times, start = [], time.perf_counter()
    while len(times) < 3 or (time.perf_counter() - start < seconds and len(times) < 50):
        tick = time.perf_counter()
        sample = task.sample(batch, length, g)
        times.append(time.perf_counter() - tick)
    return batch / min(times), sample.inputs.shape[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--length", type=int, default=512)
    parser.add_argument("--seconds", type=float, default=1.0)
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    print(f"batch {args.batch}, length {args.length}, torch {torch.__version__}, threads {torch.get_num_threads()}")
    print(f"{'task':44s} {'samples/s':>10s} {'tokens/sample':>14s}   (best of >= 3 calls)")
    for name, params in [(n, {}) for n in sorted(TASKS)] + VARIANTS:
        task = make_task(name, **params)
        rate, tokens = measure(task, args.batch, args.length, args.seconds)
        label = name + ("(" + ", ".join(f"{k}={v}" for k, v in params.items()) + ")" if params else "")
        print(f"{label:44s} {rate:10.0f} {tokens:14d}")


if __name__ == "__main__":
    main()
