"""Speed of the zoo's newer ops: each fast form beside an independent per-step form, forward + backward.

    python benchmarks/zoo_ops.py              # human table
    python benchmarks/zoo_ops.py --markdown   # the table of docs/performance.md
    python benchmarks/zoo_ops.py --json       # JSON (benchmarks/common.py): rows of op, impl, ms, x_baseline

One shape for every op, B=2, T=1024, H=2, head dimension 32, float32: the baseline is fla-core's
naive form where fla-core has one (loaded by file path, never `import fla`), else the op's own
per-step reference (Mamba-3, PD-SSM). Every implementation of one op is timed round-robin in the
same run (median of --repeat fwd+bwd passes after one warm-up, upstream gradients drawn once), so
the ratio is side by side. Figures only, no assertions: timings are noisy on shared machines.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import emit, fla_naive  # noqa: E402

from statetrack.ops import (  # noqa: E402
    delta_product,
    deltaformer,
    dplr,
    kda,
    mamba3,
    mamba3_reference,
    path_attention,
    pdssm,
    pdssm_reference,
)

B, H, D = 2, 2, 32
MODELS = {  # op -> the model it serves
    "delta_product (n_h 2, gated)": "gated_deltaproduct",
    "kda": "kda",
    "dplr": "rwkv7",
    "path_attention": "path_attention",
    "deltaformer": "deltaformer",
    "mamba3": "mamba3",
    "pdssm": "pdssm",
}


def _bhtd(t: torch.Tensor) -> torch.Tensor:
    return t.transpose(1, 2)


def cases(T: int, gen: torch.Generator) -> dict:
    """{op: (inputs, {impl: fn(**inputs) -> tensor or tuple of tensors}, baseline name)}."""

    def randn(*shape, dtype=torch.float32):
        return torch.randn(*shape, generator=gen, dtype=dtype)

    def rand(*shape):
        return torch.rand(*shape, generator=gen)

    out: dict = {}
    unit = F.normalize
    gdp = fla_naive("gated_delta_product/naive.py")
    x = {"q": randn(B, T, H, D), "k": unit(randn(B, 2 * T, H, D), dim=-1), "v": randn(B, 2 * T, H, D),
         "beta": 2 * rand(B, 2 * T, H), "g": -rand(B, T, H)}
    impls = {"fast": lambda **a: delta_product(**a, num_householder=2)}
    if gdp:
        impls["fla naive"] = lambda q, k, v, beta, g: gdp.naive_recurrent_gated_delta_product(
            q, k, v, g, beta, scale=1.0, output_final_state=True, num_householder=2)
    out["delta_product (n_h 2, gated)"] = (x, impls, "fla naive")

    kda_naive = fla_naive("kda/naive.py")
    x = {"q": randn(B, T, H, D), "k": unit(randn(B, T, H, D), dim=-1), "v": randn(B, T, H, D),
         "beta": 2 * rand(B, T, H), "g": -rand(B, T, H, D)}
    impls = {"fast": kda}
    if kda_naive:
        impls["fla naive"] = lambda q, k, v, beta, g: kda_naive.naive_recurrent_kda(q, k, v, g, beta, output_final_state=True)
    out["kda"] = (x, impls, "fla naive")

    dplr_naive = fla_naive("generalized_delta_rule/dplr/naive.py")
    kappa = unit(randn(B, T, H, D), dim=-1)
    x = {"q": randn(B, T, H, D), "k": unit(randn(B, T, H, D), dim=-1), "v": randn(B, T, H, D),
         "a": -kappa, "b": kappa * rand(B, T, H, D), "gk": -0.6 * rand(B, T, H, D)}
    impls = {"fast": dplr}
    if dplr_naive:
        def fla_dplr(q, k, v, a, b, gk):
            o, S = dplr_naive.dplr_recurrence(*map(_bhtd, (q, k, v, a, b, gk)), output_final_state=True)
            return _bhtd(o), S
        impls["fla naive"] = fla_dplr
    out["dplr"] = (x, impls, "fla naive")

    path_naive = fla_naive("path_attn/naive.py")
    x = {"q": randn(B, T, H, D), "k": randn(B, T, H, D), "v": randn(B, T, H, D), "w": unit(randn(B, T, H, D), dim=-1),
         "beta": 2 * rand(B, T, H), "g": F.logsigmoid(randn(B, T, H))}
    impls = {"fast": lambda **a: path_attention(**a, scale=D**-0.5, output_final_state=False)[0]}
    if path_naive:
        impls["fla naive"] = lambda **a: path_naive.naive_path_attn(**a, scale=D**-0.5)
    out["path_attention"] = (x, impls, "fla naive")

    df_naive = fla_naive("deltaformer/naive.py")
    x = {"k": randn(B, T, H, D), "v": randn(B, T, H, D), "beta": 2 * rand(B, T, H)}
    # fla's write kernel (the softmax), so that the two compute the same
    impls = {"fast": lambda k, v, beta: deltaformer(k, k, v, beta, write_kernel="softmax")[0]}
    if df_naive:
        impls["fla naive"] = lambda k, v, beta: df_naive.naive_deltaformer_attn(k, k, v, beta)
    out["deltaformer"] = (x, impls, "fla naive")

    x = {"q": randn(B, T, H, D), "k": randn(B, T, H, D), "v": randn(B, T, H, D), "a": 0.9 + 0.1 * rand(B, T, H),
         "dt": rand(B, T, H), "lam": rand(B, T, H), "theta": math.pi * (2 * rand(B, T, H, D // 4) - 1)}
    impls = {"fast": lambda **a: _first_two(mamba3(**a)), "reference": lambda **a: _first_two(mamba3_reference(**a))}
    out["mamba3"] = (x, impls, "reference")

    N = D
    x = {"p": randn(B, T, H, N, N).softmax(-2), "d": torch.polar(rand(B, T, H, N), 2 * math.pi * rand(B, T, H, N)),
         "b": randn(B, T, H, N, dtype=torch.complex64), "initial_state": randn(B, H, N, dtype=torch.complex64)}
    out["pdssm"] = (x, {"fast": pdssm, "reference": pdssm_reference}, "reference")
    return out


def _first_two(result) -> tuple:
    """Mamba-3's (y, (h, k, v)): the output and the state h."""
    y, (h, _, _) = result
    return y, h


