"""Long-input evaluation of every recurrent model: one input of T tokens (batch 1) through
`statetrack.training.evaluate.predict` in chunks, on this machine.

    python benchmarks/long_input.py                     # human table, T = 10,000 and 100,000
    python benchmarks/long_input.py --markdown          # the table of docs/performance-layers.md
    python benchmarks/long_input.py --json              # JSON (benchmarks/common.py): one row per (model, T)
    python benchmarks/long_input.py --models lstm slstm --T 100000

Setting: `zoo.build_model({"name": model, "d_model": 64, "num_layers": 1})` (the zoo's defaults:
width 64, one layer with its MLP, every mixer parameter at its default) for a parity-sized task
(vocabulary 2, 2 classes), eval mode, float32, batch 1, `predict(model, tokens, chunk_size=1024)`,
2 torch threads, of which `predict` uses one at batch 1 (`evaluate.SERIAL_BATCH`; `--serial-batch 0`
keeps both). `--busy N` runs N CPU-bound processes beside the measurements (a machine shared with
other jobs, as a laptop or a CI runner often is). Non-recurrent models (the Transformer) are left out: they do not carry a state.

Every (model, T) runs in a fresh subprocess, so its memory figures are its own: `peak_mb` is the
process's VmHWM (the kernel's high-water mark of its resident size; tracemalloc would miss torch's
allocations, and ru_maxrss in a child starts from the parent's size), `growth_mb` is that peak
minus the one after a two-chunk warm-up: what the long input added. Memory is flat in the length
when the growth at 100,000 tokens is that at 10,000 (the only thing that must grow is predict's
[1, T] output, 0.8 MB at 100,000). A run longer than --timeout seconds is stopped and shown as
"> timeout". `load_1min` is the machine's load average when a run ended (other jobs on the
cores slow every figure). malloc keeps freed memory for reuse, as `statetrack` runs do
(statetrack.allocator).
Figures only, no assertions: timings are noisy on shared machines.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import emit, peak_rss_mb  # noqa: E402

from statetrack import diagnostics  # noqa: E402
from statetrack.allocator import keep_freed_memory  # noqa: E402
from statetrack.models import zoo  # noqa: E402
from statetrack.training import evaluate  # noqa: E402
from statetrack.training.evaluate import predict  # noqa: E402

VOCAB, CLASSES = 2, 2  # parity-sized task: the vocabulary only sizes the embedding


def recurrent_models() -> list[str]:
    return [name for name, entry in zoo.MODELS.items() if entry.recurrent]


def run_one(name: str, width: int, length: int, chunk: int) -> dict:
    """In a fresh process: seconds to predict one `length`-token input, and memory (module docstring)."""
    torch.manual_seed(0)
    model = zoo.build_model({"name": name, "d_model": width, "num_layers": 1}, VOCAB, CLASSES).eval()
    tokens = torch.randint(0, VOCAB, (1, length), generator=torch.Generator().manual_seed(1))
    predict(model, tokens[:, : 2 * chunk], chunk)  # warm-up: two chunks, so the carried state path runs too
    diagnostics.drain(model)
    base = peak_rss_mb()
    start = time.perf_counter()
    out = predict(model, tokens, chunk)
    seconds = time.perf_counter() - start
    peak = peak_rss_mb()
    row = {"seconds": seconds, "tokens_per_s": length / seconds, "peak_mb": peak, "growth_mb": peak - base,
           "tokens": int(out.numel()), "load_1min": os.getloadavg()[0]}
    records = diagnostics.summarize(diagnostics.drain(model))
    if records:
        row["metrics"] = records
    return row


def measure(name: str, length: int, args) -> dict:
    command = [sys.executable, __file__, "--_run", name, str(length), "--width", str(args.width), "--chunk", str(args.chunk),
               "--threads", str(args.threads)]
    if args.serial_batch is not None:
        command += ["--serial-batch", str(args.serial_batch)]
    try:
        out = subprocess.run(command, capture_output=True, text=True, check=True, timeout=args.timeout).stdout
    except subprocess.TimeoutExpired:
        return {"model": name, "T": length, "timeout": args.timeout}
    except subprocess.CalledProcessError as error:  # the child's traceback, not only its exit status
        sys.exit(f"error: {name} at T = {length} failed:\n{error.stderr}")
    return {"model": name, "T": length, **json.loads(out)}


def _cells(rows, name, lengths):
    by_length = {r["T"]: r for r in rows if r["model"] == name}
    longest = by_length[max(lengths)]
    if "timeout" in longest:
        speed, per_100k = f"< {max(lengths) / longest['timeout']:,.0f}", f"> {longest['timeout'] * 100_000 / max(lengths):.0f}"
    else:
        speed, per_100k = f"{longest['tokens_per_s']:,.0f}", f"{longest['seconds'] * 100_000 / max(lengths):.2f}"
    memory = []
    for n in lengths:
        r = by_length[n]
        memory += ["-", "-"] if "timeout" in r else [f"{r['peak_mb']:.0f}", f"{r['growth_mb']:.1f}"]
    return [speed, per_100k] + memory


def _setting(args) -> str:
    serial = evaluate.SERIAL_BATCH if getattr(args, "serial_batch", None) is None else args.serial_batch
    return (f"batch 1, width {args.width}, 1 layer, chunks of {args.chunk}, {args.threads} threads "
            f"({'one in predict' if serial >= 1 else 'all in predict'}), {getattr(args, 'busy', 0)} busy processes beside")


def table(rows, args) -> str:
    lengths = sorted({r["T"] for r in rows})
    head = f"{'model':<16} {'tokens/s':>10} {'s/100k':>8}" + "".join(f" {f'peak MB@{n}':>14} {f'growth MB@{n}':>16}" for n in lengths)
    lines = [f"predict, {_setting(args)}; tokens/s and s/100k at T = {max(lengths):,}", head]
    for name in dict.fromkeys(r["model"] for r in rows):
        c = _cells(rows, name, lengths)
        lines.append(f"{name:<16} {c[0]:>10} {c[1]:>8}" + "".join(f" {p:>14} {g:>16}" for p, g in zip(c[2::2], c[3::2])))
    return "\n".join(lines)


def markdown(rows, args) -> str:
    lengths = sorted({r["T"] for r in rows})
    lines = [f"`predict` on one input, {_setting(args)}; tokens/s and s per 100k from T = {max(lengths):,}.", "",
             "| model | tokens/s | s per 100k | " + " | ".join(f"peak MB / growth MB at {n:,}" for n in lengths) + " |",
             "| --- | ---: | ---: |" + " ---: |" * len(lengths)]
    for name in dict.fromkeys(r["model"] for r in rows):
        c = _cells(rows, name, lengths)
        lines.append(f"| {name} | {c[0]} | {c[1]} | " + " | ".join(f"{p} / {g}" for p, g in zip(c[2::2], c[3::2])) + " |")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print a JSON list instead of a table")
    parser.add_argument("--markdown", action="store_true", help="print a Markdown table (docs/performance-layers.md)")
    parser.add_argument("--threads", type=int, default=2, help="torch threads (default: %(default)s)")
    parser.add_argument("--width", type=int, default=64, help="d_model (default: %(default)s)")
    parser.add_argument("--T", type=int, nargs="+", default=[10_000, 100_000], help="input lengths (default: %(default)s)")
    parser.add_argument("--chunk", type=int, default=1024, help="predict's chunk_size (default: %(default)s)")
    parser.add_argument("--models", nargs="+", default=None, help="models to run (default: every recurrent model)")
    parser.add_argument("--timeout", type=float, default=600, help="seconds before one run is stopped (default: %(default)s)")
    parser.add_argument("--serial-batch", type=int, default=None,
                        help="override evaluate.SERIAL_BATCH (0: predict keeps --threads threads at batch 1)")
    parser.add_argument("--busy", type=int, default=0, help="CPU-bound processes to run beside the measurements")
    parser.add_argument("--_run", nargs=2, help=argparse.SUPPRESS)  # internal: one (model, T) in this process
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    keep_freed_memory()
    if args.serial_batch is None:  # recorded in the JSON: the setting the figures were measured with
        args.serial_batch = evaluate.SERIAL_BATCH
    evaluate.SERIAL_BATCH = args.serial_batch
    if args._run:
        print(json.dumps(run_one(args._run[0], args.width, int(args._run[1]), args.chunk)))
        return 0
    known = recurrent_models()
    models = args.models or known
    unknown = [m for m in models if m not in known]
    if unknown:
        parser.error(f"unknown or non-recurrent model {unknown[0]!r}; the recurrent models: {', '.join(known)}")
    rows = []
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(args.busy)]
    try:
        for name in models:
            for length in sorted(args.T):
                rows.append({**measure(name, length, args), "busy": args.busy})
                r = rows[-1]
                shown = f"> {args.timeout:.0f} s" if "timeout" in r else f"{r['seconds']:.2f} s"
                print(f"  {name} T={length}: {shown}", file=sys.stderr, flush=True)
    finally:
        for process in busy:
            process.kill()
            process.wait()
    emit(rows, args, table, markdown)
    return 0


if __name__ == "__main__":
    sys.exit(main())
