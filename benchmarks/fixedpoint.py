"""Speed of the fixed-point RNN (Movahedi et al. 2025) on this machine.

    python benchmarks/fixedpoint.py               # human tables
    python benchmarks/fixedpoint.py --json        # JSON (benchmarks/common.py): one row per measurement
    python benchmarks/fixedpoint.py --markdown    # the tables of docs/performance-layers.md

1. The price of an iteration: forward + backward of one FixedPointRNN layer (batch 64, d_model =
   hidden = 64, T = 64, float32) with the iteration count forced to l (tol 0, max_iter l) for
   l = 1, 4, 16, beside one `diagonal_scan` forward + backward on the layer's state [64, 64, 64].
   `ratio` = layer / scan, against the budget l + 2; `per_iteration` = the extra cost of one more
   iteration, in scans ((layer(16) - layer(4)) / 12 / scan). The l = 1 layer is the diagonal RNN
   with the same projections: what is left beyond the iterations is its cost. `projections` times
   the layer's two matrix products alone (input projection to b, Delta, u, alpha and the gate;
   output projection), forward + backward: the floor any implementation of the layer pays.
   `recurrence` times the fixed-point recurrence alone: the layer's solver with l iterations of
   the op on the layer's lam, scale, b, u, alpha given as inputs, forward + backward to them.
2. Against the dense RNN it equals: forward + backward at d_model 64, T 256 (batch 16) of the layer
   with its default stopping rule (tol 0.1, max_iter 16; the iterations it took are shown) and of
   `FixedPointRNN.dense_reference`, the same dense RNN computed step by step (Q_t materialised, one
   solve per step).
3. The fused iterations (`statetrack.ops.fixed_point`: one compiled pass per no-grad iteration,
   and a compiled forward and backward for the last, differentiable one) against the
   same iterations as their definitions (PyTorch ops around the compiled diagonal scan), for both
   layers at the quick experiments' shapes (batch 64, d_model 64; Bedouin expand 2, d_state 16): a
   training step (forward + backward, T 16, exactly 16 iterations) and an evaluation forward (T 50,
   exactly 100 iterations, the evaluation cap).
4. Dropping converged sequences: the solver's no-grad loop computing only the sequences still
   iterating once at most `COMPACT` of them are (as shipped), against computing every sequence to
   the last iteration (COMPACT = 0), for a training step (forward + backward over 6 batches) and an
   evaluation forward (256 sequences); the iteration counts (median and largest) show the spread
   it feeds on. With --narrowing-run RUN_ID (a finished run of a Bedouin or fixed-point model, e.g.
   from `statetrack reproduce --scale quick modarith-brackets`; --results-dir where it ran), the
   trained model on its task: batches at its training lengths and its longest test length. Without
   one, both layers at init (--reflections' last r) on random inputs whose scale spreads over two
   decades per sequence, at tol 1e-3: a toy spread, for the command to run anywhere.
Every pair is timed round-robin in one run (median of --repeat passes after a warm-up), so ratios
are side by side. Figures only, no assertions: timings are noisy on shared machines.
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import emit, layer_parser  # noqa: E402

from statetrack import diagnostics  # noqa: E402
from statetrack.layers import fixedpoint as fixed_point_layers  # noqa: E402
from statetrack.layers.fixedpoint import Bedouin, FixedPointRNN  # noqa: E402
from statetrack.ops import diagonal_scan, fixed_point_iteration, fixed_point_iteration_nograd  # noqa: E402
from statetrack.ops import fixed_point as fixed_point_ops  # noqa: E402
from statetrack.ops.fixed_point import relative_change  # noqa: E402


def timed(forms: dict, repeat: int) -> dict:
    """Median wall milliseconds of each callable, timed round-robin after one warm-up round."""
    times = {name: [] for name in forms}
    for i in range(repeat + 1):
        for name, form in forms.items():
            start = time.perf_counter()
            form()
            if i:
                times[name].append(time.perf_counter() - start)
    return {name: 1e3 * statistics.median(t) for name, t in times.items()}


def fwd_bwd(layer, x, form="forward"):
    def run():
        y, _ = getattr(layer, form)(x)
        y.square().mean().backward()
        layer.zero_grad(set_to_none=True)
        x.grad = None
    return run


def iteration_price(reflections: int, batch: int, width: int, T: int, repeat: int) -> list[dict]:
    torch.manual_seed(0)
    a = torch.rand(batch, T, width).requires_grad_()
    b = torch.randn(batch, T, width).requires_grad_()

    def scan():
        h, _ = diagonal_scan(a, b)
        h.square().mean().backward()
        a.grad = b.grad = None

    x = torch.nn.functional.layer_norm(torch.randn(batch, T, width), (width,)).requires_grad_()
    layers = {l: FixedPointRNN(width, reflections=reflections, max_iter=l).train() for l in (1, 4, 16)}
    for layer in layers.values():
        layer.tol = 0.0  # every iteration runs: the count is the cap
    one = layers[1]

    def projections():
        p = one.in_proj(x)
        y = one.out_proj(p[..., :width])
        (y.square().mean() + p.sum() * 0).backward()  # every output of in_proj gets a gradient
        one.zero_grad(set_to_none=True)
        x.grad = None

    with torch.no_grad():  # the recurrence's inputs as the layer computes them, as leaves
        inputs = [t.contiguous().requires_grad_() for t in one._inputs(x)]
    lam, u, alpha, scale = inputs[1], inputs[2], inputs[3], inputs[5]
    b = inputs[0]

    def recurrence(layer):  # the layer's own solver on the op, without projections and elementwise work
        def run():
            def restrict(rows):
                lam_r, scale_r, b_r, u_r, alpha_r = layer._rows((lam, scale, b, u, alpha), rows)
                return lambda p: fixed_point_iteration_nograd(lam_r, scale_r, b_r, u_r, alpha_r, p)
            h, _ = layer.solve(lambda p: fixed_point_iteration(lam, scale, b, u, alpha, p), torch.zeros_like(b), restrict)
            h.square().mean().backward()
            for t in inputs:
                t.grad = None
        return run

    forms = {"scan": scan, "projections": projections, **{l: fwd_bwd(layer, x) for l, layer in layers.items()},
             **{("recurrence", l): recurrence(layer) for l, layer in layers.items()}}
    ms = timed(forms, repeat)
    per_iteration = (ms[16] - ms[4]) / 12 / ms["scan"]
    return [{"measure": "iteration_price", "reflections": reflections, "iterations": l, "batch": batch, "width": width, "T": T,
             "layer_ms": ms[l], "scan_ms": ms["scan"], "ratio": ms[l] / ms["scan"], "budget": l + 2,
             "vs_diagonal_layer": ms[l] / ms[1], "per_iteration_scans": per_iteration,
             "projections_scans": ms["projections"] / ms["scan"], "recurrence_ms": ms["recurrence", l],
             "recurrence_ratio": ms["recurrence", l] / ms["scan"]} for l in layers]


def against_dense(reflections: int, batch: int, width: int, T: int, repeat: int) -> dict:
    torch.manual_seed(0)
    layer = FixedPointRNN(width, reflections=reflections).train()
    x = torch.nn.functional.layer_norm(torch.randn(batch, T, width), (width,)).requires_grad_()
    diagnostics.drain(layer)
    ms = timed({"fixed_point": fwd_bwd(layer, x), "dense": fwd_bwd(layer, x, "dense_reference")}, repeat)
    counts = diagnostics.drain(layer)["iterations"]
    return {"measure": "against_dense", "reflections": reflections, "batch": batch, "width": width, "T": T,
            "fixed_point_ms": ms["fixed_point"], "dense_ms": ms["dense"], "speedup": ms["dense"] / ms["fixed_point"],
            "iterations_median": statistics.median(counts)}


def _unfused_nograd(reference, prev_at: int):
    def run(*args):
        with torch.no_grad():
            y, last = reference(*args)
            return y, last, relative_change(y, args[prev_at])
    return run


UNFUSED = {  # the layer module's ops, replaced by their definitions (PyTorch ops around the compiled scan)
    "fixed_point_iteration": fixed_point_ops.fixed_point_iteration_reference,
    "fixed_point_iteration_nograd": _unfused_nograd(fixed_point_ops.fixed_point_iteration_reference, 5),
    "bedouin_iteration": fixed_point_ops.bedouin_iteration_reference,
    "bedouin_iteration_nograd": _unfused_nograd(fixed_point_ops.bedouin_iteration_reference, 3),
}


def fusion(on: bool, form):
    """`form` run with the layers' fused iterations (on) or with their definitions (off)."""
    def run():
        saved = {name: getattr(fixed_point_layers, name) for name in UNFUSED}
        if not on:
            for name, op in UNFUSED.items():
                setattr(fixed_point_layers, name, op)
        try:
            form()
        finally:
            for name, op in saved.items():
                setattr(fixed_point_layers, name, op)
    return run


