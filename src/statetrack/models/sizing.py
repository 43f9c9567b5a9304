"""Parameter-matched sizing: choose each model's width (d_model) for a budget of parameters per layer.

Anonymous 2025 compares models at about 3M parameters per layer, each at its own width (its
Tables 6-8). `layer_parameters(spec)` counts the trainable parameters of one block of a model (the
mixer, its LayerNorms and the MLP when `mlp`), which does not depend on the task's vocabulary;
`fit_width(spec, params)` returns the spec with the d_model whose count is nearest to `params`.

In an experiment spec (and through `apply_sizing`, which `statetrack.experiments.spec.expand`
calls for each model entry), `params: 3e6` in `model_defaults` or in a model entry asks for that
per-layer budget, and `width: N` is a synonym of `d_model: N`. A run's stored model spec is always
concrete: the chosen d_model, no `params` or `width` key.
"""

from __future__ import annotations

import functools
import json
import math
from dataclasses import dataclass

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from statetrack.errors import StatetrackError
from statetrack.models import zoo

__all__ = [
    "MAX_WIDTH",
    "TOLERANCE",
    "apply_sizing",
    "fit_width",
    "layer_parameters",
    "nearest_width",
    "parse_budget",
    "pass_flops",
    "stack_parameters",
]

TOLERANCE = 0.05  # fit_width's largest relative distance between a layer's count and the budget
MAX_WIDTH = 1 << 16  # widths searched: 1 .. MAX_WIDTH
_SCAN = 256  # widths tried past an unbuildable one before giving up on the next buildable one


# ---- counting ------------------------------------------------------------------------------------
def _trainable(module) -> int:
    return sum(p.numel() for p in module.parameters() if p.requires_grad)


def _build(spec: dict):
    """The SequenceModel of a resolved spec for a 1-token, 1-class task: on the meta device (no memory,
    no arithmetic), or on the CPU when the mixer's construction needs real numbers. A StatetrackError
    (a bad setting, e.g. a width not divisible by the heads) is raised as it is, without a CPU retry."""
    try:
        with torch.device("meta"):
            return zoo.build_model(spec, 1, 1)
    except StatetrackError:
        raise
    except Exception:
        with torch.device("cpu"):
            return zoo.build_model(spec, 1, 1)


@functools.lru_cache(maxsize=16384)
def _cached_count(mixer: type, key: str, d_model: int) -> int | str:
    """Trainable parameters of block 0 at `d_model`, or why it cannot be built (a one-line message; no
    exception is kept, so no traceback holds on to tensors). The mixer class is part of the key, so a
    name registered again to another class is counted afresh."""
    spec = {**json.loads(key), "d_model": d_model, "num_layers": 1}
    try:
        return _trainable(_build(spec).blocks[0])
    except StatetrackError as error:
        return f"model {spec['name']!r}: {error}"
    except Exception as error:  # noqa: BLE001 - an unbuildable width, reported by the caller
        settings = ", ".join(f"{k}={v!r}" for k, v in spec.items() if k not in ("name", "num_layers"))
        return f"model {spec['name']!r} cannot be built with {settings}: {type(error).__name__}: {error}"


def _counter(spec: dict):
    """d_model -> block-0 count (or why it cannot be built) of the resolved `spec` at any width."""
    spec = zoo.resolve(spec)
    rest = {k: v for k, v in spec.items() if k not in ("d_model", "num_layers")}
    key = json.dumps(rest, sort_keys=True, default=repr)
    mixer: type = zoo.get_entry(spec["name"]).mixer  # the class itself is the cache's key
    return lambda d: _cached_count(mixer, key, int(d))


def layer_parameters(spec: dict | str) -> int:
    """Trainable parameters of one block (mixer + its LayerNorms + MLP when `mlp`) of the model `spec`,
    counted like SequenceModel.num_parameters (requires_grad only); independent of the vocabulary
    and of num_layers. The first block is counted: a `FrozenInput` mixer (`layers.registry`) freezes its norm."""
    spec = zoo.resolve(spec)
    count = _counter(spec)(spec["d_model"])
    if isinstance(count, str):
        raise StatetrackError(count)
    return count


