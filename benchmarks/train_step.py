"""Milliseconds per training step of every registered model at the quick experiments' shapes.

    python benchmarks/train_step.py                # human tables
    python benchmarks/train_step.py --markdown     # the table of docs/performance-training.md
    python benchmarks/train_step.py --json         # JSON (benchmarks/common.py): one row per (model, length, layers)
    python benchmarks/train_step.py --device cuda  # on a GPU (the timer waits for the GPU's queue)

A step is what `Trainer.fit` does per step (draw a batch of the task, forward, loss, backward,
gradient clipping, AdamW, the schedule), measured through the trainer itself: `--warmup` steps
first (compilation, first-touch allocation), then `--steps` more of the same trainer, timed. Every
(length, layers) shape times all models round-robin, `--repeat` times, and keeps each one's median;
the LSTM is the in-run yardstick (`x_lstm`). `gflop` is the step's arithmetic as torch's FLOP
counter sees it (matrix products of the forward and backward, `statetrack.models.sizing.pass_flops`; the
recurrences' own kernels are not counted), and `arith_ms` is that arithmetic at the matmul rate
measured in the same run (a [4096, 256] x [256, 256] product), so `ms / arith_ms` is how far a step
is from the cost of its matrix arithmetic. `--compile` also times each model under torch.compile
(`compiled_ms`; a length first seen in the timed steps recompiles there), `--min-length N` trains on
lengths N..T instead of T alone (the quick specs draw a length per batch, which torch.compile must
handle). `--profile N` prints, for the N slowest models at the first shape, the operators where a
step's time goes (torch.profiler, self CPU time). `--optimizers` times AdamW's step alone instead,
for every model at the first width and depth (gradients drawn once): one tensor at a time (torch's
choice on CPU), every tensor at once (`foreach`, what the trainer uses) and torch's fused kernel,
round-robin, and says whether the foreach and fused weights equal the one-at-a-time ones to the
last bit after 20 steps. `--batch-scaling K...` times every model at the first shape with the
batch K times `--batch` instead, and the gain of folding K runs into one step; a SIGTERM (`timeout`) ends it
with the models measured at every K so far (`stopped` in the JSON). malloc keeps freed memory for reuse, as
`statetrack` runs do (`--malloc system` for glibc's defaults). Figures only, no assertions: timings
are noisy on shared machines.
"""

from __future__ import annotations

import contextlib
import json
import math
import signal
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import layer_parser, matmul_rate, report, synchronize  # noqa: E402

from statetrack.allocator import keep_freed_memory  # noqa: E402
from statetrack.models import zoo  # noqa: E402
from statetrack.models.sizing import pass_flops  # noqa: E402
from statetrack.tasks import make_task  # noqa: E402
from statetrack.training.train import Diverged, TrainConfig, Trainer  # noqa: E402

TASK = {"name": "word_problem", "group": "S3"}  # dense supervision, a small vocabulary: the quick word problems


def trainer(name: str, task, length: int, layers: int, width: int, batch: int, steps: int,
            min_length: int | None = None, compile: bool = False, device: str = "cpu") -> Trainer:
    """A trainer of `steps` steps on lengths min_length..length (length alone by default); `compile`:
    the model under torch.compile (the optimizer holds the same parameters)."""
    torch.manual_seed(0)
    model = zoo.build_model({"name": name, "d_model": width, "num_layers": layers}, task.vocab_size, task.num_classes)
    config = TrainConfig(steps=steps, batch_size=batch, lr=1e-3, min_length=min(min_length or length, length), max_length=length,
                         early_stop_loss=None, device=device, log_every=10**9)
    t = Trainer(model, task, config, progress=False)
    if compile:
        t.model = torch.compile(model)
    return t


def step_ms(name: str, task, length: int, layers: int, width: int, batch: int, warmup: int, steps: int,
            min_length: int | None = None, compile: bool = False, device: str = "cpu") -> float:
    """Milliseconds per step of `steps` steps that follow `warmup` steps of the same trainer."""
    t = trainer(name, task, length, layers, width, batch, warmup, min_length, compile, device)
    return seconds_per_step(t, steps, device) * 1e3


