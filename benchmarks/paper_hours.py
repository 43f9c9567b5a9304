"""Each shipped experiment's training time at the paper scale on this device, from step times
measured at the experiment's own shapes.

    python benchmarks/paper_hours.py --device cuda --json > benchmarks/results/paper_hours_cuda.json
    python benchmarks/paper_hours.py --device cuda --budget 480 --json   # what 8 minutes can time, cheapest first
    python benchmarks/paper_hours.py demo negeig-parity --steps 1 --warmup 1   # a look on a CPU

Every run of an experiment at the paper scale trains under its own settings (`RunSpec.settings`).
Runs that share a model, a task's vocabulary and answers, and their training settings but for the
learning rate and the seed take one step time: one model is built and trained under those settings
(its longest curriculum stage's lengths, every step drawing a batch there; no early stopping, no
validation) for `--warmup` steps, then `--steps` more, timed (the timer waits for the GPU's queue).
A run's hours are its steps at that time (every step of its budget: early stopping only shortens
it); an experiment's are its runs' sum, one run at a time on one device. Evaluation, validation and
checkpoints are not counted, so the figure is a floor of the wall time. Experiments go cheapest
first by the tokens their runs train on (steps x batch x the longest input's tokens); with `--budget` the
settings still untimed when it runs out are left out, and their experiments say how many runs
they lack. Figures only, no assertions.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
os.environ.setdefault("STATETRACK_NO_SIZE_LIMIT", "1")  # the paper scale's runs exceed a CPU machine's memory bound

from common import report  # noqa: E402
from train_step import seconds_per_step  # noqa: E402

from statetrack import limits  # noqa: E402
from statetrack.experiments.spec import RunSpec, check_buildable, expand, load_spec, shipped_specs  # noqa: E402
from statetrack.models import sizing, zoo  # noqa: E402
from statetrack.tasks import make_task  # noqa: E402
from statetrack.training.train import Trainer, curriculum_tasks  # noqa: E402


def setting_key(run: RunSpec) -> str:
    """What a run's step time depends on: its model, its task's vocabulary and answers, and its
    training settings without the learning rate and the seed."""
    task = make_task(**run.task)
    assert run.settings is not None
    train = run.settings.model_dump(exclude={"lr", "seed", "device"})
    return json.dumps([run.model, task.vocab_size, task.num_classes, run.task, train], sort_keys=True, default=str)


def longest_input(run: RunSpec, task) -> int:
    """The tokens of `run`'s longest training input (`Task.tokens` at its longest curriculum stage)."""
    assert run.settings is not None
    stages = zip(curriculum_tasks(task, run.settings), run.settings.stages())
    return max(each.tokens(stage["max_length"]) for each, stage in stages)


def tokens(run: RunSpec) -> int:
    """The tokens a run trains on at most (steps x batch x the tokens of its longest input): what
    orders the experiments, cheaply (no model is built)."""
    assert run.settings is not None
    return run.settings.steps * run.settings.batch_size * longest_input(run, make_task(**run.task))


def step_bytes(run: RunSpec) -> int:
    """The memory estimate of one training step of `run` (`limits.pass_bytes`): one micro-batch at
    its longest curriculum stage's tokens, as `statetrack run` bounds it; the model on the meta device."""
    assert run.settings is not None
    task = make_task(**run.task)
    longest = longest_input(run, task)
    micro, widest = limits.micro_batch(run.settings), sizing.token_bytes(run.model) or 0
    return limits.pass_bytes(check_buildable(run.model, task), run.model, micro, longest, widest, training=True)


def step_trainer(run: RunSpec, device: str, warmup: int) -> Trainer:
    """A Trainer of `run`'s model under its settings at its last curriculum stage (that stage's
    lengths and task), `warmup` steps long, with no early stopping and no validation."""
    assert run.settings is not None
    longest = run.settings.stages()[-1]
    config = run.settings.model_copy(
        update={
            "steps": warmup,
            "curriculum": None,
            "min_length": longest["min_length"],
            "max_length": longest["max_length"],
            "early_stop_loss": None,
            "early_stop_accuracy": None,
            "early_stop_fit": None,
            "device": device,
            "log_every": 10**9,
        }
    )
    torch.manual_seed(run.seed)
    task = make_task(**run.task)
    model = zoo.build_model(run.model, task.vocab_size, task.num_classes)
    return Trainer(model, curriculum_tasks(task, run.settings)[-1], config, progress=False)