def _tensors(result) -> list[torch.Tensor]:
    items = result if isinstance(result, (tuple, list)) else (result,)
    return [t for t in items if isinstance(t, torch.Tensor) and t.requires_grad]


def bench(op: str, T: int, repeat: int) -> list[dict]:
    gen = torch.Generator().manual_seed(0)
    inputs, impls, baseline = cases(T, gen)[op]
    prepared = {}
    for name, fn in impls.items():
        leaves = {n: t.detach().clone().requires_grad_() for n, t in inputs.items()}
        with torch.no_grad():
            shapes = [(t.shape, t.dtype) for t in _as_tuple(fn(**leaves))]
        grads = [torch.randn(s, generator=torch.Generator().manual_seed(1), dtype=d) for s, d in shapes]
        prepared[name] = (fn, leaves, grads)

    def pass_(fn, leaves, grads):
        outputs = _tensors(fn(**leaves))
        torch.autograd.grad(outputs, list(leaves.values()), grad_outputs=grads[: len(outputs)], allow_unused=True)

    times: dict[str, list[float]] = {name: [] for name in prepared}
    for item in prepared.values():  # warm-up
        pass_(*item)
    for _ in range(repeat):  # round-robin: drift in machine load hits every implementation alike
        for name, item in prepared.items():
            t0 = time.perf_counter()
            pass_(*item)
            times[name].append(time.perf_counter() - t0)
    base = statistics.median(times[baseline]) * 1e3 if baseline in times else None
    rows = []
    for name in prepared:
        ms = statistics.median(times[name]) * 1e3
        rows.append({"op": op, "model": MODELS[op], "T": T, "impl": name, "ms": ms, "baseline": baseline,
                     "x_baseline": base / ms if base else None})
    return rows


def _as_tuple(result) -> tuple:
    return tuple(result) if isinstance(result, (tuple, list)) else (result,)


def table(rows: list[dict], args) -> str:
    lines = [f"torch {torch.__version__}, {torch.get_num_threads()} threads; B={B}, H={H}, head dim {D}",
             f"{'op':<30} {'model':<20} {'T':>5} {'impl':<10} {'ms':>10} {'x baseline':>11}"]
    for r in rows:
        x = f"{r['x_baseline']:.1f}" if r["x_baseline"] else "-"
        lines.append(f"{r['op']:<30} {r['model']:<20} {r['T']:>5} {r['impl']:<10} {r['ms']:>10.1f} {x:>11}")
    return "\n".join(lines)


def markdown(rows: list[dict], args) -> str:
    by_op: dict = {}
    for r in rows:
        by_op.setdefault((r["op"], r["model"], r["T"]), {})[r["impl"]] = r
    lines = ["| op | model | T | fast ms | baseline | baseline ms | fast vs baseline |",
             "| --- | --- | ---: | ---: | --- | ---: | ---: |"]
    for (op, model, T), impls in by_op.items():
        fast = impls["fast"]
        base = impls.get(fast["baseline"])
        lines.append(f"| `{op}` | `{model}` | {T} | {fast['ms']:.1f} | {fast['baseline']} | "
                     + (f"{base['ms']:.1f} | {fast['x_baseline']:.1f}x |" if base else "- | - |"))
    return "\n".join(lines)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--T", type=int, default=1024)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--ops", nargs="+", default=list(MODELS), choices=list(MODELS), metavar="OP")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--markdown", action="store_true")
    args = parser.parse_args(argv)
    torch.manual_seed(0)
    rows = [row for op in args.ops for row in bench(op, args.T, args.repeat)]
    emit(rows, args, table, markdown)


if __name__ == "__main__":
    main()