def seconds_per_step(t: Trainer, steps: int, device: str) -> float:
    """Seconds per step of `steps` more steps of trainer `t` (one stage, no curriculum), after its own
    steps untimed (the warm-up); NaN when its loss diverges first."""
    warmup = t.config.steps
    try:
        t.fit()
        extend(t, warmup + steps)
        synchronize(device)
        start = time.perf_counter()
        t.fit()
    except Diverged:  # a model that cannot train at this shape (a bilinear state overflowing without renormalisation)
        return math.nan
    synchronize(device)
    return (time.perf_counter() - start) / steps


def extend(t: Trainer, steps: int) -> None:
    """Let a fitted trainer (one stage, no curriculum) go on to `steps` steps."""
    t.config.steps = t.plan[-1]["end"] = steps


def profile(name: str, task, length: int, layers: int, width: int, batch: int, top: int = 8) -> list[dict]:
    """The operators with the most self CPU time over 5 training steps (after 3 unprofiled ones)."""
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    t = trainer(name, task, length, layers, width, batch, 3)
    t.fit()
    extend(t, 8)
    with torch_profile(activities=[ProfilerActivity.CPU]) as prof:
        t.fit()
    events = sorted(prof.key_averages(), key=lambda e: e.self_cpu_time_total, reverse=True)
    total = sum(e.self_cpu_time_total for e in events) or 1
    return [{"op": e.key, "share": e.self_cpu_time_total / total, "ms_per_step": e.self_cpu_time_total / 1e3 / 5, "calls_per_step": e.count / 5}
            for e in events[:top]]


def measure(args) -> tuple[list[dict], dict]:
    task = make_task(**TASK)
    names = args.models or list(zoo.MODELS)
    rate = matmul_rate(4096, 256, 256, max(args.repeat, 30), args.device)[1]
    rows = []
    for length in args.lengths:
        for layers in args.layers:
            modes = (False, True) if args.compile else (False,)  # eager, and compiled when asked
            per_step = {(name, compiled): [] for name in names for compiled in modes}
            for _ in range(args.repeat):  # round-robin: every model sees the same machine load
                for name in names:
                    for compiled in modes:
                        per_step[name, compiled].append(step_ms(name, task, length, layers, args.width, args.batch, args.warmup,
                                                                args.steps, args.min_length, compiled, args.device))
            ms = {key: statistics.median(v) for key, v in per_step.items()}
            lstm = ms.get(("lstm", False))
            for name in names:
                spec = {"name": name, "d_model": args.width, "num_layers": layers}
                flops = pass_flops(spec, TASK, length, device="cpu") * args.batch  # what the CPU step runs
                arith = flops / (rate * 1e9) * 1e3
                eager = ms[name, False]
                rows.append({"model": name, "T": length, "layers": layers, "batch": args.batch, "d_model": args.width,
                             "ms": eager, "x_lstm": eager / lstm if lstm else None, "gflop": flops / 1e9,
                             "arith_ms": arith, "x_arith": eager / arith if arith > 0 else None,
                             "compiled_ms": ms.get((name, True))})
    profiles = {}
    if args.profile:
        first = [r for r in rows if (r["T"], r["layers"]) == (args.lengths[0], args.layers[0])]
        for r in sorted(first, key=lambda r: r["ms"], reverse=True)[: args.profile]:
            profiles[r["model"]] = profile(r["model"], task, r["T"], r["layers"], args.width, args.batch)
    return rows, {"matmul_gflops": rate, "threads": torch.get_num_threads(), "malloc": args.malloc, "profiles": profiles,
                  "device": _device_name(args.device)}


def _device_name(device: str) -> str:
    return torch.cuda.get_device_name(device) if torch.device(device).type == "cuda" else "CPU"


ADAMW_FORMS = {"one at a time": {"foreach": False}, "foreach": {"foreach": True}, "fused": {"fused": True}}


