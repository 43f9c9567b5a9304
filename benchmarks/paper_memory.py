"""Peak memory and CPU time of one model of an experiment at the paper scale: a training step, or
an evaluation batch at the longest evaluation length.

    python benchmarks/paper_memory.py repl-traces "DeltaNet [-1,1]"             # the spec's step (12 x 3 traces)
    python benchmarks/paper_memory.py repl-traces "DeltaNet [-1,1]" --batch 1   # one trace a step
    python benchmarks/paper_memory.py repl-traces Transformer --eval --batch 4  # 4 traces of 256 commands
    python benchmarks/paper_memory.py repl-traces "DeltaNet [-1,1]" --batch 1 model_defaults.num_layers=6

Training is the run's own Trainer (its settings, `train.accumulate` included, at its longest
curriculum stage's lengths, every step drawing a batch there) for `--warmup` untimed steps, then
`--steps` timed; `--batch` changes its batch, in micro-batches of the spec's size. Evaluation is
`--steps` batches of `eval.batch_size` (or `--batch`) at the longest of `eval.lengths`, fed as
evaluation feeds them (`predict`: in chunks to a recurrent model, whole to a Transformer), after one
untimed. Overrides (`key=value`) change the paper scale's spec as `statetrack run` does. It prints
the process's peak resident memory (the model, its optimizer and the pass: run one setting per
process), CPU seconds a step or batch (every thread's) and wall seconds. STATETRACK_NO_SIZE_LIMIT
is set, so a setting the memory estimate refuses is measured too. Figures only, no assertions.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import resource
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
os.environ.setdefault("STATETRACK_NO_SIZE_LIMIT", "1")  # measure what the estimate would refuse

from common import peak_rss_mb  # noqa: E402
from paper_hours import step_trainer  # noqa: E402
from train_step import extend  # noqa: E402

from statetrack import limits  # noqa: E402
from statetrack.experiments.spec import expand, load_spec  # noqa: E402
from statetrack.models import zoo  # noqa: E402
from statetrack.tasks import make_task  # noqa: E402
from statetrack.training.evaluate import Sampling, predict  # noqa: E402


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def measure(args) -> dict:
    runs = expand(load_spec(args.experiment, "paper", args.overrides), check=False)
    models = sorted({r.model_name for r in runs})
    run = next((r for r in runs if r.model_name == args.model), None)
    if run is None:
        raise SystemExit(f"unknown model {args.model!r} of {args.experiment}; expected one of: {', '.join(models)}")
    assert run.settings is not None
    torch.set_num_threads(args.threads)
    row = {"experiment": args.experiment, "model": run.model_name, "threads": args.threads}
    task = make_task(**run.task)
    if args.eval:
        length = max(run.eval["lengths"])
        sampling = Sampling.of(run.eval, chunked=zoo.get_entry(run.model["name"]).recurrent)
        batch = args.batch or sampling.batch_size
        torch.manual_seed(run.seed)
        model = zoo.build_model(run.model, task.vocab_size, task.num_classes).eval()
        inputs = task.sample(batch, length, torch.Generator().manual_seed(0)).inputs
        predict(model, inputs, sampling.chunk_size)  # untimed
        start, wall = cpu_seconds(), time.perf_counter()
        for _ in range(args.steps):
            predict(model, inputs, sampling.chunk_size)
        row.update(pass_="eval batch", batch=batch, length=length, chunk=sampling.chunk_size)
    else:
        settings = run.settings
        if args.batch:  # micro-batches of the spec's size (at most)
            micro = limits.micro_batch(settings)
            settings = settings.model_copy(update={"batch_size": args.batch, "accumulate": -(-args.batch // micro)})
        run = dataclasses.replace(run, settings=settings)
        trainer = step_trainer(run, "cpu", args.warmup)
        trainer.fit()  # untimed
        extend(trainer, args.warmup + args.steps)
        start, wall = cpu_seconds(), time.perf_counter()
        trainer.fit()
        length = settings.stages()[-1]["max_length"]
        row.update(pass_="train step", batch=settings.batch_size, accumulate=settings.accumulate, length=length)
        task = trainer.task
    row["cpu_s"] = float(f"{(cpu_seconds() - start) / args.steps:.3g}")
    row["wall_s"] = float(f"{(time.perf_counter() - wall) / args.steps:.3g}")
    row.update(tokens=task.tokens(length), peak_gib=round(peak_rss_mb() / 1024, 2))
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("experiment", help="a shipped experiment")
    parser.add_argument("model", help="a model's name in the experiment, e.g. 'DeltaNet [-1,1]'")
    parser.add_argument("overrides", nargs="*", help="key=value changes to the paper scale's spec")
    parser.add_argument("--eval", action="store_true", help="an evaluation batch instead of a training step")
    parser.add_argument("--batch", type=int, default=None, help="examples a step or batch (default: the spec's)")
    parser.add_argument("--steps", type=int, default=1, help="timed steps or batches (default: 1)")
    parser.add_argument("--warmup", type=int, default=1, help="untimed training steps first (default: 1)")
    parser.add_argument("--threads", type=int, default=torch.get_num_threads(), help="torch threads")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_intermixed_args()
    row = measure(args)
    print(json.dumps(row) if args.json else "  ".join(f"{k.rstrip('_')}={v}" for k, v in row.items()))


if __name__ == "__main__":
    main()
