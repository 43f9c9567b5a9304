"""What the layer benchmarks share: their command line (output format, repeats, threads, the
training shape) and printing the rows as JSON, Markdown or a plain table."""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import time
from pathlib import Path

import torch


def layer_parser(description: str) -> argparse.ArgumentParser:
    """--json / --markdown, --repeat, --threads and the training shape --batch, --width, --T."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--json", action="store_true", help="print a JSON list instead of tables")
    parser.add_argument("--markdown", action="store_true", help="print Markdown tables (docs/performance.md)")
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--threads", type=int, default=torch.get_num_threads(), help="torch threads (default: torch's choice)")
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--width", type=int, default=64)
    parser.add_argument("--T", type=int, default=64)
    return parser


def emit(rows: list[dict], args, table, markdown) -> None:
    """Print `rows` as --json asked, else markdown(rows, args) or table(rows, args)."""
    if args.json:
        print(json.dumps(rows, indent=1))
    else:
        print((markdown if args.markdown else table)(rows, args))


def peak_rss_mb() -> float:
    """The process's peak resident memory: VmHWM, the high-water mark of this process image (Linux).
    ru_maxrss would not do in a child: it starts from the parent's resident size at the fork."""
    status = Path("/proc/self/status")
    if status.exists():
        for line in status.read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def synchronize(device: str | torch.device = "cpu") -> None:
    """Wait for the device's queued work (CUDA runs asynchronously; a timer must not stop before it)."""
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


def matmul_rate(m: int, k: int, n: int, repeat: int, device: str = "cpu") -> tuple[float, float]:
    """(median milliseconds, GFLOP/s) of an [m, k] x [k, n] float32 product on `device`: the machine's matrix rate."""
    a, b = torch.randn(m, k, device=device), torch.randn(k, n, device=device)
    a @ b
    times = []
    for _ in range(repeat):
        synchronize(device)
        start = time.perf_counter()
        a @ b
        synchronize(device)
        times.append(time.perf_counter() - start)
    seconds = statistics.median(times)
    return seconds * 1e3, 2 * m * k * n / seconds / 1e9
