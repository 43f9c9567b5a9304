"""Speed of the bilinear RNN family (Ebrahimi & Memisevic 2025) on this machine.

    python benchmarks/bilinear.py               # human tables
    python benchmarks/bilinear.py --json        # JSON (benchmarks/common.py): one row per (structure, measurement)
    python benchmarks/bilinear.py --markdown    # the tables of docs/performance-layers.md

1. Training: forward + backward of the layer at batch 64, d_x = d_h = 64, T = 64, float32, for each
   structure: `Bilinear.forward` (the fast forms: `ops.dense.bilinear_transition` for full and
   block, CP in its R coordinates, the diagonal scan for diagonal and rotation) against
   `Bilinear.forward_reference` (the definition: a per-step loop forming A(x_t) inside the loop).
   Both are timed round-robin in one run (median of --repeat passes after a warm-up), so the ratio
   is side by side; `cpu_ms` is the process CPU time of the same passes (on a shared machine it
   counts only this process's work, where wall time also counts waiting for a core).
2. Long inputs: evaluation of one 100,000-token input (batch 1) through
   `statetrack.training.evaluate.predict` in chunks of 1024 on a whole 1-layer model (width 64, no MLP), with
   the evaluation-time renormalisation on (every step). Each structure and length runs in a fresh
   subprocess, so its peak resident memory (VmHWM, the kernel's high-water mark of the process's
   resident size) is its own; `growth_mb` is that peak minus the one after a one-chunk warm-up.
   tracemalloc would miss torch's allocations; 10,000 against 100,000 tokens shows whether memory
   stays flat.
malloc keeps freed memory for reuse, as `statetrack` runs do (statetrack.allocator).
Figures only, no assertions: timings are noisy on shared machines.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import emit, layer_parser, peak_rss_mb  # noqa: E402

from statetrack.allocator import keep_freed_memory  # noqa: E402
from statetrack.layers.bilinear import Bilinear  # noqa: E402
from statetrack.models import zoo  # noqa: E402
from statetrack.training.evaluate import predict  # noqa: E402

STRUCTURES = {  # name -> mixer settings
    "full": {"structure": "full"},
    "cp R=16": {"structure": "cp", "rank": 16},
    "block b=8": {"structure": "block", "block_size": 8},
    "rotation": {"structure": "rotation"},
    "diagonal": {"structure": "diagonal"},
}


def time_training(settings: dict, batch: int, width: int, T: int, repeat: int) -> dict:
    torch.manual_seed(0)
    layer = Bilinear(width, **settings)
    x = torch.nn.functional.layer_norm(torch.randn(batch, T, width), (width,)).requires_grad_()
    forms = {"fast": layer.forward, "reference": layer.forward_reference}
    wall = {name: [] for name in forms}
    cpu = {name: [] for name in forms}
    for i in range(repeat + 1):
        for name, form in forms.items():
            start, start_cpu = time.perf_counter(), time.process_time()
            y, _ = form(x)
            y.square().mean().backward()
            if i:  # the first round warms up
                wall[name].append(time.perf_counter() - start)
                cpu[name].append(time.process_time() - start_cpu)
            layer.zero_grad(set_to_none=True)
            x.grad = None
    fast, ref = statistics.median(wall["fast"]), statistics.median(wall["reference"])
    fast_cpu, ref_cpu = statistics.median(cpu["fast"]), statistics.median(cpu["reference"])
    return {"fast_ms": 1e3 * fast, "reference_ms": 1e3 * ref, "speedup": ref / fast,
            "fast_cpu_ms": 1e3 * fast_cpu, "reference_cpu_ms": 1e3 * ref_cpu, "cpu_speedup": ref_cpu / fast_cpu}


def long_input(settings: dict, width: int, length: int, chunk: int) -> dict:
    """Run in a subprocess: seconds to predict one `length`-token input, and peak RSS."""
    torch.manual_seed(0)
    model = zoo.build_model({"name": "bilinear", **settings, "d_model": width, "num_layers": 1, "mlp": False}, 8, 4).eval()
    tokens = torch.randint(0, 8, (1, length))
    predict(model, tokens[:, :chunk], chunk)  # warm-up
    base = peak_rss_mb()
    start = time.perf_counter()
    out = predict(model, tokens, chunk)
    seconds = time.perf_counter() - start
    peak = peak_rss_mb()
    return {"seconds": seconds, "peak_rss_mb": peak, "growth_mb": peak - base, "tokens": int(out.numel())}


def table(rows, args) -> str:
    lines = [f"forward + backward, batch {args.batch}, d_x = d_h = {args.width}, T {args.T}, float32, "
             f"{args.threads} threads, torch {torch.__version__} (median of {args.repeat})",
             f"{'structure':<12} {'fast ms':>9} {'reference ms':>13} {'speedup':>8} {'cpu speedup':>12}"]
    for r in rows:
        if r["measure"] == "train_fwd_bwd":
            lines.append(f"{r['structure']:<12} {r['fast_ms']:>9.1f} {r['reference_ms']:>13.1f} {r['speedup']:>7.1f}x "
                         f"{r['cpu_speedup']:>11.1f}x")
    if any(r["measure"] == "eval_long" for r in rows):
        lines += ["", f"evaluation of one input (batch 1, width {args.width}, chunks of {args.chunk}, renormalised every step)",
                  f"{'structure':<12} {'tokens':>8} {'seconds':>8} {'peak RSS MB':>12} {'growth MB':>10}"]
        for r in rows:
            if r["measure"] == "eval_long":
                lines.append(f"{r['structure']:<12} {r['length']:>8} {r['seconds']:>8.2f} {r['peak_rss_mb']:>12.0f} "
                             f"{r['growth_mb']:>10.1f}")
    return "\n".join(lines)


def markdown(rows, args) -> str:
    lines = [f"Forward + backward of one layer, batch {args.batch}, d_x = d_h = {args.width}, T = {args.T}, float32, "
             f"{args.threads} thread(s); median of {args.repeat} round-robin passes.", "",
             "| structure | fast ms | reference ms | speedup (wall) | speedup (CPU time) |",
             "| --- | ---: | ---: | ---: | ---: |"]
    for r in rows:
        if r["measure"] == "train_fwd_bwd":
            lines.append(f"| {r['structure']} | {r['fast_ms']:.1f} | {r['reference_ms']:.1f} | {r['speedup']:.1f}x | "
                         f"{r['cpu_speedup']:.1f}x |")
    longs = [r for r in rows if r["measure"] == "eval_long"]
    if longs:
        lengths = sorted({r["length"] for r in longs})
        lines += ["", f"Evaluation of one input through `predict` (batch 1, width {args.width}, chunks of {args.chunk}, "
                      "renormalised every step); peak RSS of a fresh process, and its growth over a one-chunk warm-up.", "",
                  "| structure | " + " | ".join(f"{n:,} tokens: s / peak MB / growth MB" for n in lengths) + " |",
                  "| --- |" + " ---: |" * len(lengths)]
        for name in dict.fromkeys(r["structure"] for r in longs):
            cells = []
            for n in lengths:
                r = next(r for r in longs if r["structure"] == name and r["length"] == n)
                cells.append(f"{r['seconds']:.1f} / {r['peak_rss_mb']:.0f} / {r['growth_mb']:.1f}")
            lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = layer_parser(__doc__.splitlines()[0])
    parser.add_argument("--lengths", type=int, nargs="*", default=[10_000, 100_000], help="long-input lengths (none: skip)")
    parser.add_argument("--chunk", type=int, default=1024)
    parser.add_argument("--structures", nargs="*", default=list(STRUCTURES), choices=list(STRUCTURES))
    parser.add_argument("--_long", nargs=2, help=argparse.SUPPRESS)  # internal: one long-input run
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    keep_freed_memory()
    if args._long:
        print(json.dumps(long_input(STRUCTURES[args._long[0]], args.width, int(args._long[1]), args.chunk)))
        return 0
    rows = []
    for name in args.structures:
        rows.append({"structure": name, "measure": "train_fwd_bwd", "batch": args.batch, "width": args.width, "T": args.T,
                     "threads": args.threads, **time_training(STRUCTURES[name], args.batch, args.width, args.T, args.repeat)})
        print(f"  done {name} training", file=sys.stderr, flush=True)
    for name in args.structures:
        for length in args.lengths:
            out = subprocess.run([sys.executable, __file__, "--_long", name, str(length), "--width", str(args.width),
                                  "--chunk", str(args.chunk), "--threads", str(args.threads)],
                                 capture_output=True, text=True, check=True).stdout
            rows.append({"structure": name, "measure": "eval_long", "length": length, "threads": args.threads, **json.loads(out)})
            print(f"  done {name} {length} tokens", file=sys.stderr, flush=True)
    emit(rows, args, table, markdown)
    return 0


if __name__ == "__main__":
    sys.exit(main())