def step_seconds(run: RunSpec, device: str, warmup: int, steps: int) -> float:
    """Seconds per training step of `run`'s model under its settings at its longest stage's lengths
    (NaN where the loss diverges at once, or the device runs out of memory)."""
    trainer = step_trainer(run, device, warmup)
    try:
        return seconds_per_step(trainer, steps, device)
    except torch.OutOfMemoryError:  # a model that does not fit this device at these shapes
        return math.nan
    finally:  # its model and optimizer go before the next setting's (nothing refers back to a Trainer)
        del trainer
        torch.cuda.empty_cache()


def measure(args) -> list[dict]:
    """One row per experiment: runs, settings timed, the steps of its runs, and its hours (None
    while a setting of it is untimed); each setting tried in `settings`, with its step's estimated
    memory and its time, or why it was skipped."""
    experiments = args.experiments or shipped_specs()
    grids = {name: expand(load_spec(name, "paper"), check=False) for name in experiments}
    order = sorted(grids, key=lambda name: sum(tokens(r) for r in grids[name]))
    deadline = time.perf_counter() + args.budget if args.budget else math.inf
    memory = args.memory * 2**30 if args.memory is not None else limits.available_memory()
    timed: dict[str, float] = {}
    refused: set[str] = set()  # settings whose step the estimate puts above `memory`
    rows = []
    for name in order:
        runs, seconds, untimed, settings = grids[name], 0.0, 0, []
        for run in runs:
            key = setting_key(run)
            if key not in timed and key not in refused and time.perf_counter() < deadline:
                need = step_bytes(run)
                setting = {"model": run.model_name, "task": run.task_name, "step_gib": round(need / 2**30, 2)}
                if need > memory:  # it would be killed, and this process with it
                    refused.add(key)
                    setting["skipped"] = f"estimated {need / 2**30:.3g} GiB a step, more than {memory / 2**30:.3g} GiB"
                else:
                    timed[key] = step_seconds(run, args.device, args.warmup, args.steps)
                    setting["step_ms"] = timed[key] * 1e3
                settings.append(setting)
            if key not in timed:
                untimed += 1
                continue
            assert run.settings is not None
            seconds += run.settings.steps * timed[key]
        rows.append(
            {
                "experiment": name,
                "runs": len(runs),
                "untimed_runs": untimed,
                "steps": sum(r.settings.steps for r in runs if r.settings is not None),
                "hours": None if untimed else seconds / 3600,
                "settings": settings,
            }
        )
    return rows


def table(rows: list[dict], markdown: bool = False) -> str:
    header = ["experiment", "runs", "steps", "settings timed", "device hours"]
    body = [
        [
            r["experiment"],
            str(r["runs"]),
            f"{r['steps']:,}",
            str(sum("step_ms" in s for s in r["settings"])),
            f"{r['hours']:.1f}" if r["hours"] is not None else f"- ({r['untimed_runs']} runs untimed)",
        ]
        for r in rows
    ]
    if markdown:
        lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in body])
    widths = [max(len(x) for x in column) for column in zip(header, *body)]
    return "\n".join("  ".join(x.ljust(w) for x, w in zip(row, widths)) for row in [header, *body])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("experiments", nargs="*", help="shipped experiments (default: all)")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--warmup", type=int, default=3, help="untimed steps first (default: 3)")
    parser.add_argument("--steps", type=int, default=5, help="timed steps per setting (default: 5)")
    parser.add_argument("--budget", type=float, default=None, help="seconds of timing at most (default: no bound)")
    parser.add_argument(
        "--memory", type=float, default=None, help="GiB a training step may take (default: the memory available)"
    )
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--markdown", action="store_true")
    args = parser.parse_args()
    unknown = sorted(set(args.experiments) - set(shipped_specs()))
    if unknown:
        parser.error(f"unknown experiments {', '.join(unknown)}; expected shipped ones: {', '.join(shipped_specs())}")
    rows = measure(args)
    if args.json:
        device = torch.cuda.get_device_name(args.device) if torch.device(args.device).type == "cuda" else "CPU"
        print(json.dumps(report(rows, args, device=device), indent=1))
    else:
        print(table(rows, args.markdown))


if __name__ == "__main__":
    main()