def stack_parameters(spec: dict | str) -> int:
    """Trainable parameters of all num_layers blocks of the model `spec` (no embedding, final norm or readout)."""
    spec = zoo.resolve(spec)
    layer_parameters(spec)  # a model that cannot be built is a one-line error
    model = _build(spec)
    return sum(_trainable(block) for block in model.blocks)


# ---- passes on the meta device ------------------------------------------------------------------
TRACE_BATCH, TRACE_LENGTH = 5, 7  # a batch and a length no width shares, so a per-token tensor is told apart
MAX_READS = 10_000  # values a traced pass may read before it is given up (a loop that never ends on zeros)


class ReadsValues(Exception):
    """A pass on the meta device needed a tensor's value (`.item()`, a loop's stopping test)."""


_PRODUCTS = tuple(
    getattr(torch.ops.aten, name).default for name in ("mm", "addmm", "bmm", "baddbmm")
)  # matrix products (what torch.matmul, einsum and nn.Linear come down to)


class _Shapes(TorchDispatchMode):
    """Runs a layer's pass on the meta device and keeps its widest projection: the most bytes per
    token of a tensor in the layout [B, T, ...] that a matrix product with one of the layer's weights
    (or a view of one) makes, or a view of such a product: the widths its settings ask for (a
    dictionary of N x N matrices mixed per token, an expanded inner width, many heads). What other
    operations make from them (a scan's [B, T, d, N] inside, which the compiled kernels never form)
    is left out, so the estimate errs low. With `answer_reads`, a value the pass reads is zero
    (false) and a copy to the CPU is zeros of its shape, so that a data-dependent loop (a fixed-point
    iteration, Sinkhorn) ends at once and a range check passes; without it, a read raises `ReadsValues`."""

    def __init__(self, answer_reads: bool, weights=()):
        super().__init__()
        self.answer_reads, self.reads, self.widest = answer_reads, 0, 0
        self.weights = {id(w): w for w in weights}  # the layer's weights and their views (kept: ids stay unique)
        self.projections: dict[int, torch.Tensor] = {}  # what ops on them make, and views of that

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is torch.ops.aten._local_scalar_dense.default:
            if not self.answer_reads:
                raise ReadsValues(func)
            self.reads += 1
            if self.reads > MAX_READS:
                raise ReadsValues(f"more than {MAX_READS} reads")
            dtype = args[0].dtype
            return False if dtype == torch.bool else 0.0 if dtype.is_floating_point or dtype.is_complex else 0
        if func is torch.ops.aten._to_copy.default and str(kwargs.get("device", "meta")) != "meta":
            if not self.answer_reads or args[0].numel() > 2**20:
                raise ReadsValues(func)
            return torch.zeros(args[0].shape, dtype=kwargs.get("dtype") or args[0].dtype, device=kwargs["device"])
        out = func(*args, **kwargs)
        inputs = [id(t) for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)]
        view = func.is_view or func is torch.ops.aten._unsafe_view.default
        on_weights = any(i in self.weights for i in inputs)
        product = func in _PRODUCTS and on_weights
        of_projection = view and any(i in self.projections for i in inputs)
        for tensor in tree_flatten(out)[0]:
            if not isinstance(tensor, torch.Tensor):
                continue
            if view and on_weights:
                self.weights[id(tensor)] = tensor
            elif product or of_projection:
                self.projections[id(tensor)] = tensor
                if tuple(tensor.shape[:2]) == (TRACE_BATCH, TRACE_LENGTH):
                    per_token = tensor.numel() * tensor.element_size() // (TRACE_BATCH * TRACE_LENGTH)
                    self.widest = max(self.widest, per_token)
        return out


def token_bytes(spec: dict | str) -> int | None:
    """Bytes per token of the widest projection one layer of the model `spec` makes in its forward
    pass (`_Shapes`: PD-SSM's N x N transitions, Mamba-3's expanded width, RWKV-7's heads): what its
    memory grows by with each token beyond the width d_model. Measured once per setting on the meta
    device (shapes only: no memory, no arithmetic); None where the layer cannot be traced there (the
    estimate then rests on d_model alone)."""
    spec = zoo.resolve(spec)
    rest = {k: v for k, v in spec.items() if k != "num_layers"}
    mixer: type = zoo.get_entry(spec["name"]).mixer  # the class itself is the cache's key
    return _token_bytes(mixer, json.dumps(rest, sort_keys=True, default=repr))