def optimizer_steps(args) -> list[dict]:
    """Milliseconds of one AdamW step (weight decay 0.1) per form of ADAMW_FORMS, for every model."""
    task = make_task(**TASK)
    rows = []
    for name in args.models or list(zoo.MODELS):
        spec = {"name": name, "d_model": args.width, "num_layers": args.layers[0]}
        models, optimizers = {}, {}
        for form, options in ADAMW_FORMS.items():
            torch.manual_seed(0)
            models[form] = zoo.build_model(spec, task.vocab_size, task.num_classes)
            optimizers[form] = torch.optim.AdamW(models[form].parameters(), lr=1e-3, weight_decay=0.1, **options)
        g = torch.Generator().manual_seed(0)
        grads = [torch.randn(p.shape, generator=g) for p in models["foreach"].parameters()]
        for model in models.values():
            for p, grad in zip(model.parameters(), grads):
                p.grad = grad.clone()
        times = {form: [] for form in ADAMW_FORMS}
        for i in range(args.warmup + args.steps):
            for form, optimizer in optimizers.items():
                start = time.perf_counter()
                optimizer.step()
                if i >= args.warmup:
                    times[form].append(time.perf_counter() - start)
        for model in models.values():  # 20 more steps from the same start, for the comparison
            torch.manual_seed(0)
            fresh = zoo.build_model(spec, task.vocab_size, task.num_classes)
            model.load_state_dict(fresh.state_dict())
        for form, optimizer in optimizers.items():
            optimizer.state.clear()
            for _ in range(20):
                optimizer.step()
        weights = {form: list(model.parameters()) for form, model in models.items()}
        rows.append({"model": name, "parameters": sum(p.numel() for p in weights["foreach"]),
                     **{f"{form} ms": statistics.median(t) * 1e3 for form, t in times.items()},
                     **{f"{form} equal": all(torch.equal(a, b) for a, b in zip(weights[form], weights["one at a time"]))
                        for form in ("foreach", "fused")}})
    return rows


def optimizer_table(rows: list[dict], args) -> str:
    head = f"AdamW step alone, d_model {args.width}, {args.layers[0]} layer(s), {args.threads} thread(s); ms (median of {args.steps})"
    lines = [head, "", "| model | parameters | one at a time ms | foreach ms | fused ms | foreach equal | fused equal |",
             "| --- | ---: | ---: | ---: | ---: | --- | --- |"]
    for r in rows:
        lines.append(f"| {r['model']} | {r['parameters']} | {r['one at a time ms']:.2f} | {r['foreach ms']:.2f} | {r['fused ms']:.2f} | "
                     f"{'yes' if r['foreach equal'] else 'no'} | {'yes' if r['fused equal'] else 'no'} |")
    return "\n".join(lines)


def batch_scaling(args) -> tuple[list[dict], str | None]:
    """Milliseconds per step (the median of `args.repeat` round-robin measurements) of every model at
    the first shape with the batch `args.batch` x k for each k of `args.batch_scaling`, and `gain` = k x ms(batch) / ms(k x batch): how much faster k runs
    would train folded into one step of k times the batch than one after another (k at most, the
    same wall time per step at k); and why the measurement stopped early (None when it did not)."""
    task = make_task(**TASK)
    length, layers = args.lengths[0], args.layers[0]
    names = args.models or list(zoo.MODELS)
    per_step = {(name, k): [] for name in names for k in args.batch_scaling}
    stopped = None
    try:
        with _stop_on_sigterm():
            for _ in range(args.repeat):  # round-robin, each figure the median: every model sees the same machine load
                for name, k in per_step:
                    per_step[name, k].append(step_ms(name, task, length, layers, args.width, args.batch * k, args.warmup,
                                                     args.steps, args.min_length, device=args.device))
                    print(f"measured {name} at {k}x", file=sys.stderr, flush=True)
    except _Stopped:  # a time limit (`timeout`) ended it: the models measured at every k so far
        names = [name for name in names if all(per_step[name, k] for k in args.batch_scaling)]
        stopped = f"stopped by SIGTERM with {len(names)} model{'' if len(names) == 1 else 's'} measured at every k"
        print(f"batch scaling: {stopped}", file=sys.stderr)
    rows = []
    for name in names:
        ms = {k: statistics.median(per_step[name, k]) for k in args.batch_scaling}
        base = ms[args.batch_scaling[0]] / args.batch_scaling[0]  # ms per step of one batch's worth of runs
        rows += [{"model": name, "T": length, "layers": layers, "d_model": args.width, "batch": args.batch * k, "k": k,
                  "ms": ms[k], "gain": k * base / ms[k]} for k in args.batch_scaling]
    return rows, stopped


