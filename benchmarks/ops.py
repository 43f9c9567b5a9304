"""Speed of the recurrence ops: reference loop vs fast forms, forward + backward, on this machine.

    python benchmarks/ops.py            # human table
    python benchmarks/ops.py --json     # JSON (benchmarks/common.py): rows of op, T, impl, ms, speedup_vs_reference, peak_mem_mb, gflops
    python benchmarks/ops.py --quick    # T in {256, 1024}, fewer repeats

Shapes (issue 4): delta rule and DeltaProduct B=8, H=4, d=32; diagonal scan a, b [B=8, T, D=64, N=16];
dense transition B=8, H=4, d=32; float32. Every implementation of one (op, T) is timed round-robin in
the same run (median of --repeat fwd+bwd passes, after one warm-up), so ratios are side by side.
`gflops` divides each implementation's own algorithmic flop count (forward x 3 for forward +
backward; see `FLOPS`) by its median time; the matmul row is this machine's measured peak
(float32 1024 x 1024 x 1024 torch.mm) from the same run. `peak_mem_mb` is the largest live
allocation above the inputs during one fwd+bwd pass, from the torch profiler's memory events.
Figures only, no assertions: timings are noisy on shared machines.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import fla_naive, matmul_rate, report  # noqa: E402

from statetrack.allocator import keep_freed_memory  # noqa: E402
from statetrack.ops import (  # noqa: E402
    delta_product,
    delta_product_reference,
    delta_rule,
    delta_rule_reference,
    dense_transition,
    dense_transition_reference,
    diagonal_scan,
    diagonal_scan_reference,
)
from statetrack.ops.delta_rule import DEFAULT_CHUNK_SIZE, chunk_layout  # noqa: E402

B, H, D = 8, 4, 32  # delta rule, DeltaProduct, dense transition
DIAG_D, DIAG_N = 64, 16  # diagonal scan channels x state size
FLA_CHUNK = 32


def load_fla_chunkwise():
    """fla's naive chunkwise delta rule (`common.fla_naive`); None if absent."""
    module = fla_naive("delta_rule/naive.py")
    return None if module is None else module.delta_rule_chunkwise


