"""`statetrack models [MODEL ...]`: the registered models, their parameters and presets; `--params` /
`--width`: their parameters per layer (statetrack.models.sizing)."""

from __future__ import annotations

from statetrack import limits
from statetrack.cli.common import Arg, Command, OneOf, int_type, parse_params, print_json
from statetrack.errors import StatetrackError


def cmd_models(args) -> int:
    from statetrack.models import zoo

    if args.budget is not None or args.width is not None:
        if args.json:
            raise StatetrackError("models: --json lists the models; it does not go with --params or --width")
        return _model_sizes(args)
    if args.settings or args.num_layers is not None:
        raise StatetrackError(
            "models: --set and --num-layers go with --params BUDGET or --width N "
            "(e.g. statetrack models --params 3e6 --num-layers 2)"
        )
    names = [zoo.resolve(name)["name"] for name in args.names] or list(zoo.MODELS)  # presets: their model
    if args.json:
        return print_json(
            [
                {
                    "name": name,
                    "display_name": zoo.display_name(name),
                    "summary": entry.summary,
                    "recurrent": entry.recurrent,
                    "parameters": zoo.mixer_parameters(name),
                    "stack_defaults": {**zoo.MODEL_DEFAULTS, **entry.stack_defaults},
                    "presets": {k: v for k, v in zoo.PRESETS.items() if v["name"] == name},
                }
                for name, entry in zoo.MODELS.items()
                if name in names
            ]
        )
    _print_models(names, every=not args.names)
    return 0


def _print_models(names: list[str], every: bool) -> None:
    """The models `names` with their summaries and parameters; `every`: the common parameters and the
    presets after them."""
    from statetrack.models import zoo

    width = max(map(len, zoo.MODELS)) + 2
    for name, entry in zoo.MODELS.items():
        if name not in names:
            continue
        params = ", ".join(f"{k}={v!r}" for k, v in zoo.mixer_parameters(name).items()) or "-"
        print(f"{name:{width}s}{entry.summary}\n{'':{width}s}parameters: {params}")
        if entry.stack_defaults:
            own = ", ".join(f"{k}={v!r}" for k, v in entry.stack_defaults.items())
            print(f"{'':{width}s}stack defaults of its own (its published form): {own}")
    if not every:
        return
    print(
        f"\ncommon parameters: {', '.join(f'{k}={v!r}' for k, v in zoo.MODEL_DEFAULTS.items())} "
        f"(a model's stack defaults of its own, listed with it, replace these)"
    )
    print("presets: " + ", ".join(f"{k} = {v}" for k, v in zoo.PRESETS.items()))


def _model_sizes(args) -> int:
    """`models --params B` / `--width N`: per-layer parameter counts, one row per model (statetrack.models.sizing)."""
    from statetrack.models import sizing, zoo
    from statetrack.results.tables import text_table

    budget = None if args.budget is None else sizing.parse_budget(args.budget, "--params")
    if args.width is not None and args.width < 1:
        raise StatetrackError(f"--width must be >= 1, got {args.width}")
    if args.num_layers is not None and args.num_layers < 1:
        raise StatetrackError(f"--num-layers must be >= 1, got {args.num_layers}")
    if budget is not None:  # a model of that size must fit in memory to be trained
        layers = args.num_layers or 1
        limits.check_parameters(budget * layers, f"models: --params {args.budget} per layer x {layers} layer(s)")
    table = sizing.sizes_table(
        args.names or list(zoo.MODELS), parse_params(args.settings or []), budget, args.width, args.num_layers
    )
    print(table.title)
    print(text_table(table.header, table.body))
    for note in table.notes:
        print(note)
    if table.failed:  # the table shows the others; the settings that fail a model are the command's error
        raise StatetrackError("; ".join(table.failed))
    return 0


MODELS = Command(
    "models",
    "list models, their parameters and presets; --params/--width: parameters per layer",
    cmd_models,
    (
        Arg(
            "names",
            nargs="*",
            default=[],
            metavar="MODEL",
            help="only these models or presets (default: every registered model)",
        ),
        OneOf(
            (
                Arg(
                    "--params",
                    dest="budget",
                    default=None,
                    metavar="BUDGET",
                    help="choose each model's d_model for this many trainable parameters per layer (e.g. 3e6), "
                    "and print it",
                ),
                Arg(
                    "--width",
                    type=int_type(high=limits.MAX_WIDTH),
                    default=None,
                    metavar="N",
                    help="print each model's parameters per layer at d_model N",
                ),
            )
        ),
        Arg(
            "--num-layers",
            type=int_type(high=limits.MAX_LAYERS),
            default=None,
            metavar="N",
            help="with --params or --width: also count all N layers",
        ),
        Arg(
            "--set",
            dest="settings",
            nargs="+",
            action="extend",
            default=None,
            metavar="key=value",
            help="with --params or --width: model settings, applied to each model that has the key "
            "(e.g. mlp=false num_heads=4)",
        ),
        Arg(
            "--json",
            action="store_true",
            help="a JSON list, one object per model: name, display_name, summary, recurrent, "
            "parameters (with their defaults), stack_defaults (d_model, num_layers, "
            "mlp for this model), presets",
        ),
    ),
)