def fused_against_torch(name: str, reflections: int, batch: int, width: int, T_train: int, T_eval: int,
                        repeat: int) -> list[dict]:
    torch.manual_seed(0)
    layer = {"fixedpoint": FixedPointRNN, "bedouin": Bedouin}[name](width, reflections=reflections, max_iter=16,
                                                                    eval_max_iter=100)
    layer.tol = 0.0  # every iteration runs: the count is the cap
    x_train = torch.randn(batch, T_train, width)
    x_eval = torch.randn(batch, T_eval, width)

    def train():
        layer.train()
        y, _ = layer(x_train)
        y.square().mean().backward()
        layer.zero_grad(set_to_none=True)

    def evaluate():
        layer.eval()
        with torch.no_grad():
            layer(x_eval)

    rows = []
    for mode, form, T, iterations in (("train", train, T_train, 16), ("eval", evaluate, T_eval, 100)):
        ms = timed({"fused": fusion(True, form), "torch": fusion(False, form)}, repeat)
        rows.append({"measure": "fused_against_torch", "layer": name, "reflections": reflections, "mode": mode,
                     "batch": batch, "width": width, "T": T, "iterations": iterations, "fused_ms": ms["fused"],
                     "torch_ms": ms["torch"], "speedup": ms["torch"] / ms["fused"]})
    return rows


