"""`statetrack construct TASK`: exact bilinear weights for an automaton task and their accuracy per
length (statetrack.analysis.constructions)."""

from __future__ import annotations

from statetrack import limits
from statetrack.cli.common import Arg, Command, int_type, parameters_arg, parse_params
from statetrack.errors import StatetrackError


def cmd_construct(args) -> int:
    from statetrack.analysis.constructions import STRUCTURES, TASKS, construct, evaluate_construction
    from statetrack.errors import unknown
    from statetrack.models import zoo
    from statetrack.results.tables import text_table
    from statetrack.tasks import make_task

    if args.task not in TASKS:
        raise unknown("task for an exact construction", args.task, TASKS)
    if args.structure not in STRUCTURES:
        raise unknown("structure", args.structure, STRUCTURES)
    for name in ("samples", "batch_size", "chunk_size"):
        if getattr(args, name) < 1:
            raise StatetrackError(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    task = make_task(args.task, **parse_params(args.params))
    for length in args.lengths:
        task.check_length(length)
    limits.check_tokens(min(args.samples, args.batch_size), max(args.lengths), "construct")
    limits.check_construction(task, args.structure)
    built = construct(task, args.structure, normalize_every=args.normalize_every)
    spec = built.spec
    size = f"d_model {spec['d_model']}, hidden {spec['hidden']}" + (
        f", rank {spec['rank']}" if spec["structure"] == "cp" else ""
    )
    print(
        f"{zoo.display_name(spec)} ({size}, {built.model.num_parameters():,} weights) simulating {task!r} exactly; "
        f"smallest logit margin {built.margin:.3f}"
    )
    rows = evaluate_construction(
        built.model,
        task,
        args.lengths,
        samples=args.samples,
        batch_size=args.batch_size,
        seed=args.seed,
        chunk_size=args.chunk_size,
    )
    body = [[str(r["length"]), str(r["samples"]), f"{r['accuracy']:.4f}", f"{r['scaled_accuracy']:.4f}"] for r in rows]
    print(text_table(["length", "samples", "accuracy", "scaled accuracy"], body))
    return 0


CONSTRUCT = Command(
    "construct",
    "exact bilinear weights for an automaton task, and their accuracy per length",
    cmd_construct,
    (
        Arg("task", metavar="TASK", help="fsm, modadd, parity or word_problem"),
        parameters_arg("task parameters, e.g. states=6 machine_seed=1, m=20, group=A5"),
        Arg(
            "--structure",
            default="full",
            help="full, cp, block (any automaton), rotation (commuting tokens: Z_m, abelian groups) "
            "or diagonal (parity)",
        ),
        Arg(
            "--lengths",
            type=int_type(high=limits.MAX_LENGTH),
            nargs="+",
            default=[10, 100, 1000, 10000],
            help="evaluation lengths (default: 10 100 1000 10000)",
        ),
        Arg("--samples", type=int_type(), default=16, help="inputs per length (default: 16)"),
        Arg("--batch-size", type=int_type(), default=16, help="inputs per batch (default: 16)"),
        Arg(
            "--chunk-size",
            type=int_type(high=limits.MAX_LENGTH),
            default=1024,
            help="tokens fed per call, carrying the state (default: 1024)",
        ),
        Arg(
            "--normalize-every",
            type=int_type(1),
            default=1,
            help="the mixer's evaluation-time renormalisation period (default: 1)",
        ),
        Arg("--seed", type=int_type(0), default=0, help="seed of the evaluation inputs"),
    ),
)
