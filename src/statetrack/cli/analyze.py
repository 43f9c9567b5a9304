"""`statetrack analyze ACTION`: analyses of trained runs (spectrum, rotations, signs, heads), of a
task's belief recurrence (belief) and of the random machine's shortcut floor (shortcut), one handler
per action (statetrack.analysis)."""

from __future__ import annotations

from statetrack import limits
from statetrack.cli.common import STORE, Arg, Command, int_type, open_store, parameters_arg, parse_params
from statetrack.errors import StatetrackError
from statetrack.paths import check_name


def _check_run(args) -> None:
    check_name(args.run, "RUN (a run id or an experiment name)")


def _check_inputs(args) -> None:
    """--samples and --length, where the action takes them: each at least 1, together within the token limit."""
    for option in ("samples", "length"):
        if getattr(args, option, None) is not None and getattr(args, option) < 1:
            raise StatetrackError(f"--{option} must be an integer >= 1, got {getattr(args, option)}")
    if getattr(args, "samples", None) and getattr(args, "length", None):
        limits.check_tokens(args.samples, args.length, f"analyze {args.analysis}")


def _on_inputs(args) -> dict:
    """The keywords of an analysis that feeds a trained run inputs (spectrum, heads): which run of an
    experiment, the inputs, the plots' folder."""
    return dict(
        samples=args.samples,
        length=args.length,
        seed=args.seed,
        out=args.out,
        model=args.model,
        run_seed=args.run_seed,
    )


def _print(text: str, *plots) -> int:
    """An analysis's text, then the path of each plot it wrote."""
    print(text)
    for path in plots:
        if path is not None:
            print(f"plot: {path}")
    return 0


def cmd_analyze_spectrum(args) -> int:
    from statetrack.analysis.spectrum import analyze_run

    _check_run(args)
    _check_inputs(args)
    text, path = analyze_run(open_store(args), args.run, args.results_dir, **_on_inputs(args))
    return _print(text, path)


def cmd_analyze_rotations(args) -> int:
    from statetrack.analysis.rotations import analyze_rotations

    _check_run(args)
    text, path = analyze_rotations(
        open_store(args),
        args.run,
        args.results_dir,
        out=args.out,
        model=args.model,
        run_seed=args.run_seed,
        top=args.top,
    )
    return _print(text, path)


def cmd_analyze_signs(args) -> int:
    from statetrack.analysis.signs import analyze_signs

    _check_run(args)
    print(analyze_signs(open_store(args), args.run, args.results_dir, model=args.model, run_seed=args.run_seed))
    return 0


def cmd_analyze_heads(args) -> int:
    from statetrack.analysis.heads import analyze_heads

    _check_run(args)
    _check_inputs(args)
    text, paths = analyze_heads(open_store(args), args.run, args.results_dir, **_on_inputs(args), sweep=args.sweep)
    return _print(text, *paths)


def cmd_analyze_belief(args) -> int:
    from statetrack.analysis.belief import analyze_belief

    _check_inputs(args)
    text, path = analyze_belief(
        args.task,
        parse_params(args.params),
        length=args.length,
        samples=args.samples,
        seed=args.seed,
        out=args.out,
        results_dir=args.results_dir,
    )
    return _print(text, path)


def cmd_analyze_shortcut(args) -> int:
    from statetrack.analysis.shortcuts import format_floor, shortcut_floor

    params = parse_params(args.params)
    unknown_keys = sorted(set(params) - {"states", "machine_seed"})
    if unknown_keys:
        raise StatetrackError(f"unknown fsm parameter {unknown_keys[0]!r}; expected states or machine_seed")
    floor = shortcut_floor(window=args.window, **params)
    print(format_floor(params.get("states", 6), params.get("machine_seed", 0), floor))
    return 0


INPUTS = Arg("--samples", type=int_type(), default=64, help="input sequences (default: 64)")
INPUT_LENGTH = Arg(
    "--length",
    type=int_type(high=limits.MAX_LENGTH),
    default=None,
    help="input length (default: the run's longest training length)",
)


def _one_run(example: str) -> tuple[Arg, ...]:
    """The arguments naming one trained run: RUN, or an experiment with --model and --run-seed."""
    return (
        Arg("run", metavar="RUN", help="a run id (or unique prefix), or an EXPERIMENT name with --model"),
        Arg("--model", default=None, help=f'display name of the model when RUN is an experiment, e.g. "{example}"'),
        Arg(
            "--run-seed",
            type=int_type(0),
            default=None,
            help="seed of the run when RUN is an experiment (default: lowest)",
        ),
    )