def narrowing(source: str, forms: dict, repeat: int) -> list[dict]:
    """Each of `forms` ({mode: (callable, model)}) timed with the solver dropping converged sequences
    and computing all of them, round-robin; the iteration counts of the first pass."""
    rows = []
    for mode, (form, model) in forms.items():
        diagnostics.drain(model)
        compacting = fixed_point_layers.COMPACT

        def set_to(value):
            def run():
                fixed_point_layers.COMPACT = value
                form()
            return run
        try:
            ms = timed({"narrowing": set_to(compacting), "all": set_to(0.0)}, repeat)
        finally:
            fixed_point_layers.COMPACT = compacting
        counts = sorted(diagnostics.drain(model).get("iterations", [0]))
        rows.append({"measure": "narrowing", "source": source, "mode": mode, "iterations_median": statistics.median(counts),
                     "iterations_max": counts[-1], "narrowing_ms": ms["narrowing"], "all_ms": ms["all"],
                     "speedup": ms["all"] / ms["narrowing"]})
    return rows


def _passes(model, loss, train_inputs: list, eval_input: torch.Tensor) -> dict:
    """{"train": forward + backward over each training input, "eval": one forward without autograd}."""
    def train():
        model.train()
        for inputs in train_inputs:
            loss(model, inputs).backward()
        model.zero_grad(set_to_none=True)

    def evaluate():
        model.eval()
        with torch.no_grad():
            model(eval_input)
    return {"train": (train, model), "eval": (evaluate, model)}


def narrowing_of_run(run_id: str, results_dir: str, repeat: int) -> list[dict]:
    from statetrack.results.trained import load_run  # noqa: PLC0415

    run = load_run(run_id, results_dir=results_dir)
    if not any(isinstance(module, fixed_point_layers._FixedPoint) for module in run.model.modules()):
        sys.exit(f"error: run {run.id} is {run.model_name}, which has no fixed-point layer; pass a run of a Bedouin or fixed-point model")
    train = run.config["train"]
    stage = (train.get("curriculum") or [train])[-1]
    g = torch.Generator().manual_seed(0)
    lengths = torch.randint(stage["min_length"], stage["max_length"] + 1, (6,), generator=g).tolist()
    batches = [run.task.sample(train["batch_size"], length, g) for length in lengths]
    by_inputs = {id(b.inputs): b for b in batches}
    test = run.task.sample(256, max(run.config["eval"]["lengths"]), g)

    def loss(model, inputs):
        return run.task.loss(model(inputs)[0], by_inputs[id(inputs)])[0]
    forms = _passes(run.model, loss, [b.inputs for b in batches], test.inputs)
    return narrowing(f"{run.model_name} on {run.task_name} ({run.experiment}, seed {run.seed})", forms, repeat)