@functools.lru_cache(maxsize=4096)
def _token_bytes(mixer: type, key: str) -> int | None:
    spec = json.loads(key)
    settings = {k: v for k, v in spec.items() if k != "name" and k not in zoo.MODEL_DEFAULTS}
    try:
        with torch.random.fork_rng(devices=[]), torch.device("meta"):
            layer = mixer(spec["d_model"], **settings)
            x = torch.zeros(TRACE_BATCH, TRACE_LENGTH, spec["d_model"])
            with _Shapes(True, [*layer.parameters(), *layer.buffers()]) as shapes:
                layer(x)
    except Exception:  # noqa: BLE001 - no trace: a user's mixer that fails is named by its own check
        return None
    return shapes.widest


# ---- arithmetic ----------------------------------------------------------------------------------
FLOP_BATCH = 4  # sequences per counted pass; FLOPs are linear in the batch


def pass_flops(model: dict, task: dict, length: int, backward: bool = True, device: str = "meta") -> float:
    """FLOPs per sequence of one pass of the model `model` on the task `task` at `length`: forward,
    and backward when `backward`, as torch's FLOP counter sees them (matrix products). On the meta
    device by default: shapes only, no memory, every recurrence in its PyTorch form; a mixer whose pass
    reads its values (a fixed-point iteration, a stopping test) is counted on the CPU instead, once
    its memory is checked (`limits.check_memory`), with its initial weights, so a fixed-point model
    iterates as an untrained one. `device="cpu"`: the pass the CPU runs (its compiled kernels and
    fused attention not counted). Cached per (model, task, length, backward, device)."""
    return _pass_flops(
        json.dumps(zoo.resolve(model), sort_keys=True, default=repr),
        json.dumps(task, sort_keys=True),
        int(length),
        bool(backward),
        device,
    )


@functools.lru_cache(maxsize=4096)
def _pass_flops(model: str, task: str, length: int, backward: bool, device: str) -> float:
    from torch.utils.flop_counter import FlopCounterMode

    from statetrack.tasks import make_task

    spec = json.loads(model)
    task_object = make_task(**json.loads(task))
    sample = task_object.sample(FLOP_BATCH, length, torch.Generator().manual_seed(0))
    if device == "meta":
        try:
            with torch.device("meta"):
                net = zoo.build_model(spec, task_object.vocab_size, task_object.num_classes).train(backward)
            with FlopCounterMode(display=False) as counter, torch.set_grad_enabled(backward), _Shapes(False):
                out = net(sample.inputs.to("meta"))[0]
                if backward:
                    out.sum().backward()  # the loss's own arithmetic is no matrix product
            return counter.get_total_flops() / FLOP_BATCH
        except Exception:  # noqa: BLE001 - values read (or a user's mixer that fails): counted on the CPU
            pass
    _check_pass_memory(spec, length, backward)
    try:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(0)
            net = zoo.build_model(spec, task_object.vocab_size, task_object.num_classes).train(backward)
            with FlopCounterMode(display=False) as counter, torch.set_grad_enabled(backward):
                out = net(sample.inputs)[0]
                if backward:
                    task_object.loss(out, sample)[0].backward()
    except StatetrackError:
        raise
    except Exception as error:  # a user's mixer that fails only here: one line, not the driver's traceback
        raise StatetrackError(
            f"model {spec['name']!r}: a pass at length {length} failed while counting its arithmetic: "
            f"{type(error).__name__}: {error}"
        ) from None
    return counter.get_total_flops() / FLOP_BATCH


def _check_pass_memory(spec: dict, length: int, backward: bool) -> None:
    """Refuse, in one line, a counting pass on the CPU that would not fit in memory."""
    from statetrack import limits

    params = stack_parameters(spec)
    need = limits.pass_bytes(params, spec, FLOP_BATCH, length, token_bytes(spec) or 0, training=backward)
    limits.check_memory(need, f"model {spec['name']!r}: counting its arithmetic at length {length}")


# ---- fitting -------------------------------------------------------------------------------------
def parse_budget(value, origin: str = "params") -> float:
    """A per-layer parameter budget: a positive number, or a numeric string such as "3e6" (YAML reads
    `3e6` without a dot as a string)."""
    number = value
    if isinstance(value, str):
        try:
            number = float(value.strip().replace("_", ""))
        except ValueError:
            number = None
    if isinstance(number, bool) or not isinstance(number, (int, float)) or not math.isfinite(number) or number <= 0:
        raise StatetrackError(f"{origin} must be a positive number of parameters per layer (e.g. 3e6), got {value!r}")
    return float(number)