class _Stopped(Exception):
    """SIGTERM arrived (the `timeout` a time-limited session wraps a benchmark in)."""


@contextlib.contextmanager
def _stop_on_sigterm():
    """Within: SIGTERM raises `_Stopped`, so a measurement cut short still reports what it has."""
    def stop(signum, frame):
        raise _Stopped

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def batch_table(rows: list[dict], args, stopped: str | None = None) -> str:
    if not rows:
        return stopped or "no model measured"
    ks = list(dict.fromkeys(r["k"] for r in rows))
    first = rows[0]
    head = (f"{_device_name(args.device)}: ms per training step (median of {args.repeat}) at T {first['T']}, {first['layers']} layer(s), d_model "
            f"{first['d_model']}, {args.threads} thread(s), batch {args.batch} x k; in brackets the gain of folding k runs "
            "into one step (k x ms(1x) / ms(k x)).")
    lines = [head, "", "| model | " + " | ".join(f"{k}x: ms (gain)" for k in ks) + " |", "| --- |" + " ---: |" * len(ks)]
    by = {(r["model"], r["k"]): r for r in rows}
    for model in sorted({r["model"] for r in rows}, key=lambda m: _sort_key(by[(m, ks[0])]["ms"])):
        cells = [f"{_fmt(by[(model, k)]['ms'], '.1f')} ({_fmt(by[(model, k)]['gain'], '.1f')})" for k in ks]
        lines.append(f"| {model} | " + " | ".join(cells) + " |")
    return "\n".join(lines + ([f"\n{stopped}"] if stopped else []))