def narrowing_at_init(name: str, reflections: int, batch: int, width: int, T: int, repeat: int) -> list[dict]:
    torch.manual_seed(0)
    layer = (Bedouin if name == "bedouin" else FixedPointRNN)(width, reflections=reflections, tol=1e-3, max_iter=100)
    scales = torch.logspace(-1, 1, batch)[torch.randperm(batch)][:, None, None]
    train_inputs = [torch.randn(batch, T, width) * scales for _ in range(6)]
    test = torch.randn(256, T, width) * torch.logspace(-1, 1, 256)[:, None, None]
    forms = _passes(layer, lambda m, x: m(x)[0].square().mean(), train_inputs, test)
    return narrowing(f"{name} r={reflections} at init, T {T}", forms, repeat)


def table(rows, args) -> str:
    lines = []
    if any(r["measure"] == "iteration_price" for r in rows):
        lines += [f"forward + backward, float32, {args.threads} threads, torch {torch.__version__} (median of {args.repeat})",
                  f"{'r':>2} {'iters':>5} {'layer ms':>9} {'scan ms':>8} {'ratio':>7} {'budget':>7} {'vs l=1':>7} {'scans/iter':>10} {'proj':>6} {'recurrence':>10}"]
    for r in rows:
        if r["measure"] == "iteration_price":
            lines.append(f"{r['reflections']:>2} {r['iterations']:>5} {r['layer_ms']:>9.1f} {r['scan_ms']:>8.2f} {r['ratio']:>6.1f}x "
                         f"{r['budget']:>6}x {r['vs_diagonal_layer']:>6.1f}x {r['per_iteration_scans']:>10.2f} "
                         f"{r['projections_scans']:>5.1f}x {r['recurrence_ratio']:>9.1f}x")
    for r in rows:
        if r["measure"] == "against_dense":
            lines.append(f"r={r['reflections']} batch {r['batch']}, d {r['width']}, T {r['T']}: fixed point {r['fixed_point_ms']:.1f} ms "
                         f"({r['iterations_median']:g} iterations), dense step by step {r['dense_ms']:.1f} ms, {r['speedup']:.1f}x")
    for r in rows:
        if r["measure"] == "fused_against_torch":
            lines.append(f"{r['layer']} r={r['reflections']} {r['mode']} (T {r['T']}, {r['iterations']} iterations): fused "
                         f"{r['fused_ms']:.1f} ms, definitions {r['torch_ms']:.1f} ms, {r['speedup']:.2f}x")
    for r in rows:
        if r["measure"] == "narrowing":
            lines.append(f"{r['source']} {r['mode']} (iterations median {r['iterations_median']:g}, max {r['iterations_max']:g}): "
                         f"dropping converged {r['narrowing_ms']:.1f} ms, all to the end {r['all_ms']:.1f} ms, {r['speedup']:.2f}x")
    return "\n".join(lines)