def _check_width(value, origin: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise StatetrackError(f"{origin}: width must be a positive integer (a synonym of d_model), got {value!r}")
    return value


def nearest_width(spec: dict | str, params: float) -> tuple[dict, int]:
    """(the resolved spec at the buildable d_model whose per-layer count is nearest to `params`, that count),
    however far from the budget it is. Widths that cannot be built (e.g. not divisible by the heads)
    are skipped. Counts grow with d_model (about quadratically): the first width whose count reaches
    the budget is found by doubling and bisection, then its buildable neighbours are compared."""
    params = parse_budget(params)
    spec = zoo.resolve(spec)
    count = _counter(spec)
    errors: list[str] = []

    def buildable(d: int, step: int) -> int | None:
        """The first buildable width from d in direction step (+1 or -1), or None."""
        for _ in range(_SCAN):
            if not 1 <= d <= MAX_WIDTH:
                return None
            c = count(d)
            if not isinstance(c, str):
                return d
            errors.append(c)
            d += step
        return None

    def reaches(d: int) -> bool:  # the next buildable width from d has at least `params` parameters
        b = buildable(d, +1)
        return b is None or count(b) >= params

    low = buildable(1, +1)
    if low is None:
        raise StatetrackError(
            f"model {spec['name']!r} cannot be built at any d_model from 1 to {min(_SCAN, MAX_WIDTH)}; "
            f"at {min(_SCAN, MAX_WIDTH)}: {errors[-1]}"
        )
    if count(low) >= params:
        high = low
    else:  # count(low) < params: double until the budget is reached, then bisect (low misses, high reaches)
        high = low * 2
        while high < MAX_WIDTH and not reaches(high):
            low, high = high, high * 2
        high = min(high, MAX_WIDTH)
        while high - low > 1:
            mid = (low + high) // 2
            low, high = (low, mid) if reaches(mid) else (mid, high)
    first = buildable(high, +1) or buildable(high, -1) or low
    candidates = [first]
    for step in (+1, -1):  # two buildable widths on each side: counts are not always strictly monotone
        d: int | None = first
        for _ in range(2):
            d = buildable(d + step, step) if d is not None else None
            if d is not None:
                candidates.append(d)
    best = min(candidates, key=lambda d: (abs(count(d) - params), d))
    return {**spec, "d_model": best}, count(best)


def fit_width(spec: dict | str, params) -> dict:
    """The resolved `spec` with the d_model whose trainable parameters per layer (`layer_parameters`) are
    nearest to the budget `params`; a StatetrackError when no width comes within 5% (TOLERANCE)."""
    budget = parse_budget(params)
    fitted, count = nearest_width(spec, budget)
    if abs(count - budget) > TOLERANCE * budget:
        raise StatetrackError(
            f"model {fitted['name']!r} ({zoo.display_name(fitted)}): "
            f"no d_model gives {budget:,.0f} parameters per layer within {TOLERANCE:.0%}; "
            f"nearest: d_model {fitted['d_model']} with {count:,} ({count / budget - 1:+.1%})"
        )
    return fitted


# ---- spec keys -----------------------------------------------------------------------------------
def _sizing_keys(entry: dict, origin: str) -> dict:
    """`entry` with `width` renamed d_model; conflicting keys in one entry are an error."""
    entry = dict(entry)
    if "width" in entry and "d_model" in entry:
        raise StatetrackError(f"{origin}: give either 'width' or 'd_model' (they are synonyms), not both")
    if "params" in entry:
        sizes = [k for k in ("d_model", "width") if k in entry]
        if sizes:
            raise StatetrackError(
                f"{origin}: give either 'params' (a per-layer parameter budget, which chooses d_model) "
                f"or {sizes[0]!r}, not both"
            )
        parse_budget(entry["params"], f"{origin}: params")
    if "width" in entry:
        entry["d_model"] = _check_width(entry.pop("width"), origin)
    return entry


def apply_sizing(entry: dict | str, defaults: dict | None = None) -> dict:
    """The resolved model spec of an experiment's model `entry` with `model_defaults` `defaults` merged in
    (the entry wins), its width settled:

    - `width: N` (in either) is `d_model: N`; `width` with `d_model`, or `params` with either, in the
      same mapping is an error;
    - the entry's own `d_model`/`width` overrides a default `params`, and its own `params` a default
      `d_model`/`width`;
    - `params: B` (a number, or a numeric string such as "3e6") chooses d_model by `fit_width`.

    The result has a concrete d_model and no `params` or `width` key.
    """
    if not isinstance(entry, (str, dict)):
        raise StatetrackError(
            f"a model entry must be a model name or a mapping {{name: ..., settings...}}, got {entry!r}"
        )
    entry = {"name": entry} if isinstance(entry, str) else dict(entry)
    label = f"model {entry['name']!r}" if "name" in entry else f"model {entry!r}"
    own = _sizing_keys(entry, label)
    defaults = _sizing_keys(defaults or {}, "model_defaults")
    if "d_model" in own or "params" in own:
        defaults = {k: v for k, v in defaults.items() if k not in ("d_model", "params")}
    merged = {**defaults, **own}
    budget = merged.pop("params", None)
    if budget is None:
        return zoo.resolve(merged)
    return fit_width(merged, budget)


@dataclass
class SizesTable:
    """`statetrack models --params B` / `--width N`: a title, one row per model and the notes."""

    title: str
    header: list[str]
    body: list[list[str]]
    notes: list[str]  # models no width brings within TOLERANCE of the budget
    failed: list[str]  # models the settings cannot build, with the error


def sizes_table(
    names: list[str], settings: dict, budget: float | None, width: int | None, num_layers: int | None
) -> SizesTable:
    """Per-layer parameter counts of the models `names`: at the d_model nearest `budget` parameters
    per layer, else at d_model `width`; `settings` apply to each model that has the key (the width
    keys excepted), and `num_layers` adds a column for the whole stack."""
    for key in ("d_model", "width", "params"):
        if key in settings:
            raise StatetrackError(f"--set {key}: the width comes from --params BUDGET or --width N")
    specs: list[dict] = []
    used: set[str] = set()  # the settings some listed model has
    for name in names:
        known = zoo.resolve(name)  # unknown names and presets: as in a spec
        own = {k: v for k, v in settings.items() if k in known and k != "name"}
        used.update(own)
        specs.append({"name": name, **own, **({} if num_layers is None else {"num_layers": num_layers})})
    unused = [k for k in settings if k not in used]
    if unused:
        raise StatetrackError(
            f"--set {unused[0]}: none of the listed models has a parameter {unused[0]!r} (see `statetrack models`)"
        )
    header = (
        ["model", "display name", "d_model", "per layer"]
        + (["vs budget"] if budget is not None else [])
        + ([f"{num_layers} layers"] if num_layers is not None else [])
    )
    body: list[list[str]] = []
    notes: list[str] = []
    failed: list[str] = []
    for name, spec in zip(names, specs):
        try:
            if budget is not None:
                spec, count = nearest_width(spec, budget)
            else:
                spec = zoo.resolve({**spec, "d_model": width})
                count = layer_parameters(spec)
        except StatetrackError as error:
            blanks = (["-"] if budget is not None else []) + (["-"] if num_layers is not None else [])
            body.append([name, zoo.display_name(spec), "-", "-", *blanks])
            failed.append(f"{name}: {error}")
            continue
        row = [name, zoo.display_name(spec), str(spec["d_model"]), f"{count:,}"]
        if budget is not None:
            deviation = count / budget - 1
            far = abs(deviation) > TOLERANCE
            row.append(f"{deviation:+.2%}" + (" *" if far else ""))
            if far:
                notes.append(
                    f"{name}: * no d_model comes within {TOLERANCE:.0%} of the budget; "
                    "`params:` in a spec would refuse it"
                )
        if num_layers is not None:
            row.append(f"{stack_parameters(spec):,}")
        body.append(row)
    counted = "(mixer, LayerNorms and MLP; embedding and readout not counted)"
    title = (
        f"d_model nearest to {budget:,.0f} trainable parameters per layer {counted}"
        if budget is not None
        else f"trainable parameters per layer at d_model {width} {counted}"
    )
    return SizesTable(title, header, body, notes, failed)
