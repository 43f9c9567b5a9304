"""The experiment spec's schema: every section's keys, types and ranges, in one place (pydantic).

A spec is validated here section by section: the top level (`Spec`), `train` (`TrainConfig`, which
is also the Python API's training settings, and its curriculum `Stage`s), `eval` (`Eval`),
`selection` (`Selection`) and `paper` with its claims (`Paper`, `Claim`). Every violation is one
line naming its key path, e.g. `experiment 'demo': train.steps must be an integer >= 1, got 0`.
Beside the selection rule sits what its `criterion` means for one run, `run_score` (and the
extrapolation length it reads), so the trackers and the report score a run by one definition.

What a model or a task accepts is not restated here: a model entry is a name and the parameters of
its mixer's signature, a task entry a name and its class's signature, checked when built
(statetrack.models.zoo, statetrack.tasks); `statetrack schema` writes them into the JSON Schema from the
registries (statetrack.catalog.spec_json_schema), so an editor completes them too.
"""

from __future__ import annotations

import math
import re
import statistics
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Annotated, Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, WithJsonSchema, field_validator, model_validator
from pydantic.functional_validators import PlainValidator
from pydantic.json_schema import SkipJsonSchema

from statetrack.checks import CHECKS
from statetrack.errors import StatetrackError
from statetrack.limits import MAX_FLOAT, MAX_INT
from statetrack.paths import ALLOWED_NAMES, NAME_MAX, NAME_PATTERN, check_name

if TYPE_CHECKING:
    import torch

SCALES = ("quick", "paper")  # every shipped spec has both: `quick` (CPU minutes) and `paper` (the papers' sizes)
# Valid values of each selection setting, the default first (statetrack.results.selection applies them).
SELECTION_CHOICES = {
    "lr": ("best_mean", "best_max"),  # the lr whose mean / best seed scores highest
    "seeds": ("mean", "max"),  # the headline figure: mean over seeds, or the best seed
    "criterion": ("mean_scaled", "extrapolation"),  # a run's score (run_score, below)
    "metric": ("accuracy", "sequence_accuracy"),  # what the threshold of `extrapolation` applies to
}
SELECTION_DEFAULTS: dict[str, Any] = {**{k: v[0] for k, v in SELECTION_CHOICES.items()}, "threshold": 0.9}
MEASURES = ("scaled", "sequence", "extrapolation")  # what a measured figure is (statetrack.results.claims.measured)
# How a claim's per-seed outcomes become its verdict: every seed, more than half, or the best seed
# (`best` only where the paper itself reports a best-of-seeds figure; the book says so).
SEED_RULES = ("majority", "all", "best")
FIT_THRESHOLD = 0.9  # the in-distribution figure a model must reach before its extrapolation is read
# At the quick scale a run stops once its held-out figure at the longest training length reaches this
# (train.early_stop_fit): above every fit gate, so a run that stopped is fitted with a margin, and the
# budget a fitted run leaves is what lets the unfitted ones train longer.
STOP_FIT = 0.99
# ... and once its held-out loss there is below this (train.early_stop_fit_loss): converged, not only
# right. Stopping at the first validation at STOP_FIT alone cut extrapolation short (DeltaProduct on S3
# at 4x the training length, bilinear models at 50x), which converging first does not.
STOP_LOSS = 1e-3
FIT_MEASURES = ("scaled", "sequence")  # what train.early_stop_fit reads
# why a claim is ✗ or inconclusive: its `reason` starts with one of these
REASONS = ("a genuine result at this scale", "the paper's protocol", "the budget")
REASON_WORDS = 40  # a reason is one line of a table
CLAIM_TESTS = ("at_least", "below", "beats")  # measured >= x; measured < x; measured > that model's on the same task
# The evaluation settings every run's id holds; `variants` and `traces` are part of it only where given.
EVAL_DEFAULTS: dict[str, Any] = {"lengths": [], "samples": 512, "batch_size": 256, "chunk_size": 1024, "seed": 0}


# ---- errors: one line naming the key path -------------------------------------------------------


def _path(loc: tuple) -> str:
    """('train', 'curriculum', 0, 'steps') -> 'train.curriculum[0].steps'."""
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def one_line(error: ValidationError, where: str = "", root: tuple = ()) -> str:
    """The first violation of `error` in words: `where` (e.g. "experiment 'demo': "), then the key
    path (under `root`, the validated section's own path, e.g. ('train',))."""
    first = error.errors(include_url=False)[0]
    path, kind, ctx, got = _path(root + tuple(first["loc"])), first["type"], first.get("ctx") or {}, first.get("input")
    if isinstance(ctx.get("error"), Violation):  # ours: its own kind and words
        kind, ctx = ctx["error"].kind, ctx["error"].ctx
    if kind == "expected":
        text = f"{path} must be {ctx['expected']}, got {got!r}"
    elif kind == "choice":
        text = f"unknown {path} {got!r}; expected one of: {ctx['choices']}"
    elif kind == "unknown_key":
        text = (f"{path}: " if path else "") + f"unknown key {ctx['key']!r}; expected one of: {ctx['known']}"
    elif kind == "rule":
        text = (f"{path}: " if path else "") + ctx["text"]
    elif kind == "missing":
        text = f"{path} is required"
    elif kind == "too_short":
        text = f"{path} must be a non-empty list, got {got!r}"
    elif kind == "list_type":  # a scalar where a list belongs: YAML's flow list, quoted for the shell
        text = f"{path} must be a list such as [{got}] (on the command line, quoted: '{path}=[{got}]'), got {got!r}"
    elif kind in ("model_type", "model_attributes_type", "dict_type"):
        text = f"{path or 'the spec'} must be a mapping of settings, got {got!r}"
    else:  # pydantic's own wording, e.g. a list that is not one
        text = f"{path}: {first['msg']}, got {got!r}"
    return where + text


class Violation(ValueError):
    """A value the schema refuses, as `kind` (expected, choice, unknown_key, rule) with the words
    `one_line` needs (`ctx`)."""

    def __init__(self, kind: str, **ctx):
        super().__init__(kind)
        self.kind, self.ctx = kind, ctx


def _expected(text: str) -> Violation:
    return Violation("expected", expected=text)


def _rule(text: str) -> Violation:
    return Violation("rule", text=text)


# ---- value types: a check with its words and its JSON Schema ------------------------------------


REFUSED = object()
# far above any rate AdamW trains with; near float32's largest a rate overflows in its first step
# (it divides by 1 - beta1)
MAX_LR = 10.0