def _plot_folder(plots: str) -> Arg:
    return Arg("--out", default=None, metavar="DIR", help=f"folder for {plots} (default: RESULTS_DIR/EXPERIMENT)")


SPECTRUM = Command(
    "spectrum",
    "eigenvalues of a run's learned state transitions, printed and plotted",
    cmd_analyze_spectrum,
    (
        STORE,
        *_one_run("DeltaNet [-1,1]"),
        INPUTS,
        INPUT_LENGTH,
        Arg("--seed", type=int_type(0), default=0, help="seed of the inputs"),
        _plot_folder("the plot spectrum_RUNID.png"),
    ),
)
ROTATIONS = Command(
    "rotations",
    "a rotation bilinear run's angles per 2-D plane on Z_m, ranked by readout weight, printed and plotted",
    cmd_analyze_rotations,
    (
        STORE,
        *_one_run("Bilinear rotation"),
        Arg("--top", type=int_type(), default=20, help="planes printed (default: 20; the plot shows every plane)"),
        _plot_folder("the plot rotations_RUNID.png"),
    ),
)
SIGNS = Command(
    "signs",
    "a real-diagonal bilinear parity run's dominant coordinate and whether its sign tracks parity at long "
    "lengths (every such run of an EXPERIMENT without --model)",
    cmd_analyze_signs,
    (STORE, *_one_run("Bilinear diagonal frozen norm")),
)
HEADS = Command(
    "heads",
    "a delta-rule run's heads: beta per head, keys' PCA, "
    "and the accuracy lost when one head's beta range is halved, ranked and plotted",
    cmd_analyze_heads,
    (
        STORE,
        *_one_run("DeltaNet [-1,1]"),
        INPUTS,
        INPUT_LENGTH,
        Arg(
            "--seed",
            type=int_type(0),
            default=0,
            help="seed of the inputs (the evaluation set of that seed at --length)",
        ),
        Arg(
            "--sweep",
            type=int_type(),
            default=4,
            help="steps of the gradual beta scaling from x1 to x0.5 in the intervention plot (default: 4)",
        ),
        _plot_folder("the plots heads_RUNID_beta.png, heads_RUNID_keys.png and heads_RUNID_intervention.png"),
    ),
)
BELIEF = Command(
    "belief",
    "a PFSA-SR task's unnormalised belief recurrence: "
    "predicted vs observed float32/float64 underflow, printed and plotted",
    cmd_analyze_belief,
    (
        Arg("task", metavar="TASK", help="a task with a belief recurrence: pfsa"),
        parameters_arg("task parameters, e.g. n=4 noise=0.5 reveal_prob=0.3"),
        Arg(
            "--length",
            type=int_type(high=limits.MAX_LENGTH),
            default=4000,
            help="tokens per sequence (default: 4000, past the float64 underflow at the defaults)",
        ),
        Arg("--samples", type=int_type(), default=64, help="sequences (default: 64)"),
        Arg("--seed", type=int_type(0), default=0, help="seed of the sequences"),
        Arg("--results-dir", default="results", help="folder for the plot (default: results)"),
        Arg(
            "--out",
            default=None,
            metavar="DIR",
            help="folder for the plot belief_TASK_PARAMS.png (default: RESULTS_DIR/belief)",
        ),
    ),
)
SHORTCUT = Command(
    "shortcut",
    "the random state machine's last-k-symbols floor: the accuracy of guessing the final "
    "state from the last k symbols alone, exact",
    cmd_analyze_shortcut,
    (
        parameters_arg("fsm parameters, e.g. states=6 machine_seed=0"),
        Arg(
            "--window",
            type=int_type(),
            default=4,
            help="the longest window k (default: 4, a causal convolution of 4 tokens)",
        ),
    ),
)
ANALYZE = Command(
    "analyze",
    "analyses of trained runs (spectrum, rotations, signs, heads), of a task's belief recurrence (belief) "
    "and of the random machine's shortcut floor (shortcut)",
    dest="analysis",
    actions=(SPECTRUM, ROTATIONS, SIGNS, HEADS, BELIEF, SHORTCUT),
)
