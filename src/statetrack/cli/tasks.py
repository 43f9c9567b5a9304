"""`statetrack tasks [list | show NAME | export NAME]`: the registered tasks, readable examples of one,
its datasets on disk."""

from __future__ import annotations

from statetrack import limits
from statetrack.cli.common import Arg, Command, int_type, parameters_arg, parse_params, print_json
from statetrack.errors import StatetrackError


def cmd_tasks_list(args) -> int:
    """`tasks` and `tasks list`: every registered task with its summary and parameters."""
    from statetrack.tasks import TASKS, task_parameters

    if args.json or getattr(args, "list_json", False):
        return print_json(
            [
                {"name": name, "summary": cls.summary, "parameters": task_parameters(name)}
                for name, cls in sorted(TASKS.items())
            ]
        )
    width = max(map(len, TASKS)) + 2
    for name, cls in sorted(TASKS.items()):
        params = ", ".join(f"{k}={v!r}" for k, v in task_parameters(name).items()) or "-"
        print(f"{name:{width}s}{cls.summary}\n{'':{width}s}parameters: {params}")
    return 0


def cmd_tasks_show(args) -> int:
    import torch

    from statetrack.tasks import make_task

    if args.count < 1:
        raise StatetrackError(f"--count must be >= 1, got {args.count}")
    task = make_task(args.name, **parse_params(args.params))
    lengths = list(dict.fromkeys(args.lengths or [max(task.min_length, 8)]))
    for length in lengths:
        task.check_length(length)
    limits.check_tokens(args.count, max(lengths), "tasks show")
    print(f"{task!r}: vocab {task.vocab_size} tokens, {task.num_classes} classes, chance {task.chance:.4f}")
    for length in lengths:
        batch = task.sample(args.count, length, torch.Generator().manual_seed(args.seed))
        if len(lengths) > 1:
            print(f"length {length}:")
        for i in range(args.count):
            print(task.describe(batch, i))
    return 0


def cmd_tasks_export(args) -> int:
    from statetrack.tasks import make_task
    from statetrack.tasks.export import export_task

    if args.samples < 1:
        raise StatetrackError(f"--samples must be >= 1, got {args.samples}")
    task = make_task(args.name, **parse_params(args.params))
    paths = export_task(task, args.lengths, args.samples, args.out, fmt=args.format, seed=args.seed)
    for p in paths:
        print(p)
    return 0


TASKS_JSON_HELP = "a JSON list, one object per task: name, summary, parameters (with their defaults)"
TASK_NAME = Arg("name", metavar="NAME", help="a task (see `statetrack tasks`)")
TASKS = Command(
    "tasks",
    "list tasks, show examples, export datasets",
    cmd_tasks_list,
    (Arg("--json", action="store_true", help=TASKS_JSON_HELP),),
    actions=(
        # its --json has its own dest, so the action's default cannot hide `tasks --json`
        Command(
            "list",
            "list tasks with their parameters",
            cmd_tasks_list,
            args=(Arg("--json", dest="list_json", action="store_true", help=TASKS_JSON_HELP),),
        ),
        Command(
            "show",
            "print readable examples of a task",
            cmd_tasks_show,
            args=(
                TASK_NAME,
                parameters_arg("task parameters, e.g. group=S5"),
                Arg(
                    "--lengths",
                    type=int_type(high=limits.MAX_LENGTH),
                    nargs="+",
                    default=None,
                    metavar="L",
                    help="task lengths, --count examples at each (default: 8, or the task's minimum length if longer)",
                ),
                Arg("--count", type=int_type(), default=3, help="examples per length (default: 3)"),
                Arg("--seed", type=int_type(0), default=0, help="seed of the examples (default: 0)"),
            ),
        ),
        Command(
            "export",
            "write datasets to disk (CSV or JSONL)",
            cmd_tasks_export,
            args=(
                TASK_NAME,
                parameters_arg("task parameters, e.g. group=A5"),
                Arg(
                    "--lengths",
                    type=int_type(high=limits.MAX_LENGTH),
                    nargs="+",
                    required=True,
                    metavar="L",
                    help="task lengths, one file per length",
                ),
                Arg("--samples", type=int_type(), required=True, metavar="N", help="examples per length"),
                Arg(
                    "--out",
                    required=True,
                    metavar="DIR",
                    help="folder to write into, created if missing: one file per length and NAME.meta.json "
                    "(what decodes them: vocabulary, answer classes, parameters, files; a group's elements and "
                    "Cayley table)",
                ),
                Arg(
                    "--format",
                    choices=["csv", "jsonl"],
                    default="csv",
                    help="csv: columns input,target,mask (word problems: GROUP=L.csv with seed,input,target, "
                    "as Merrill et al. 2024); jsonl: one object per example (default: csv)",
                ),
                Arg(
                    "--seed",
                    type=int_type(0),
                    default=0,
                    help="seed of the examples; each length has its own generator, seeded from (seed, length), "
                    "so a file does not change when lengths are added (default: 0)",
                ),
            ),
        ),
    ),
    optional_action=True,
)