def chunk_flops(T, C, dk, dv):
    """Forward flops of the chunkwise WY/UT form for one head (matmul terms of delta_chunk.py).

    Per chunk: Kb K^T and Q K^T, the triangular inverse (C^3 / 3), W and U, M and X, V' = U - W S,
    O = Qd S + P V'; per chunk boundary the state update M S + X.
    """
    n = -(-T // C)
    per_chunk = 4 * C * C * dk + C**3 / 3 + 2 * C * C * (dk + dv) + 2 * C * dk * (dk + dv) + 4 * C * dk * dv + 2 * C * C * dv
    return n * (per_chunk + 2 * dk * dk * dv)


FLOPS = {  # forward flops of (op, impl) at length T, whole batch; fwd+bwd is counted as 3x
    ("delta_rule", "reference"): lambda T: B * H * T * 6 * D * D,
    ("delta_rule", "fast"): lambda T: B * H * chunk_flops(T, chunk_layout(T, DEFAULT_CHUNK_SIZE)[1], D, D),
    ("delta_rule", "fla_naive_chunk"): lambda T: B * H * (T // FLA_CHUNK) * (
        2 * FLA_CHUNK**2 * D * 2 + (2 / 3) * FLA_CHUNK**3 + 2 * FLA_CHUNK**2 * 2 * D + 6 * FLA_CHUNK * D * D + 2 * FLA_CHUNK**2 * D
    ),
    ("delta_product_nh2", "reference"): lambda T: B * H * 2 * T * 6 * D * D,
    ("delta_product_nh2", "fast"): lambda T: B * H * chunk_flops(2 * T, chunk_layout(2 * T, DEFAULT_CHUNK_SIZE)[1], D, D),
    ("diagonal_scan", "reference"): lambda T: B * T * DIAG_D * DIAG_N * 2,
    ("diagonal_scan", "fast"): lambda T: B * T * DIAG_D * DIAG_N * 2,
    ("diagonal_scan", "chunked"): lambda T: B * T * DIAG_D * DIAG_N * 2,
    ("dense_transition", "reference"): lambda T: B * H * T * 2 * D * D,
    ("dense_transition", "fast"): lambda T: B * H * T * 2 * D * D,
}


def make_inputs(op, T, gen):
    """(inputs dict of leaf tensors requiring grad, {impl: callable(**inputs) -> (o, S)})."""
    if op in ("delta_rule", "delta_product_nh2"):
        n_h = 1 if op == "delta_rule" else 2
        x = {
            "q": torch.randn(B, T, H, D, generator=gen),
            "k": F.normalize(torch.randn(B, T * n_h, H, D, generator=gen), dim=-1),
            "v": torch.randn(B, T * n_h, H, D, generator=gen),
            "beta": 2 * torch.rand(B, T * n_h, H, generator=gen),
        }
        if op == "delta_rule":
            impls = {"reference": delta_rule_reference, "fast": delta_rule}
            fla = load_fla_chunkwise()
            if fla is not None and T % FLA_CHUNK == 0:  # fla's naive form needs whole chunks
                # fla's own layout [B, H, T, D], prepared outside the timing; it scales q by d^-1/2
                def fla_chunk(q, k, v, beta):
                    return fla(q, k, v, beta, chunk_size=FLA_CHUNK)

                impls["fla_naive_chunk"] = (fla_chunk, lambda t: t.transpose(1, 2).contiguous())
        else:
            impls = {
                "reference": lambda **a: delta_product_reference(**a, num_householder=2),
                "fast": lambda **a: delta_product(**a, num_householder=2),
            }
    elif op == "diagonal_scan":
        x = {
            "a": torch.rand(B, T, DIAG_D, DIAG_N, generator=gen),
            "b": torch.randn(B, T, DIAG_D, DIAG_N, generator=gen),
        }
        impls = {
            "reference": diagonal_scan_reference,
            "fast": diagonal_scan,  # the fused compiled loop on CPU (statetrack.ops.native)
            "chunked": lambda **a: diagonal_scan(**a, impl="chunked"),  # the PyTorch two-level form
        }
    elif op == "dense_transition":
        x = {
            "A": torch.randn(B, T, H, D, D, generator=gen) / D**0.5,
            "b": torch.randn(B, T, H, D, generator=gen),
        }
        impls = {"reference": dense_transition_reference, "fast": dense_transition}
    else:
        raise ValueError(f"unknown op {op!r}")
    return x, impls


def prepare(impl, x):
    """Callable, its own leaf inputs and fixed upstream gradients, all made outside the timing.

    An implementation may want another layout (converted here). The upstream gradients are drawn
    once from the output shapes, so a timed pass is the op's forward and backward and nothing else
    (drawing a [B, T, D, N] random tensor per pass would cost as much as a fast scan).
    """
    fn, convert = impl if isinstance(impl, tuple) else (impl, None)
    leaves = {n: (convert(t) if convert else t).detach().clone().requires_grad_() for n, t in x.items()}
    with torch.no_grad():
        o, S = fn(**leaves)
    g = torch.Generator().manual_seed(0)
    grads = (torch.randn(o.shape, generator=g, dtype=o.dtype), torch.randn(S.shape, generator=g, dtype=S.dtype))
    return fn, leaves, grads


def fwd_bwd(fn, leaves, grads):
    o, S = fn(**leaves)
    torch.autograd.grad((o, S), list(leaves.values()), grad_outputs=grads)


def peak_memory_mb(fn, leaves, grads):
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True, record_shapes=False) as prof:
        fwd_bwd(fn, leaves, grads)
    # allocations are charged to the op that made them (self), frees outside ops are "[memory]" events
    events = sorted((e.time_range.start, e.self_cpu_memory_usage) for e in prof.events() if e.self_cpu_memory_usage)
    live = peak = 0
    for _, delta in events:
        live += delta
        peak = max(peak, live)
    return peak / 2**20


def matmul_peak(repeat):
    ms, gflops = matmul_rate(1024, 1024, 1024, max(repeat, 5))
    return {"op": "matmul_peak", "T": 1024, "impl": "torch.mm", "ms": ms, "speedup_vs_reference": None,
            "peak_mem_mb": None, "gflops": gflops, "threads": torch.get_num_threads()}


def bench_op(op, T, repeat, memory, skip_reference_above):
    gen = torch.Generator().manual_seed(0)
    x, impls = make_inputs(op, T, gen)
    if T > skip_reference_above:
        impls.pop("reference")
    prepared = {name: prepare(impl, x) for name, impl in impls.items()}
    times = {name: [] for name in prepared}
    for name, (fn, leaves, grads) in prepared.items():  # warm-up
        fwd_bwd(fn, leaves, grads)
    for _ in range(repeat):  # round-robin: drift in machine load hits every implementation alike
        for name, (fn, leaves, grads) in prepared.items():
            t0 = time.perf_counter()
            fwd_bwd(fn, leaves, grads)
            times[name].append(time.perf_counter() - t0)
    rows = []
    ref_ms = statistics.median(times["reference"]) * 1e3 if "reference" in times else None
    for name, (fn, leaves, grads) in prepared.items():
        ms = statistics.median(times[name]) * 1e3
        rows.append({
            "op": op,
            "T": T,
            "impl": name,
            "ms": ms,
            "speedup_vs_reference": (ref_ms / ms) if ref_ms else None,
            # the profiler's per-op bookkeeping makes a 4096-step reference loop crawl: skip it there
            "peak_mem_mb": peak_memory_mb(fn, leaves, grads) if memory and (name != "reference" or T <= 1024) else None,
            "gflops": 3 * FLOPS[(op, name)](T) / (ms * 1e-3) / 1e9,
        })
    return rows


