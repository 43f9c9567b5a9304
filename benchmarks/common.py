"""What the benchmarks share: their command line (output format, repeats, threads, the training
shape), the machine they ran on, and printing the rows as JSON, Markdown or a plain table.

Every --json output is one object: `benchmark` (the script's name), `command` (its arguments),
`env` (the STATETRACK_ and OMP_ variables set), `machine`, `measured` (the date), `elapsed_s` (the
run's wall time), `args` (every option's value, so its Markdown can be rendered again from the
file: `benchmarks/tables.py`), `rows` and whatever else the script adds."""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import resource
import statistics
import sys
import time
from pathlib import Path

import torch

STARTED = time.perf_counter()  # the benchmark's start, for `elapsed_s` (scripts import this module first)
ENV_PREFIXES = ("STATETRACK_", "OMP_", "MKL_", "ATEN_")  # environment that changes what a benchmark measures


def layer_parser(description: str) -> argparse.ArgumentParser:
    """--json / --markdown, --repeat, --threads and the training shape --batch, --width, --T."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--json", action="store_true", help="print a JSON list instead of tables")
    parser.add_argument("--markdown", action="store_true", help="print Markdown tables (docs/performance*.md)")
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--threads", type=int, default=torch.get_num_threads(), help="torch threads (default: torch's choice)")
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--width", type=int, default=64)
    parser.add_argument("--T", type=int, default=64)
    return parser


def emit(rows: list[dict], args, table, markdown, **extra) -> None:
    """Print `rows` as --json asked (the report of `report`, with `extra`), else markdown(rows, args)
    or table(rows, args)."""
    if args.json:
        print(json.dumps(report(rows, args, **extra), indent=1))
    else:
        print((markdown if args.markdown else table)(rows, args))


def report(rows: list[dict], args, **extra) -> dict:
    """The JSON object of one benchmark run (module docstring); the machine's GPU where args.device is one."""
    options = {k: v for k, v in vars(args).items() if not k.startswith("_") and k != "info"}
    return {"benchmark": Path(sys.argv[0]).stem, "command": sys.argv[1:],
            "env": {k: v for k, v in sorted(os.environ.items()) if k.startswith(ENV_PREFIXES)},
            "machine": machine(getattr(args, "device", "cpu")), "measured": time.strftime("%Y-%m-%d"),
            "elapsed_s": round(time.perf_counter() - STARTED, 1), "args": options, **extra, "rows": rows}


def machine(device: str | torch.device = "cpu") -> dict:
    """The CPU (model, cores, the vector kernels torch picked for it), the GPU if `device` is one, and the software."""
    from statetrack.results.book import cpu_name  # scripts put src/ on the path before importing this module

    info = {"cpu": cpu_name() or platform.machine(), "cores": os.cpu_count(), "simd": torch.backends.cpu.get_cpu_capability()}
    if torch.device(device).type == "cuda":
        info["gpu"] = torch.cuda.get_device_name(device)
        info["cuda"] = torch.version.cuda
    info.update({"threads": torch.get_num_threads(), "torch": torch.__version__, "python": platform.python_version(),
                 "os": platform.system()})
    return info


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


def fla_naive(relative: str):
    """fla-core's naive module fla/ops/<relative>, loaded by file path (fla's package imports
    triton); None where fla-core (or its einops) is absent."""
    spec = importlib.util.find_spec("fla")
    if spec is None or not spec.submodule_search_locations or importlib.util.find_spec("einops") is None:
        return None
    path = Path(list(spec.submodule_search_locations)[0]) / "ops" / relative
    if not path.exists():
        return None
    module_spec = importlib.util.spec_from_file_location("fla_naive_" + relative.replace("/", "_")[:-3], path)
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    return module