def _is_int(value, low: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and low <= value <= MAX_INT


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


class Check:
    """A value type's validator and its JSON Schema, given as `Annotated[int, integer(1)]`: pydantic
    unpacks it into the two, as it does any annotated_types.GroupedMetadata (a protocol: an iterable
    with this flag), so the annotation names the Python type and mypy reads it."""

    __is_annotated_types_grouped_metadata__ = True

    def __init__(self, validate: Callable[[Any], Any], schema: dict):
        self.parts = (PlainValidator(validate), WithJsonSchema(schema))

    def __iter__(self) -> Iterator[Any]:
        return iter(self.parts)


def _value(check: Callable[[Any], Any], expected: str, schema: dict) -> Check:
    """The check of a type (`Annotated[base, _value(...)]`), by `check`: value -> the value to keep
    (None included), or REFUSED, which is an error saying the value must be `expected`."""

    def validate(value):
        kept = check(value)
        if kept is REFUSED:
            too_large = isinstance(value, int) and not isinstance(value, bool) and value > MAX_INT
            raise _expected(f"{expected}, at most {MAX_INT} (64 bits)" if too_large else expected)
        return kept

    return Check(validate, schema)


def integer(low: int, null: str | None = None) -> Check:
    """An integer >= low; with `null`, also null, which means `null` (said in the message)."""
    expected = f"an integer >= {low}" + (f" (or null: {null})" if null else "")
    schema = {"type": "integer", "minimum": low, "maximum": MAX_INT}
    return _value(
        lambda v: v if _is_int(v, low) or (null and v is None) else REFUSED,
        expected,
        {"anyOf": [schema, {"type": "null"}]} if null else schema,
    )


def number(low: float, *, strict: bool = True, high: float | None = None, text: bool = False) -> Check:
    """A finite number > low (>= low when not `strict`), <= high if given, and within float32's
    range (it reaches the model's float32 arithmetic); with `text`, also a text
    that reads as one (YAML reads `1e-3`, no dot, as a string), kept as a float."""

    def check(value):
        if text and isinstance(value, str):
            try:
                value = float(value)
            except ValueError:
                return REFUSED
        if not _is_number(value) or (value <= low if strict else value < low) or (high is not None and value > high):
            return REFUSED
        if abs(value) > MAX_FLOAT:
            raise _expected(f"{expected}, at most {MAX_FLOAT:.4g} (float32's largest)")
        return float(value) if text else value

    if high is not None:
        expected = f"a number in ({low:g}, {high:g}]"
    else:
        expected = f"a number {'>' if strict else '>='} {low:g}"
    schema = {
        "type": "number",
        "exclusiveMinimum" if strict else "minimum": low,
        "maximum": MAX_FLOAT if high is None else high,
    }
    return _value(check, expected, {"anyOf": [schema, {"type": "string"}]} if text else schema)


def choice(values: tuple) -> Check:
    """One of `values` (the first is the default where a field has one)."""

    def validate(value):
        if not isinstance(value, str) or value not in values:
            raise Violation("choice", choices=", ".join(values))
        return value

    return Check(validate, {"enum": list(values)})


def int_list(low: int) -> Check:
    """A non-empty list of integers >= low."""
    return _value(
        lambda v: v if isinstance(v, list) and v and all(_is_int(n, low) for n in v) else REFUSED,
        f"a non-empty list of integers >= {low}",
        {"type": "array", "items": {"type": "integer", "minimum": low, "maximum": MAX_INT}, "minItems": 1},
    )


AnyNumber = Annotated[Any, _value(lambda v: v if _is_number(v) else REFUSED, "a number", {"type": "number"})]
Boolean = Annotated[bool, _value(lambda v: v if isinstance(v, bool) else REFUSED, "true or false", {"type": "boolean"})]
Text = Annotated[
    str,
    _value(
        lambda v: " ".join(v.split()) if isinstance(v, str) and v.strip() else REFUSED,
        "a non-empty text",
        {"type": "string", "minLength": 1},
    ),
]
Names = Annotated[
    list,
    _value(
        lambda v: (
            [v]
            if isinstance(v, str) and v
            else v
            if isinstance(v, list) and v and all(isinstance(n, str) and n for n in v)
            else REFUSED
        ),
        "a name or a non-empty list of names",
        {"anyOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}, "minItems": 1}]},
    ),
]
LengthRange = Annotated[
    Any,
    _value(
        lambda v: (
            v
            if _is_int(v, 1) or (isinstance(v, list) and len(v) == 2 and all(_is_int(n, 1) for n in v) and v[0] <= v[1])
            else REFUSED
        ),
        "a test length or [shortest, longest]",
        {
            "anyOf": [
                {"type": "integer", "minimum": 1},
                {"type": "array", "items": {"type": "integer", "minimum": 1}, "minItems": 2, "maxItems": 2},
            ]
        },
    ),
]
Measure = Annotated[
    str,
    _value(
        lambda v: (
            v
            if v in MEASURES
            or (isinstance(v, str) and v.startswith("metric:") and len(v) > len("metric:"))
            or (isinstance(v, str) and v.removeprefix("check:") in CHECKS and v.startswith("check:"))
            else REFUSED
        ),
        f"one of: {', '.join(MEASURES)}, metric:NAME for a metric the runs report (e.g. metric:tv_distance), "
        f"or check:NAME for a figure computed without training ({', '.join(sorted(CHECKS))})",
        {
            "anyOf": [
                {"enum": list(MEASURES) + [f"check:{name}" for name in sorted(CHECKS)]},
                {"type": "string", "pattern": "^metric:.+"},
            ]
        },
    ),
]


def _figures(value):
    """{model: figure} or {task: {model: figure}}, a figure a number or a short text."""
    if not isinstance(value, dict):
        raise _expected("a mapping from model names to figures (or from task names to such mappings)")
    per_task = any(isinstance(v, dict) for v in value.values())
    for key, by_model in value.items() if per_task else [(None, value)]:
        if not isinstance(by_model, dict):
            raise _rule(f"give every figure per model or every one per task; {key!r} maps to {by_model!r}")
        for model, figure in by_model.items():
            if not (_is_number(figure) or (isinstance(figure, str) and figure)):
                raise _rule(f"the figure of {model!r} must be a number or a short text, got {figure!r}")
    return value


_FIGURE = {"anyOf": [{"type": "number"}, {"type": "string", "minLength": 1}]}
Figures = Annotated[
    dict,
    PlainValidator(_figures),
    WithJsonSchema(
        {
            "type": "object",
            "additionalProperties": {"anyOf": [_FIGURE, {"type": "object", "additionalProperties": _FIGURE}]},
        }
    ),
]
Mapping = Annotated[dict, _value(lambda v: v if isinstance(v, dict) else REFUSED, "a mapping", {"type": "object"})]


DEVICE_TYPES = (
    "cpu",
    "cuda",
)  # what statetrack trains on; torch names more (meta, mps, xpu) that its ops do not support


def parse_device(value) -> torch.device | None:
    """`value` ('cpu', 'cuda' or 'cuda:N') as a torch device; None for any other value, 'auto' included."""
    import torch  # here, so that the command line reads the schema's names without loading torch

    try:
        device = torch.device(value)
    except (RuntimeError, TypeError):
        return None
    return device if device.type in DEVICE_TYPES else None


def _device(value):
    return value if value == "auto" or (isinstance(value, str) and parse_device(value) is not None) else REFUSED


Device = Annotated[
    str,
    _value(
        _device,
        "a device: auto, cpu, cuda or cuda:N",
        {"type": "string", "examples": ["auto", "cpu", "cuda", "cuda:0"]},
    ),
]
Betas = Annotated[
    tuple,
    _value(
        lambda v: (
            tuple(v)
            if isinstance(v, (list, tuple)) and len(v) == 2 and all(_is_number(b) and 0 <= b < 1 for b in v)
            else REFUSED
        ),
        "two numbers in [0, 1), e.g. [0.9, 0.999]",
        {
            "type": "array",
            "items": {"type": "number", "minimum": 0, "exclusiveMaximum": 1},
            "minItems": 2,
            "maxItems": 2,
        },
    ),
]


# ---- sections -----------------------------------------------------------------------------------


class Section(BaseModel):
    """A mapping of settings with a fixed set of keys; an unknown one is named with the valid ones."""

    model_config = ConfigDict(extra="forbid", validate_default=False)
    _root: ClassVar[tuple] = ()  # the section's key path in a spec, where it is validated on its own
    _expected_keys: ClassVar[str | None] = None  # the keys in words, where a list of names says too little
    _moved: ClassVar[dict[str, str]] = {}  # keys that are no setting here -> where they are given instead

    @classmethod
    def check(cls, data, where: str = "", root: tuple | None = None):
        """`data` validated: a one-line StatetrackError, `where` then the key path (under `root`,
        by default the section's own)."""
        try:
            return cls.model_validate(data)
        except ValidationError as error:
            raise StatetrackError(one_line(error, where, cls._root if root is None else root)) from None

    @model_validator(mode="before")
    @classmethod
    def _known_keys(cls, data):
        if isinstance(data, dict):
            for key in data:
                if key in cls._moved:
                    raise _rule(cls._moved[key])
            known = [
                name for name, f in cls.model_fields.items() if not f.exclude
            ]  # listed; excluded ones are internal
            for key in data:
                if key not in cls.model_fields:
                    raise Violation("unknown_key", key=key, known=cls._expected_keys or ", ".join(known))
        return data


class Stage(Section):
    """One curriculum stage: its steps, its lengths and the task parameters it changes."""

    _expected_keys = (
        "steps, length or min_length/max_length, task (e.g. [{steps: 500, length: 8, task: {spacing: 1}}, ...])"
    )
    steps: Annotated[int, integer(1)] = Field(description="steps trained in this stage")
    length: Annotated[int, integer(1)] | None = Field(default=None, description="the one training length of the stage")
    min_length: Annotated[int, integer(1)] | None = Field(
        default=None, description="shortest training length (default: train.min_length)"
    )
    max_length: Annotated[int, integer(1)] | None = Field(
        default=None, description="longest training length (default: train.max_length)"
    )
    task: Mapping = Field(default_factory=dict, description="task parameters changed in this stage, e.g. {spacing: 2}")

    @model_validator(mode="after")
    def _one_way_of_lengths(self):
        if self.length is not None and (self.min_length is not None or self.max_length is not None):
            raise _rule("give length, or min_length and max_length, not both")
        return self


class Train(Section):
    """Training settings (a spec's `train:`). Lengths are drawn uniformly from [min_length,
    max_length] per batch, or from min_length, min_length + length_step, .., max_length where
    `length_step` is set (a paper's mixture of a few lengths).

    `dataset_size`: None draws a fresh batch every step; N trains on one fixed set of N examples,
    drawn from the seed at the start, for as many epochs as `steps` allows
    (statetrack.training.train.FixedTrainingSet)."""

    steps: Annotated[int, integer(1)] = Field(
        default=2000, description="optimizer steps (with a curriculum: its stages' sum)"
    )
    batch_size: Annotated[int, integer(1)] = Field(default=64, description="examples per step")
    accumulate: Annotated[int, integer(1)] = Field(
        default=1,
        description="micro-batches per step: each step's batch is split into this many, one forward and backward "
        "each, their gradients summed before the step (the same update; activations held for one micro-batch)",
    )
    lr: Annotated[float, number(0, high=MAX_LR)] = Field(
        default=1e-3, description="AdamW learning rate (a spec gives it in `lrs`)"
    )
    weight_decay: Annotated[float, number(0, strict=False)] = Field(default=0.0, description="AdamW weight decay")
    betas: Betas = Field(default=(0.9, 0.999), description="AdamW betas")
    clip: Annotated[float, number(0)] | None = Field(
        default=1.0, description="the largest gradient norm, clipped to it after every backward pass; null: no clipping"
    )
    min_length: Annotated[int, integer(1)] = Field(default=3, description="shortest training length")
    max_length: Annotated[int, integer(1)] = Field(default=40, description="longest training length")
    length_step: Annotated[int, integer(1)] = Field(
        default=1,
        description="the training lengths are min_length, min_length + length_step, .., max_length (1: every "
        "length in range; e.g. 10 with 10..50: Anonymous 2025's mixture of blanks 10, 20, 30, 40 and 50)",
    )
    warmup: Annotated[int, integer(0)] = Field(default=0, description="linear warm-up steps")
    schedule: Annotated[str, choice(("constant", "cosine", "linear"))] = Field(
        default="constant", description="learning-rate schedule after warm-up"
    )
    min_lr_ratio: Annotated[float, number(0, strict=False, high=1)] = Field(
        default=0.0, description="where a cosine or linear decay ends, as a fraction of the peak learning rate"
    )
    log_every: Annotated[int, integer(1)] = Field(default=50, description="steps between logged training losses")
    val_every: Annotated[int, integer(1)] = Field(default=100, description="steps between validations at max_length")
    val_samples: Annotated[int, integer(1)] = Field(default=256, description="validation examples")
    early_stop_loss: Annotated[float, number(0, strict=False)] | None = Field(
        default=1e-3, description="stop once the validation loss at max_length is below this; null trains every step"
    )
    early_stop_accuracy: Annotated[float, number(0, high=1)] | None = Field(
        default=None,
        description="stop once the validation accuracy (over the supervised positions) at max_length reaches this: "
        "the run has fit its training lengths (null: no such rule)",
    )
    early_stop_fit: Annotated[float, number(0, high=1)] | None = Field(
        default=None,
        description="stop once the run fits its training lengths: the validation figure at max_length "
        "(early_stop_measure, on held-out examples) reaches this (null: no such rule; the quick scale's default "
        "is STOP_FIT)",
    )
    early_stop_fit_loss: Annotated[float, number(0)] | None = Field(
        default=None,
        description="with early_stop_fit: the validation loss at max_length must also be below this, so that a run "
        "stops once it has converged on its training lengths, not at the first validation that gets them right "
        "(null: the figure alone decides; the quick scale's default is STOP_LOSS)",
    )
    early_stop_window: Annotated[int, integer(1)] | None = Field(
        default=None,
        description="a run stops early only once this many validations in a row (val_every steps apart) say so: "
        "with early_stop_fit, it has stayed fit and converged, not only reached it once (null: the first)",
    )
    early_stop_measure: Annotated[str, choice(FIT_MEASURES)] = Field(
        default=FIT_MEASURES[0],
        description="what early_stop_fit reads: scaled accuracy over the supervised positions, or sequence accuracy "
        "(the examples right at every supervised position)",
    )
    checkpoint_every: Annotated[int, integer(1)] = Field(default=500, description="steps between checkpoints")
    seed: Annotated[int, integer(0)] = Field(default=0, description="the run's seed (a spec gives it in `seeds`)")
    device: Device = Field(default="auto", description="auto (CUDA when present), cpu, cuda, cuda:N")
    dataset_size: Annotated[int | None, integer(1, null="fresh batches every step")] = Field(
        default=None, description="train on one fixed set of this many examples"
    )
    dataset_balanced: Boolean = Field(default=False, description="the fixed set holds every answer class equally often")
    curriculum: list[Stage] | None = Field(
        default=None, description="stages trained in order; their steps add up to the run's"
    )

    _root = ("train",)

    @model_validator(mode="before")
    @classmethod
    def _steps_of_the_stages(cls, data):
        """Without `steps`, a curriculum's stages' steps add up to the run's."""
        if isinstance(data, dict) and data.get("curriculum") and "steps" not in data:
            stages = data["curriculum"]
            if isinstance(stages, list) and all(isinstance(st, dict) and _is_int(st.get("steps"), 1) for st in stages):
                data = {**data, "steps": sum(st["steps"] for st in stages)}
        return data

    @field_validator("curriculum", mode="before")
    @classmethod
    def _non_empty(cls, value):
        if value is not None and (not isinstance(value, list) or not value):
            raise _expected(
                "a non-empty list of stages, e.g. [{steps: 500, length: 8, task: {spacing: 1}}, "
                "{steps: 500, length: 16, task: {spacing: 2}}]"
            )
        return value

    @model_validator(mode="after")
    def _consistent(self):
        if self.max_length < self.min_length:
            raise _rule(
                "training lengths must satisfy 1 <= min_length <= max_length, "
                f"got [{self.min_length}, {self.max_length}]"
            )
        if self.accumulate > self.batch_size:
            raise _rule(f"accumulate ({self.accumulate} micro-batches) must be at most batch_size ({self.batch_size})")
        if self.dataset_balanced and self.dataset_size is None:
            raise _rule("dataset_balanced needs a fixed training set: set dataset_size too")
        for number, stage in enumerate(self.stages(), 1):
            if (stage["max_length"] - stage["min_length"]) % self.length_step:
                where = f"curriculum[{number - 1}]: " if self.curriculum is not None else ""
                raise _rule(
                    f"{where}length_step {self.length_step} must divide max_length - min_length, got "
                    f"[{stage['min_length']}, {stage['max_length']}] (the longest training length must be trained on)"
                )
        if self.curriculum is not None:
            if self.dataset_size is not None:
                raise _rule("curriculum draws fresh batches in each stage; it cannot go with dataset_size")
            for number, stage in enumerate(self.stages(), 1):
                if stage["min_length"] > stage["max_length"]:
                    raise _rule(
                        f"curriculum[{number - 1}]: lengths must satisfy 1 <= min_length <= max_length, "
                        f"got [{stage['min_length']}, {stage['max_length']}]"
                    )
            if self.stages()[-1]["end"] != self.steps:
                raise _rule(
                    f"steps is {self.steps}, but the curriculum's stages add up to {self.stages()[-1]['end']} steps "
                    f"(leave steps out, or make them agree)"
                )
        return self

    def stages(self) -> list[dict]:
        """The curriculum as stages {end (the step it ends at), min_length, max_length, task (parameter
        overrides)}; one stage of the whole run when there is none."""
        if self.curriculum is None:
            return [{"end": self.steps, "min_length": self.min_length, "max_length": self.max_length, "task": {}}]
        out, end = [], 0
        for stage in self.curriculum:
            end += stage.steps
            low = stage.length or stage.min_length or self.min_length
            high = stage.length or stage.max_length or self.max_length
            out.append({"end": end, "min_length": low, "max_length": high, "task": stage.task})
        return out


def lr_factor(step: int, steps: int, warmup: int = 0, schedule: str = "constant", min_lr_ratio: float = 0.0) -> float:
    """The learning rate over its peak at `step` (0-based) of a run of `steps`: linear warm-up over
    `warmup` steps, then constant, or a cosine or linear decay from 1 to `min_lr_ratio` at the last
    step (the trainer's scheduler, and what `still_learning` weighs a curve's steps by)."""
    if step < warmup:
        return (step + 1) / warmup
    progress = min(1.0, (step - warmup) / max(1, steps - warmup))
    if schedule == "constant":
        return 1.0
    decay = 0.5 * (1 + math.cos(math.pi * progress)) if schedule == "cosine" else 1.0 - progress
    return min_lr_ratio + (1.0 - min_lr_ratio) * decay


class TrainConfig(Train):
    __doc__ = Train.__doc__

    def __init__(self, **values):
        try:
            super().__init__(**values)
        except ValidationError as error:
            raise StatetrackError(one_line(error, root=self._root)) from None

    @classmethod
    def from_dict(cls, values: dict) -> TrainConfig:
        return cls(**values)


class SpecTrain(Train):
    """A spec's `train:`: a run's lr and seed come from `lrs` and `seeds`; dataset_size may be a list
    (one run per value)."""

    _moved = {
        key: f"{key} is not a setting; each run's {key} comes from the list '{source}' (e.g. {source}=[{example}])"
        for key, source, example in (("lr", "lrs", "1e-3"), ("seed", "seeds", "0,1"))
    }
    lr: SkipJsonSchema[Any] = Field(default=1e-3, exclude=True)
    seed: SkipJsonSchema[Any] = Field(default=0, exclude=True)
    dataset_size: Annotated[
        Any,  # an int, a list of them or None: wider than Train's, as lr and seed are
        _value(
            lambda v: (
                v
                if v is None or _is_int(v, 1) or (isinstance(v, list) and v and all(_is_int(n, 1) for n in v))
                else REFUSED
            ),
            "a positive integer or a non-empty list of them (one run each)",
            {
                "anyOf": [
                    {"type": "integer", "minimum": 1},
                    {"type": "array", "items": {"type": "integer", "minimum": 1}, "minItems": 1},
                    {"type": "null"},
                ]
            },
        ),
    ] = Field(default=None, description="train on one fixed set of this many examples; a list: one run per value")


VariantName = re.compile(r"[A-Za-z0-9_-]+")


class Eval(Section):
    """A spec's `eval:` (a task entry's is merged over it)."""

    lengths: Annotated[list, int_list(1)] = Field(description="the test lengths")
    samples: Annotated[int, integer(1)] = Field(
        default=EVAL_DEFAULTS["samples"], description="test examples per length"
    )
    batch_size: Annotated[int, integer(1)] = Field(
        default=EVAL_DEFAULTS["batch_size"], description="examples per forward pass"
    )
    chunk_size: Annotated[int | None, integer(1, null="the whole input at once")] = Field(
        default=EVAL_DEFAULTS["chunk_size"],
        description="positions per forward pass on long inputs, state carried across",
    )
    seed: Annotated[int, integer(0)] = Field(default=EVAL_DEFAULTS["seed"], description="the test set's seed")
    variants: Annotated[
        dict | None,
        _value(
            lambda v: (
                v
                if isinstance(v, dict)
                and all(
                    isinstance(k, str) and VariantName.fullmatch(k) and isinstance(p, dict) and p for k, p in v.items()
                )
                else REFUSED
            ),
            "a mapping from names (letters, digits, _ or -) to non-empty mappings of task parameters, "
            "e.g. {two_isi: {pattern: two_isi}}",
            {
                "type": "object",
                "propertyNames": {"pattern": "^[A-Za-z0-9_-]+$"},
                "additionalProperties": {"type": "object", "minProperties": 1},
            },
        ),
    ] = Field(
        default=None,
        description="the trained model scored again on the task with these parameters changed, at the same lengths",
    )
    traces: Annotated[int | None, integer(0)] = Field(
        default=None, description="examples whose per-position outputs are kept per length (plotted)"
    )

    _root = ("eval",)


class Selection(Section):
    """How the report reads a grid of (lr, seed) runs (statetrack.results.selection)."""

    lr: Annotated[str, choice(SELECTION_CHOICES["lr"])] = Field(
        default=SELECTION_DEFAULTS["lr"],
        description="the lr whose mean (best_mean) or best seed (best_max) scores highest at the training lengths",
    )
    seeds: Annotated[str, choice(SELECTION_CHOICES["seeds"])] = Field(
        default=SELECTION_DEFAULTS["seeds"], description="the headline: mean over seeds, or the best seed"
    )
    criterion: Annotated[str, choice(SELECTION_CHOICES["criterion"])] = Field(
        default=SELECTION_DEFAULTS["criterion"],
        description="a run's score: mean scaled accuracy, or the longest length extrapolated to",
    )
    metric: Annotated[str, choice(SELECTION_CHOICES["metric"])] = Field(
        default=SELECTION_DEFAULTS["metric"], description="what the extrapolation threshold applies to"
    )
    threshold: Annotated[float, number(0, high=1)] = Field(
        default=SELECTION_DEFAULTS["threshold"], description="the extrapolation threshold"
    )

    _root = ("selection",)


class Claim(Section):
    """One claim of the paper, tested against the measured figures (statetrack.results.claims.claim_verdicts)."""

    text: Text = Field(description="the claim in words")
    model: Names = Field(description="the model (display name) or models it is about")
    task: Names | None = Field(default=None, description="the task or tasks (default: every task)")
    dataset_size: Annotated[int, integer(1)] | None = Field(
        default=None, description="runs on a fixed training set of this size"
    )
    measure: Measure | None = Field(
        default=None,
        description="what is measured (default: paper.measure); check:NAME reads a figure the library computes "
        "without training (statetrack.checks) in place of the runs",
    )
    lengths: LengthRange | None = Field(
        default=None, description="one test length or [shortest, longest] (default: paper.lengths)"
    )
    seeds: Annotated[str, choice(SEED_RULES)] = Field(
        default=SEED_RULES[0], description="how the seeds' outcomes become the verdict"
    )
    scale: Names | None = Field(
        default=None, description=f"the scales it is tested at ({', '.join(SCALES)}; default: all)"
    )
    note: Text | None = Field(default=None, description="a sentence printed with the verdict")
    reason: Text | None = Field(
        default=None,
        description="why the claim is ✗ or inconclusive where it is, in one line that starts with one of: "
        + "; ".join(REASONS)
        + " (then a colon and the figures); it ends the claim's row of the claims page",
    )
    fit: Annotated[float, number(0, strict=False, high=1)] | None = Field(
        default=None, description="the fit threshold of this claim (default: paper.fit)"
    )
    at_least: AnyNumber | None = Field(default=None, description="measured >= this")
    below: AnyNumber | None = Field(default=None, description="measured < this")
    beats: Names | None = Field(default=None, description="measured > that model's (or each model's) on the same task")

    @model_validator(mode="after")
    def _one_test(self):
        given = [t for t in CLAIM_TESTS if getattr(self, t) is not None]
        if len(given) != 1:
            raise _rule(f"needs exactly one of {', '.join(CLAIM_TESTS)}, got {len(given)}")
        for scale in self.scale or []:
            if scale not in SCALES:
                raise _rule(f"unknown scale {scale!r}; expected one of: {', '.join(SCALES)}")
        if self.reason is not None and not (
            self.reason.startswith(REASONS) and len(self.reason.split()) <= REASON_WORDS
        ):
            raise _rule(
                f"reason: one line of at most {REASON_WORDS} words that starts with one of: {'; '.join(REASONS)}; "
                f"got {self.reason[:60]!r}"
            )
        if (self.measure or "").startswith("check:"):
            runs_only = sorted({"task", "dataset_size", "lengths", "seeds", "fit"} & self.model_fields_set)
            if runs_only:
                raise _rule(f"a check ({self.measure}) reads no runs; leave out {', '.join(runs_only)}")
        return self


class Probe(Section):
    """One probe behind an experiment's notes: a setting the spec does not run by default, the
    command that measures it, and what it gave (printed as a row of the book's probes table)."""

    setting: Text = Field(description="what was tried, e.g. 'seeds 3..5' or 'GRU at 20000 steps, lr 1e-2'")
    command: Text = Field(description="the command that measures it (statetrack run ...)")
    figure: Text = Field(description="what it gave, with its figures")
    verdict: Text | None = Field(default=None, description="what it says of the claims (optional)")

    _root = ("paper", "probes")


PROTOCOL_RATES = ("best", "selected")  # the paper reports its best rate; the rate chosen on the training lengths


class Protocol(Section):
    """The paper's own reporting protocol, where it differs from the strict one (the rate chosen on
    the training lengths, most seeds): each claim is then also read under it, labelled as the
    paper's (statetrack.results.claims.protocol_verdicts). It may select on the test lengths,
    which the strict reading never does."""

    quote: Text = Field(description="the paper's own words for how it reports, quoted")
    rates: Annotated[str, choice(PROTOCOL_RATES)] = Field(
        default="best",
        description="best: the rate whose runs do best on the claim's own figure (the paper picks its best model); "
        "selected: the rate the strict reading selects",
    )
    seeds: Annotated[str, choice(SEED_RULES)] = Field(
        default="best", description="how the seeds' outcomes become the verdict under the paper's protocol"
    )

    _root = ("paper", "protocol")


Figure = Annotated[
    Any,
    _value(
        lambda v: v if _is_number(v) or (isinstance(v, str) and v.strip()) else REFUSED,
        "a number or a short text",
        _FIGURE,
    ),
]


class LargestFit(Section):
    """Where a headline cell at the paper's scale does not fit one machine (24 GiB, about 6 CPU hours a
    seed): the largest scale that does, trained in its place and named as such beside the paper's."""

    settings: Mapping = Field(
        description="overrides over the cell, by key path as on the command line: {model_defaults.num_layers: 6}"
    )
    reason: Text = Field(description="why the paper's scale does not fit, with the estimate that says so")

    _root = ("paper", "headline", "largest_fit")


class Headline(Section):
    """The figure the work's abstract or main table leads with, as one cell (a model on a task) of the
    spec's paper scale: `statetrack reproduce --scale paper --headlines` trains it (every seed of the
    paper scale, under the experiment's own name), and the book sets its measured figure beside this one."""

    source: Text = Field(description="the work and where the figure is: 'Anonymous 2025, Table 2'")
    quote: Text = Field(description="the paper's own words for the figure, quoted")
    figure: Figure = Field(description="the paper's figure, as `paper.measure` reads it: a number or a short text")
    model: Text = Field(description="the cell's model (display name, one of the paper scale's)")
    task: Text | None = Field(default=None, description="the cell's task (default: the paper scale's only task)")
    lrs: list[Annotated[float, number(0, high=MAX_LR, text=True)]] | None = Field(
        default=None,
        min_length=1,
        description="the cell's learning rates, where the paper states fewer than the scale sweeps",
    )
    largest_fit: LargestFit | None = Field(
        default=None, description="the largest scale that fits one machine, where the paper's does not"
    )
    note: Text | None = Field(
        default=None,
        description="where the measured figure falls short of the paper's: what the runs read and why, with "
        "the budget they had (the book sets it under the cells' table)",
    )

    _root = ("paper", "headline")


class Paper(Section):
    """What the paper reports, set beside the measured figures (statetrack.experiments.spec.paper_of)."""

    source: Text = Field(description="where the figures come from, e.g. 'Grazzi et al. 2025, Table 2'")
    metric: str = Field(default="", description="what the paper's figures are, in words")
    measure: Measure = Field(
        default="scaled",
        description="what the measured figure beside them is: scaled, sequence, extrapolation or metric:NAME "
        "(a claim may also read check:NAME)",
    )
    lengths: LengthRange | None = Field(
        default=None, description="the test lengths the measured figure averages over (default: all)"
    )
    figures: Figures = Field(
        default_factory=dict,
        description="the paper's figure per model {model: figure}, or per task {task: {model: figure}}",
    )
    claims: list[Claim] = Field(default_factory=list, description="the claims tested")
    fit: Annotated[float, number(0, strict=False, high=1)] = Field(
        default=FIT_THRESHOLD,
        description="a claim beyond the training lengths, or a comparison's winner, is decided only on seeds whose "
        "figure at the longest training length is at least this (the fit gate)",
    )
    fit_variant: Text | None = Field(
        default=None,
        description="the evaluation variant (eval.variants) the fit is read on, "
        "where the training task's own targets are partly unpredictable (counting's random onsets); "
        "default: the training task",
    )
    notes: Text | None = Field(
        default=None, description="what the measured results do and do not show (printed in the book)"
    )
    probes: list[Probe] = Field(
        default_factory=list,
        description="the probes behind the notes, one row each of the book's probes table (setting, command, figure)",
    )
    protocol: Protocol | None = Field(
        default=None,
        description="the paper's own reporting protocol (best of its rates or seeds), where it states one: every "
        "claim is also read under it, beside the strict reading",
    )
    headline: Headline | None = Field(
        default=None,
        description="the figure the work's abstract or main table leads with, as one cell of the paper scale "
        "(statetrack reproduce --scale paper --headlines)",
    )

    _root = ("paper",)

    @model_validator(mode="after")
    def _beats_compares_accuracies(self):
        if self.measure.startswith("check:"):
            raise _rule("measure: a check (check:NAME) is one figure, not one per model; name it in a claim's measure")
        for i, claim in enumerate(self.claims):
            measure = claim.measure or self.measure
            if claim.beats is not None and measure.startswith(("metric:", "check:")):
                raise _rule(
                    f"claims[{i}]: beats compares accuracies (higher is better); with a metric or a check give "
                    "at_least or below"
                )
        return self


def _entry(kind: str) -> Check:
    """A model or task entry: a name, or a mapping {name: ..., parameters...} (its parameters are
    checked against its signature when it is built)."""

    def check(value):
        if isinstance(value, str) and value:
            return value
        if isinstance(value, dict) and isinstance(value.get("name"), str) and value["name"]:
            return value
        raise _expected(f"a {kind} name or a mapping {{name: ..., parameters...}}")

    return Check(check, {"x-entry": kind})


ModelEntry = Annotated[Any, _entry("model")]
TaskEntry = Annotated[Any, _entry("task")]


def _safe_name(value):
    try:
        return check_name(value)
    except StatetrackError:
        return REFUSED


TOP_LEVEL = {  # the spec's keys in words (the JSON Schema's descriptions)
    "name": f"experiment name ({ALLOWED_NAMES}; default: the file's name)",
    "description": "one paragraph shown in the report",
    "task": "one task: a name or {name: ..., parameters...}",
    "tasks": "a list of tasks; an entry may carry its own train: and eval: settings for its runs",
    "models": "list of models: names or {name: ..., parameters...} (see `statetrack models`); "
    "an entry's `lrs` replaces the spec's for its runs",
    "model_defaults": "settings applied to every model (d_model, width, params, num_layers, mlp, ...)",
    "train": "training settings; dataset_size may be a list, one run per value",
    "eval": "evaluation: lengths, samples, batch_size, chunk_size, seed, [variants, traces]",
    "lrs": "learning rates, one run each",
    "seeds": "seeds, one run each",
    "selection": "how the report picks a learning rate and aggregates seeds",
    "scales": "per-scale changes merged over the spec: {paper: {...}}",
    "paper": "the paper's figures and the claims tested, shown beside the measured ones",
    "imports": "modules or .py files (relative to the spec) that register models and tasks",
}


class Spec(Section):
    """An experiment spec, at one scale (its `scales:` merged in)."""

    model_config = ConfigDict(extra="forbid", title="statetrack experiment spec")
    name: Annotated[
        str | None,
        _value(
            _safe_name, ALLOWED_NAMES, {"type": "string", "pattern": f"^{NAME_PATTERN.pattern}$", "maxLength": NAME_MAX}
        ),
    ] = Field(default=None, description=TOP_LEVEL["name"])
    description: str = Field(default="", description=TOP_LEVEL["description"])
    task: TaskEntry | None = Field(default=None, description=TOP_LEVEL["task"])
    tasks: list[TaskEntry] | None = Field(default=None, min_length=1, description=TOP_LEVEL["tasks"])
    models: list[ModelEntry] = Field(min_length=1, description=TOP_LEVEL["models"])
    model_defaults: Mapping = Field(default_factory=dict, description=TOP_LEVEL["model_defaults"])
    train: SpecTrain = Field(default_factory=SpecTrain, description=TOP_LEVEL["train"])
    eval: Eval = Field(description=TOP_LEVEL["eval"])
    lrs: list[Annotated[float, number(0, high=MAX_LR, text=True)]] = Field(min_length=1, description=TOP_LEVEL["lrs"])
    seeds: list[Annotated[int, integer(0)]] = Field(min_length=1, description=TOP_LEVEL["seeds"])
    selection: Selection = Field(default_factory=Selection, description=TOP_LEVEL["selection"])
    scales: dict[Annotated[str, choice(SCALES)], Mapping] = Field(default_factory=dict, description=TOP_LEVEL["scales"])
    paper: Paper | None = Field(default=None, description=TOP_LEVEL["paper"])
    imports: list[str] = Field(default_factory=list, description=TOP_LEVEL["imports"])
    scale: SkipJsonSchema[Any] = Field(default=None, exclude=True)  # set by load_spec: the scale it was read at

    @model_validator(mode="before")
    @classmethod
    def _empty_sections(cls, data):
        """`train:` with nothing under it (YAML null) is an empty section."""
        if isinstance(data, dict):
            data = {
                k: ({} if v is None and k in ("train", "eval", "selection", "model_defaults", "scales") else v)
                for k, v in data.items()
            }
        return data

    @model_validator(mode="after")
    def _one_task_key(self):
        if (self.task is None) == (self.tasks is None):
            raise _rule("give exactly one of 'task' or 'tasks'")
        return self


TASK_SETTINGS = ("train", "eval")  # sections a task entry may override for its own runs
MODEL_SETTINGS = ("lrs", "train")  # run settings a model entry may give for its own runs (not model parameters)


class ModelSettings(Section):
    """A model entry's own run settings, taken out before the model is built."""

    lrs: list[Annotated[float, number(0, high=MAX_LR, text=True)]] | None = Field(
        default=None,
        min_length=1,
        description="this model's learning rates, in place of the spec's `lrs` (e.g. a family's own grid)",
    )
    train: Mapping | None = Field(
        default=None,
        description="this model's own training settings, merged over the spec's (and its task's) for its runs "
        "only (e.g. a longer budget: {steps: 8000}); the longest training length stays the task's",
    )


def validate_spec(spec: dict) -> None:
    """Check `spec` (one scale, overrides applied) against the schema, a task entry's own `train:`
    and `eval:` merged over the spec's: a one-line StatetrackError naming the key path."""
    where = f"experiment {spec.get('name')!r}: " if isinstance(spec, dict) else ""
    if not isinstance(spec, dict):
        raise StatetrackError(f"an experiment spec must be a mapping with keys: {', '.join(TOP_LEVEL)}")
    Spec.check(spec, where)
    for i, entry in enumerate(spec["models"]):
        if isinstance(entry, dict) and any(key in entry for key in MODEL_SETTINGS):
            ModelSettings.check({key: entry[key] for key in MODEL_SETTINGS if key in entry}, where, root=("models", i))
            if entry.get("train") is not None:
                SpecTrain.check({**(spec.get("train") or {}), **entry["train"]}, where, root=("models", i, "train"))
    listed = spec.get("tasks") is not None
    for i, entry in enumerate(spec["tasks"] if listed else [spec["task"]]):
        at = ("tasks", i) if listed else ("task",)
        for key in TASK_SETTINGS:
            if not isinstance(entry, dict) or key not in entry:
                continue
            if not isinstance(entry[key], dict):
                raise StatetrackError(f"{where}{_path((*at, key))} must be a mapping of settings, got {entry[key]!r}")
            merged = {**(spec.get(key) or {}), **entry[key]}
            (SpecTrain if key == "train" else Eval).check(merged, where, root=(*at, key))


def check_scales(scales, where: str) -> dict:
    """A spec file's `scales:` (read before any is merged): known scale names, each a mapping."""
    if scales is None:
        return {}
    if not isinstance(scales, dict):
        raise StatetrackError(f"{where}scales must be a mapping {{paper: {{...}}}}, got {scales!r}")
    for scale, changes in scales.items():
        if scale not in SCALES:
            raise StatetrackError(f"{where}unknown scale {scale!r}; expected one of: {', '.join(SCALES)}")
        if changes is not None and not isinstance(changes, dict):
            raise StatetrackError(f"{where}scales.{scale} must be a mapping of changes, got {changes!r}")
    return scales


def json_schema(models: dict[str, dict], tasks: dict[str, dict]) -> dict:
    """The JSON Schema of a spec file: `Spec`'s, with each model and task entry one of the
    registered names and its parameters (`models`, `tasks`: name -> {parameter: JSON Schema}), and
    `scales:` holding partial specs."""
    schema = Spec.model_json_schema()
    defs = schema.setdefault("$defs", {})

    def entries(kind: str, params_by_name: dict[str, dict], extra: dict) -> dict:
        """A name, or {name, parameters}: keyed by the name (if name is X then X's parameters), so an
        unknown parameter is reported as one of X's, not as a mismatch with every other entry."""
        names = sorted(params_by_name)
        keyed = [
            {
                "if": {"required": ["name"], "properties": {"name": {"const": name}}},
                "then": {"additionalProperties": False, "properties": {"name": {"const": name}, **extra, **params}},
            }
            for name, params in sorted(params_by_name.items())
        ]
        entry = {
            "type": "object",
            "required": ["name"],
            "properties": {"name": {"enum": names, "description": f"the {kind}'s name"}},
            "allOf": keyed,
        }
        return {
            "type": ["string", "object"],
            "if": {"type": "string"},
            "then": {"enum": names},
            "else": entry,
            "description": f"a {kind} name, or {{name: ..., parameters...}}",
        }

    overrides = {
        key: {"type": "object", "description": f"this task's own {key} settings, merged over the spec's"}
        for key in TASK_SETTINGS
    }
    own = {
        "lrs": {
            "type": "array",
            "minItems": 1,
            "items": {"type": "number", "exclusiveMinimum": 0},
            "description": ModelSettings.model_fields["lrs"].description,
        },
        "train": {"type": "object", "description": ModelSettings.model_fields["train"].description},
    }
    defs["ModelEntry"], defs["TaskEntry"] = entries("model", models, own), entries("task", tasks, overrides)

    def refer(node):  # an entry's placeholder -> a reference to its definition
        if isinstance(node, dict):
            if "x-entry" in node:
                return {"$ref": f"#/$defs/{node['x-entry'].capitalize()}Entry"}
            return {k: refer(v) for k, v in node.items()}
        return [refer(v) for v in node] if isinstance(node, list) else node

    schema = refer(schema)

    def changes(node):  # a section under scales: merged key by key over the spec's, so none is required
        if isinstance(node, dict) and "$ref" in node:
            name = node["$ref"].rsplit("/", 1)[1]
            if "required" in schema["$defs"][name]:
                schema["$defs"][f"{name}Changes"] = {k: v for k, v in schema["$defs"][name].items() if k != "required"}
                return {"$ref": f"#/$defs/{name}Changes"}
        if isinstance(node, dict) and "anyOf" in node:
            return {**node, "anyOf": [changes(v) for v in node["anyOf"]]}
        return node

    partial = {
        "type": "object",
        "additionalProperties": False,
        "properties": {k: changes(v) for k, v in schema["properties"].items() if k != "scales"},
    }
    schema["properties"]["scales"] = {
        "type": "object",
        "description": TOP_LEVEL["scales"],
        "additionalProperties": False,
        "properties": {scale: {**partial, "description": f"what changes at the {scale} scale"} for scale in SCALES},
    }

    def nullable(node):  # anyOf [X, null] -> if null then valid else X: a validator's best error is then X's own
        if isinstance(node, dict):
            node = {k: nullable(v) for k, v in node.items()}
            branches = node.get("anyOf")
            if isinstance(branches, list) and len(branches) == 2 and {"type": "null"} in branches:
                other = next(b for b in branches if b != {"type": "null"})
                node = {k: v for k, v in node.items() if k != "anyOf"}
                node.update({"if": {"type": "null"}, "else": other})
            return node
        return [nullable(v) for v in node] if isinstance(node, list) else node

    schema = nullable(schema)
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    return schema


def selection_of(spec: dict) -> dict:
    """The spec's selection rule with defaults filled in (checked by statetrack.schema.Selection)."""
    return Selection.check(spec.get("selection") or {}, f"experiment {spec.get('name')!r}: ").model_dump()


# ---- a run's score under the selection rule, defined beside the rule: the trackers
# (statetrack.training.loggers), the selection (statetrack.results.selection) and the claims read it
def extrapolation_length(accuracy: dict, threshold: float = 0.9) -> int:
    """The longest test length whose accuracy, and that of every shorter one, is >= threshold
    (Anonymous 2025); 0 when the shortest one already falls short."""
    reached = 0
    for length in sorted(accuracy):
        if accuracy[length] < threshold:
            break
        reached = length
    return reached


def run_score(scaled: dict, accuracy: dict, selection: dict) -> tuple:
    """A run's score as a tuple compared lexicographically: (criterion value, tie-breaker)."""
    mean_scaled = statistics.mean(scaled.values())
    if selection["criterion"] == "extrapolation":
        return (extrapolation_length(accuracy, selection["threshold"]), mean_scaled)
    return (mean_scaled,)


def evals_score(evals: list[dict], selection: dict | None = None) -> float | None:
    """One run's score under `selection` from its evaluation rows as the store keeps them (the
    training task's, variant ''): the criterion value `summarize` ranks its runs by (mean scaled
    accuracy, or the extrapolation length). None without rows, or when the rule's metric was not measured."""
    selection = {**SELECTION_DEFAULTS, **(selection or {})}
    rows = [r for r in evals if not r.get("variant")]
    key = "sequence_accuracy" if selection["metric"] == "sequence_accuracy" else "accuracy"
    if not rows or any(r.get(key) is None for r in rows):
        return None
    score = run_score({r["length"]: r["scaled_accuracy"] for r in rows}, {r["length"]: r[key] for r in rows}, selection)
    return float(score[0])