def _fmt(value, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def table(rows: list[dict], args) -> str:
    lines = [f"matmul rate {args.info['matmul_gflops']:.1f} GFLOP/s at {args.info['threads']} thread(s), malloc {args.info['malloc']}; "
             f"batch {args.batch}, d_model {args.width}, task {TASK['name']}({TASK['group']})"]
    for (length, layers) in dict.fromkeys((r["T"], r["layers"]) for r in rows):
        lines.append(f"\nT {length}, {layers} layer(s)")
        lines.append(f"{'model':16s} {'ms/step':>8s} {'x LSTM':>7s} {'GFLOP':>7s} {'arith ms':>9s} {'x arith':>8s}"
                     + (f" {'compiled ms':>12s}" if args.compile else ""))
        for r in sorted((r for r in rows if (r["T"], r["layers"]) == (length, layers)), key=lambda r: r["ms"]):
            lines.append(f"{r['model']:16s} {r['ms']:8.1f} {_fmt(r['x_lstm'], '7.1f')} {r['gflop']:7.3f} {r['arith_ms']:9.2f} "
                         f"{_fmt(r['x_arith'], '8.0f')}" + (f" {_fmt(r['compiled_ms'], '12.1f')}" if args.compile else ""))
    for model, ops in args.info["profiles"].items():
        lines.append(f"\nwhere a step of {model} goes (self CPU time):")
        lines += [f"  {o['share']:6.1%}  {o['ms_per_step']:7.2f} ms  {o['calls_per_step']:6.0f} calls  {o['op']}" for o in ops]
    return "\n".join(lines)


def markdown(rows: list[dict], args) -> str:
    shapes = list(dict.fromkeys((r["T"], r["layers"]) for r in rows))
    compiled = any(r.get("compiled_ms") is not None for r in rows)
    columns = [f"T {t}, {n} layer{'s' if n > 1 else ''}: ms (x LSTM)" for t, n in shapes]
    if compiled:  # each shape's eager column, then its compiled one
        columns = [c for (t, n), eager in zip(shapes, columns) for c in (eager, f"T {t}, {n} layer{'s' if n > 1 else ''}: compiled ms")]
    header = "| model | " + " | ".join(columns) + f" | GFLOP (T {shapes[0][0]}, {shapes[0][1]} layer{'s' if shapes[0][1] > 1 else ''}) | x arith |"
    lines = [f"{args.info['device']}: matmul rate {args.info['matmul_gflops']:.1f} GFLOP/s at {args.info['threads']} thread(s), "
             f"malloc {args.info['malloc']}; batch {args.batch}, d_model {args.width}, {TASK['name']}({TASK['group']}).", "", header,
             "| --- |" + " ---: |" * (len(columns) + 2)]
    by = {(r["model"], r["T"], r["layers"]): r for r in rows}
    for model in sorted({r["model"] for r in rows}, key=lambda m: _sort_key(by[(m, *shapes[0])]["ms"])):
        first = by[(model, *shapes[0])]
        cells = []
        for s in shapes:
            r = by[(model, *s)]
            cells.append(f"{_fmt(r['ms'], '.1f')} ({_fmt(r['x_lstm'], '.1f')})")
            if compiled:
                cells.append(_fmt(r.get("compiled_ms"), ".1f"))
        lines.append(f"| {model} | " + " | ".join(cells) + f" | {first['gflop']:.3f} | {_fmt(first['x_arith'], '.0f')} |")
    return "\n".join(lines + profile_lines(args.info["profiles"]))


def _sort_key(ms: float) -> float:
    return math.inf if math.isnan(ms) else ms  # a model that diverged (nan) last


def profile_lines(profiles: dict) -> list[str]:
    """The profiles as one Markdown table: per model, the operators with the most self CPU time."""
    if not profiles:
        return []
    lines = ["", "Where a step goes (torch.profiler, self CPU time; the slowest models at the first shape):", "",
             "| model | operator | share | ms per step | calls per step |", "| --- | --- | ---: | ---: | ---: |"]
    for model, ops in profiles.items():
        lines += [f"| {model} | `{o['op']}` | {o['share']:.1%} | {o['ms_per_step']:.2f} | {o['calls_per_step']:.0f} |" for o in ops]
    return lines


def main() -> None:
    parser = layer_parser(__doc__.split("\n\n")[0])
    parser.set_defaults(width=32, threads=1, repeat=3)
    parser.add_argument("--lengths", type=int, nargs="+", default=[16, 64])
    parser.add_argument("--layers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--models", nargs="+", default=None, help="registered model names (default: all)")
    parser.add_argument("--device", default="cpu", help="cpu or cuda (cuda:N); the timed steps wait for the GPU's queue")
    parser.add_argument("--warmup", type=int, default=3, help="untimed steps first")
    parser.add_argument("--steps", type=int, default=20, help="timed steps")
    parser.add_argument("--min-length", type=int, default=None,
                        help="train on lengths min-length..T, as the quick specs do (default: T alone)")
    parser.add_argument("--compile", action="store_true", help="also time each model under torch.compile (`compiled ms`)")
    parser.add_argument("--profile", type=int, default=0, metavar="N", help="profile the N slowest models at the first shape")
    parser.add_argument("--optimizers", action="store_true", help="time AdamW's step alone in its three forms instead")
    parser.add_argument("--batch-scaling", type=int, nargs="+", default=None, metavar="K",
                        help="time each model at the first shape with the batch x K instead (e.g. 1 8 64)")
    parser.add_argument("--malloc", choices=["keep", "system"], default="keep",
                        help="keep: glibc keeps freed memory for reuse, as `statetrack` runs do (statetrack.allocator); "
                             "system: glibc's defaults, every large tensor faulted in fresh")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    if args.malloc == "keep" and not keep_freed_memory():
        print("note: could not change malloc's settings (not glibc); measuring with the system's", file=sys.stderr)
    if args.optimizers:
        rows = optimizer_steps(args)
        print(json.dumps(report(rows, args), indent=1) if args.json else optimizer_table(rows, args))
        return
    if args.batch_scaling:
        rows, stopped = batch_scaling(args)
        print(json.dumps(report(rows, args, device=_device_name(args.device), **({"stopped": stopped} if stopped else {})),
                         indent=1) if args.json else batch_table(rows, args, stopped))
        return
    rows, args.info = measure(args)
    if args.json:
        print(json.dumps(report(rows, args, **args.info), indent=1))
    else:
        print((markdown if args.markdown else table)(rows, args))


if __name__ == "__main__":
    main()
