"""Speed of the bilinear RNN family (Ebrahimi & Memisevic 2025) on this machine.

    python benchmarks/bilinear.py            # human tables
    python benchmarks/bilinear.py --json     # JSON: one object per (structure, measurement)

1. Training: forward + backward of the layer at batch 64, d_x = d_h = 64, T = 64, float32, for each
   structure: `Bilinear.forward` (A(x_t) for all steps in one product, then the dense or diagonal
   scan) against `Bilinear.forward_reference` (the definition: a per-step loop forming A(x_t)
   inside the loop). Both are timed round-robin in one run (median of --repeat passes after a
   warm-up), so the ratio is side by side.
2. Long inputs: evaluation of one 100,000-token input (batch 1) through
   `statetrack.evaluate.predict` in chunks of 1024 on a whole 1-layer model (width 64, no MLP), with
   the evaluation-time renormalisation on (every step). Each structure and length runs in a fresh
   subprocess, so its peak resident memory (ru_maxrss) is its own; 10,000 against 100,000 tokens
   shows whether memory stays flat.
Figures only, no assertions: timings are noisy on shared machines.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from statetrack import zoo  # noqa: E402
from statetrack.evaluate import predict  # noqa: E402
from statetrack.layers.bilinear import Bilinear  # noqa: E402

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
    times = {name: [] for name in forms}
    for i in range(repeat + 1):
        for name, form in forms.items():
            start = time.perf_counter()
            y, _ = form(x)
            y.square().mean().backward()
            if i:  # the first round warms up
                times[name].append(time.perf_counter() - start)
            layer.zero_grad(set_to_none=True)
            x.grad = None
    fast, ref = statistics.median(times["fast"]), statistics.median(times["reference"])
    return {"fast_ms": 1e3 * fast, "reference_ms": 1e3 * ref, "speedup": ref / fast}


def long_input(settings: dict, width: int, length: int, chunk: int) -> dict:
    """Run in a subprocess: seconds to predict one `length`-token input, and peak RSS."""
    torch.manual_seed(0)
    model = zoo.build_model({"name": "bilinear", **settings, "d_model": width, "num_layers": 1, "mlp": False}, 8, 4).eval()
    tokens = torch.randint(0, 8, (1, length))
    predict(model, tokens[:, :chunk], chunk)  # warm-up
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    start = time.perf_counter()
    out = predict(model, tokens, chunk)
    seconds = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {"seconds": seconds, "peak_rss_mb": peak / 1024, "growth_mb": (peak - base) / 1024, "tokens": int(out.numel())}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--width", type=int, default=64)
    parser.add_argument("--T", type=int, default=64)
    parser.add_argument("--lengths", type=int, nargs="*", default=[10_000, 100_000], help="long-input lengths (none: skip)")
    parser.add_argument("--chunk", type=int, default=1024)
    parser.add_argument("--structures", nargs="*", default=list(STRUCTURES), choices=list(STRUCTURES))
    parser.add_argument("--_long", nargs=2, help=argparse.SUPPRESS)  # internal: one long-input run
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    if args._long:
        print(json.dumps(long_input(STRUCTURES[args._long[0]], args.width, int(args._long[1]), args.chunk)))
        return 0
    rows = []
    for name in args.structures:
        rows.append({"structure": name, "measure": "train_fwd_bwd", "batch": args.batch, "width": args.width, "T": args.T,
                     **time_training(STRUCTURES[name], args.batch, args.width, args.T, args.repeat)})
    for name in args.structures:
        for length in args.lengths:
            out = subprocess.run([sys.executable, __file__, "--_long", name, str(length), "--width", str(args.width),
                                  "--chunk", str(args.chunk), "--threads", str(args.threads)],
                                 capture_output=True, text=True, check=True).stdout
            rows.append({"structure": name, "measure": "eval_long", "length": length, **json.loads(out)})
    if args.json:
        print(json.dumps(rows, indent=1))
        return 0
    print(f"forward + backward, batch {args.batch}, d_x = d_h = {args.width}, T {args.T}, {args.threads} threads (median of {args.repeat})")
    print(f"{'structure':<12} {'fast ms':>9} {'reference ms':>13} {'speedup':>8}")
    for r in rows:
        if r["measure"] == "train_fwd_bwd":
            print(f"{r['structure']:<12} {r['fast_ms']:>9.1f} {r['reference_ms']:>13.1f} {r['speedup']:>7.1f}x")
    if args.lengths:
        print(f"\nevaluation of one input (batch 1, width {args.width}, chunks of {args.chunk}, renormalised every step)")
        print(f"{'structure':<12} {'tokens':>8} {'seconds':>8} {'peak RSS MB':>12}")
        for r in rows:
            if r["measure"] == "eval_long":
                print(f"{r['structure']:<12} {r['length']:>8} {r['seconds']:>8.2f} {r['peak_rss_mb']:>12.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