def table(rows, peak):
    lines = [
        f"torch {torch.__version__}, {peak.get('threads', '?')} threads, malloc {peak.get('malloc', 'system')}; "
        f"matmul peak {peak['gflops']:.1f} GFLOP/s",
        f"{'op':<18} {'T':>5} {'impl':<16} {'ms':>10} {'x ref':>7} {'x fla':>7} {'MB':>8} {'GFLOP/s':>8} {'% peak':>7}",
    ]
    for r in rows:
        fla = next((s for s in rows if s["op"] == r["op"] and s["T"] == r["T"] and s["impl"] == "fla_naive_chunk"), None)
        vs_fla = f"{fla['ms'] / r['ms']:.2f}" if fla and r["impl"] == "fast" else ""
        speed = f"{r['speedup_vs_reference']:.1f}" if r["speedup_vs_reference"] else ""
        mem = f"{r['peak_mem_mb']:.1f}" if r["peak_mem_mb"] is not None else ""
        lines.append(
            f"{r['op']:<18} {r['T']:>5} {r['impl']:<16} {r['ms']:>10.1f} {speed:>7} {vs_fla:>7} {mem:>8} "
            f"{r['gflops']:>8.2f} {100 * r['gflops'] / peak['gflops']:>6.1f}%"
        )
    return "\n".join(lines)


def markdown(rows, peak):
    lines = [
        f"matmul peak (float32 1024^3 torch.mm, same run): {peak['gflops']:.1f} GFLOP/s; "
        f"{peak.get('threads', '?')} thread(s), malloc {peak.get('malloc', 'system')}",
        "",
        "| op | T | impl | ms (median) | x reference | peak MB | GFLOP/s | % of matmul peak |",
        "| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in rows:
        speed = f"{r['speedup_vs_reference']:.1f}" if r["speedup_vs_reference"] else "-"
        mem = f"{r['peak_mem_mb']:.0f}" if r["peak_mem_mb"] is not None else "-"
        lines.append(
            f"| {r['op']} | {r['T']} | {r['impl']} | {r['ms']:.1f} | {speed} | {mem} | {r['gflops']:.2f} | "
            f"{100 * r['gflops'] / peak['gflops']:.1f} |"
        )
    return "\n".join(lines)


def from_json(measured) -> tuple[list[dict], dict]:
    """(rows, matmul peak) of a --json output (an object; older outputs were a list ending in the peak row)."""
    if isinstance(measured, dict):
        return measured["rows"], measured["matmul_peak"]
    return [r for r in measured if r["op"] != "matmul_peak"], next(r for r in measured if r["op"] == "matmul_peak")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print JSON (benchmarks/common.py) instead of a table")
    parser.add_argument("--markdown", action="store_true", help="print a Markdown table (docs/performance.md)")
    parser.add_argument("--from-json", help="format an earlier --json output instead of measuring")
    parser.add_argument("--quick", action="store_true", help="T in {256, 1024} and 3 repeats")
    parser.add_argument("--T", type=int, nargs="+", help="sequence lengths (default 256 1024 4096)")
    parser.add_argument("--ops", nargs="+", default=["delta_rule", "delta_product_nh2", "diagonal_scan", "dense_transition"])
    parser.add_argument("--repeat", type=int, default=None, help="timed passes per implementation (default 5, quick 3)")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's choice)")
    parser.add_argument("--no-memory", action="store_true", help="skip the peak-memory pass")
    parser.add_argument("--malloc", choices=["keep", "system"], default="keep",
                        help="keep: glibc keeps freed memory for reuse, as `statetrack` runs do (statetrack.allocator); "
                             "system: glibc's defaults, every large tensor faulted in fresh")
    parser.add_argument("--skip-reference-above", type=int, default=10**9, help="time the reference loop only up to this T")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.malloc == "keep" and not keep_freed_memory():
        print("note: could not change malloc's settings (not glibc); measuring with the system's", file=sys.stderr)
    if args.from_json:
        rows, peak = from_json(json.loads(Path(args.from_json).read_text()))
        print(markdown(rows, peak) if args.markdown else table(rows, peak))
        return
    lengths = args.T or ([256, 1024] if args.quick else [256, 1024, 4096])
    repeat = args.repeat or (3 if args.quick else 5)
    peak = matmul_peak(repeat)
    peak["malloc"] = args.malloc
    rows = []
    for op in args.ops:
        for T in lengths:
            rows += bench_op(op, T, repeat, not args.no_memory, args.skip_reference_above)
            print(f"  done {op} T={T}", file=sys.stderr, flush=True)
    if args.json:
        print(json.dumps(report(rows, args, matmul_peak=peak), indent=1))
    elif args.markdown:
        print(markdown(rows, peak))
    else:
        print(table(rows, peak))


if __name__ == "__main__":
    main()