def markdown(rows, args) -> str:
    lines = []
    first = next((r for r in rows if r["measure"] == "iteration_price"), None)
    if first:
        lines += [f"Forward + backward of one FixedPointRNN layer with exactly l iterations (batch {first['batch']}, d_model = hidden = "
                  f"{first['width']}, T = {first['T']}, float32, {args.threads} thread(s); median of "
                  f"{args.repeat} round-robin passes), against one diagonal scan forward + backward on its state.", "",
                  "| r | iterations l | layer ms | scan ms | layer / scan | budget l + 2 | recurrence alone / scan | layer / (l = 1 layer) "
                  "| one more iteration, in scans | projections alone, in scans |",
                  "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
        for r in rows:
            if r["measure"] == "iteration_price":
                lines.append(f"| {r['reflections']} | {r['iterations']} | {r['layer_ms']:.1f} | {r['scan_ms']:.2f} | {r['ratio']:.1f}x | "
                             f"{r['budget']}x | {r['recurrence_ratio']:.1f}x | {r['vs_diagonal_layer']:.2f}x | {r['per_iteration_scans']:.2f} | "
                             f"{r['projections_scans']:.1f} |")
    dense = [r for r in rows if r["measure"] == "against_dense"]
    if dense:
        lines += ["", f"Against the dense RNN it equals, computed step by step (batch {dense[0]['batch']}, d_model {dense[0]['width']}, "
                      f"T = {dense[0]['T']}, forward + backward):", "",
                  "| r | fixed point ms (iterations) | dense step by step ms | speedup |", "| ---: | ---: | ---: | ---: |"]
        for r in dense:
            lines.append(f"| {r['reflections']} | {r['fixed_point_ms']:.1f} ({r['iterations_median']:g}) | {r['dense_ms']:.1f} | "
                         f"{r['speedup']:.1f}x |")
    fused = [r for r in rows if r["measure"] == "fused_against_torch"]
    if fused:
        lines += ["", f"The fused iterations against their definitions (PyTorch ops around the compiled scan; batch {fused[0]['batch']}, "
                      f"d_model {fused[0]['width']}; train = forward + backward, eval = forward without autograd):", "",
                  "| layer | r | step | T | iterations | fused ms | definitions ms | speedup |",
                  "| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: |"]
        for r in fused:
            lines.append(f"| {r['layer']} | {r['reflections']} | {r['mode']} | {r['T']} | {r['iterations']} | {r['fused_ms']:.1f} | "
                         f"{r['torch_ms']:.1f} | {r['speedup']:.2f}x |")
    narrow = [r for r in rows if r["measure"] == "narrowing"]
    if narrow:
        lines += ["", "Dropping converged sequences against computing every sequence to the end (train = forward + backward over "
                      "6 batches, eval = one forward of 256 sequences):", "",
                  "| model | step | iterations (median, max) | dropping ms | all to the end ms | speedup |",
                  "| --- | --- | ---: | ---: | ---: | ---: |"]
        for r in narrow:
            lines.append(f"| {r['source']} | {r['mode']} | {r['iterations_median']:g}, {r['iterations_max']:g} | {r['narrowing_ms']:.1f} | "
                         f"{r['all_ms']:.1f} | {r['speedup']:.2f}x |")
    return "\n".join(lines).lstrip("\n")


def main(argv=None) -> int:
    parser = layer_parser(__doc__.splitlines()[0])
    parser.add_argument("--dense-batch", type=int, default=16)
    parser.add_argument("--dense-T", type=int, default=256)
    parser.add_argument("--reflections", type=int, nargs="*", default=[1, 4])
    parser.add_argument("--fused-T", type=int, nargs=2, default=[16, 50], metavar=("TRAIN", "EVAL"),
                        help="lengths of the fused-against-definitions training step and evaluation forward")
    parser.add_argument("--narrowing-run", metavar="RUN_ID",
                        help="measure dropping converged sequences on this finished run's trained model (default: the layers at init)")
    parser.add_argument("--results-dir", default="results", help="where --narrowing-run ran (default: results)")
    parser.add_argument("--only-narrowing", action="store_true", help="measure dropping converged sequences alone")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    if args.narrowing_run:
        rows = narrowing_of_run(args.narrowing_run, args.results_dir, args.repeat)
    else:
        rows = [row for name in ("fixedpoint", "bedouin")
                for row in narrowing_at_init(name, args.reflections[-1], args.batch, args.width, args.T, args.repeat)]
    if args.only_narrowing:
        emit(rows, args, table, markdown)
        return 0
    for r in args.reflections:
        rows += iteration_price(r, args.batch, args.width, args.T, args.repeat)
        rows.append(against_dense(r, args.dense_batch, args.width, args.dense_T, max(1, args.repeat // 2)))
        for name in ("fixedpoint", "bedouin"):
            rows += fused_against_torch(name, r, args.batch, args.width, *args.fused_T, max(1, args.repeat // 2))
        print(f"  done r={r}", file=sys.stderr, flush=True)
    emit(rows, args, table, markdown)
    return 0


if __name__ == "__main__":
    sys.exit(main())
