"""Upper bounds on numbers and sizes, checked before anything is written or trained.

Every integer a user gives (spec values, task parameters, model settings, command-line options) is
checked by `check_int` against one of the ranges declared here: seeds and stored integers fit the
signed 64 bits of SQLite and torch, class counts (moduli, states, symbols) an embedding row each,
lengths a sequence in memory, layers and widths a model that can be built before it is sized.

Sizes: every size a user gives (sequences and their lengths, a fixed training set, a run's model
and evaluation, an exact construction's tables, a parameter budget) is turned into an estimate of
the memory it needs and checked by `check_memory` against what this process may still allocate
(`available_memory`: the machine's available memory, `ulimit -v` and a container's cgroup limit),
before anything is allocated, and refused in one line naming the value, the memory it needs and
the memory there is. A run's activations count the tokens of its inputs (`Task.tokens`: a length
counts a task's symbols, and a REPL trace's text is longer), training's one micro-batch at a time
(`train.accumulate`), d_model per token and its layers' widest projection per token, measured on
the meta device (`statetrack.models.sizing.token_bytes`: PD-SSM's N x N transitions, Mamba-3's
expanded width, RWKV-7's heads). A run whose estimated arithmetic would take a day or more, and a
task export larger than 10 GiB or the free disk space, are refused too. The estimates are rough
and leave out attention's quadratic terms, a scan's inner tensors and torch's
own overheads, so they err low; `STATETRACK_NO_SIZE_LIMIT=1`
in the environment lifts every bound."""

import argparse
import math
import os
import resource
import shutil
import time
from pathlib import Path

from statetrack.errors import StatetrackError

LIFT = "STATETRACK_NO_SIZE_LIMIT"
HOW_TO_LIFT = f"lower one of these, or set {LIFT}=1 to go ahead anyway"
# Floating-point operations per run: a day or more on one GPU, 20 times every shipped spec's largest.
MAX_OPERATIONS = 1e18
MAX_EXPORT_BYTES = 10 * 2**30  # hours of writing CSV from Python
# Floats kept per token and d_model unit: every layer's intermediate activations for the backward
# pass (training, per layer), only the current layer's (evaluation, without gradients).
TRAIN_ACTIVATIONS, EVAL_ACTIVATIONS = 16, 8

MAX_INT = 2**63 - 1  # seeds and every stored integer: SQLite's INTEGER and torch's seeds are signed 64-bit
MAX_CLASSES = 1_000_000  # moduli, states, symbols, answer classes: one embedding or read-out row each
MAX_LENGTH = 10**8  # tokens in one sequence (a length, an interval, a pattern)
MAX_LAYERS = 1024
MAX_WIDTH = 2**16  # d_model and other widths
MAX_FLOAT = (
    3.4028234663852886e38  # float32's largest finite value: every real setting reaches the model's float32 arithmetic
)


def shown(value) -> str:
    """`value` for an error message: an integer too long to print whole is described by its size."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > 10**30:
        return f"an integer of about {int(abs(value).bit_length() * 0.30103) + 1} digits"
    text = repr(value)
    return text if len(text) <= 80 else text[:60] + "..."


def check_int(value, what: str, low: int, high: int = MAX_INT) -> int:
    """`value` when it is an integer in low..high (true/false are not integers); else a one-line
    error naming `what` and the range."""
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        too_large = isinstance(value, int) and not isinstance(value, bool) and value > high
        expected = f"an integer from {low} to {high:,}" if too_large else f"an integer >= {low}"
        raise StatetrackError(f"{what} must be {expected}, got {shown(value)}")
    return value


def check_memory(need: float, what: str, available: int | None = None) -> None:
    """The one memory check: refuse, in one line naming `what` (the value and the setting it comes
    from), a size whose estimated `need` in bytes exceeds the memory available (`available_memory`)."""
    free = available_memory() if available is None else available
    if need > free and not lifted():
        raise StatetrackError(
            f"{what} would take about {_gib(need)} of memory, more than the {_gib(free)} available; {HOW_TO_LIFT}"
        )


def check_tokens(count: int, length: int, what: str) -> None:
    """Refuse `count` sequences of `length` tokens whose tensors (inputs, targets, mask, outputs:
    about 32 bytes a token) exceed the memory available."""
    check_memory(32 * count * length, f"{what}: {count:,} sequences of {length:,} tokens")


def check_construction(task, structure: str) -> None:
    """Refuse an exact construction (`statetrack construct`) whose tables exceed the memory available:
    a transition table of states x symbols, and for the structures that keep a dense transition
    matrix per symbol (full, cp, block) states x states x symbols float64 weights, twice (the solve's
    copy)."""
    states, symbols = task.num_classes + 1, task.vocab_size  # + the start state of a final-answer task
    dense = structure in ("full", "cp", "block")
    need = 8 * states * symbols * (2 * states if dense else 1)
    check_memory(need, f"construct: {task!r} with {states - 1:,} states and {symbols:,} symbols ({structure})")


def check_parameters(parameters: float, what: str) -> None:
    """Refuse a model of `parameters` parameters that cannot be trained in the memory available: 16
    bytes a parameter (weights, gradients and Adam's two moments, float32)."""
    check_memory(16 * parameters, f"{what} ({parameters:.3g} parameters)")


def lifted() -> bool:
    return os.environ.get(LIFT, "") not in ("", "0")


def available_memory() -> int:
    """Bytes of memory this process may still allocate: the least of MemAvailable (/proc/meminfo, else
    the free physical pages), the room left under its address-space and data limits (`ulimit -v`,
    `ulimit -d`) and under its cgroup's memory.max (a container's limit)."""
    bounds = [_meminfo()]
    used = _vm_size()
    for limit in (resource.RLIMIT_AS, getattr(resource, "RLIMIT_DATA", None)):
        if limit is None:
            continue
        soft = resource.getrlimit(limit)[0]
        if soft != resource.RLIM_INFINITY:
            bounds.append(max(0, soft - used))
    bounds.append(_cgroup_room())
    return min(bounds)


def _meminfo() -> int:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError):
        return 2**62  # unknown: no bound


def _vm_size() -> int:
    """This process's mapped memory (VmSize): what the address-space limit already counts."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmSize:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def _cgroup_room() -> int:
    """memory.max less memory.current of this process's cgroup (v2); no bound where there is none."""
    try:
        with open("/proc/self/cgroup") as f:
            path = next((line.strip().split(":", 2)[2] for line in f if line.startswith("0::")), None)
        if path is None:
            return 2**62
        folder = Path("/sys/fs/cgroup") / path.lstrip("/")
        limit = (folder / "memory.max").read_text().strip()
        if limit == "max":
            return 2**62
        return max(0, int(limit) - int((folder / "memory.current").read_text()))
    except (OSError, ValueError, IndexError):
        return 2**62


def _size(size: float) -> str:
    """Bytes in the unit that reads best: 512 B, 16 KiB, 16 MiB, 2 GiB."""
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if size >= scale:
            return f"{size / scale:.3g} {unit}"
    return f"{size:.0f} B"


def _gib(size: float) -> str:
    if size >= 10**6 * 2**30:
        return f"{size / 2**30:.3g} GiB"
    return f"{size / 2**30:,.0f} GiB" if size >= 1000 * 2**30 else f"{size / 2**30:.3g} GiB"


def activation_bytes(model: dict, token_bytes: int, training: bool) -> int:
    """Bytes per token that one layer of `model` holds: its activations at the width d_model (every
    one kept for the backward pass when `training`) and, on top, its widest projection per token
    (`token_bytes`: PD-SSM's N x N transitions, an expanded inner width; `statetrack.models.sizing.token_bytes`),
    with its gradient when `training`."""
    per_float = TRAIN_ACTIVATIONS if training else EVAL_ACTIVATIONS
    return model["d_model"] * 4 * per_float + token_bytes * (2 if training else 1)


def pass_bytes(params: int, model: dict, batch: int, length: int, token_bytes: int, training: bool) -> int:
    """Estimated bytes of one pass of `batch` sequences of `length` tokens through `model` (`params`
    parameters): weights, gradients and Adam's two moments when `training` (every layer's
    activations kept), else the weights and one layer's activations at a time."""
    if training:
        return 16 * params + batch * length * model["num_layers"] * activation_bytes(model, token_bytes, True)
    return 4 * params + batch * length * activation_bytes(model, token_bytes, False)


def micro_batch(train) -> int:
    """Examples in one forward and backward pass of training: train.batch_size split into
    train.accumulate micro-batches (the largest of them)."""
    return -(-train.batch_size // train.accumulate)


def longest_training_length(train) -> int:
    """The longest length `train` (a TrainConfig) trains on, over its curriculum's stages."""
    return max(stage["max_length"] for stage in train.stages())


def run_sizes(
    params: int,
    model: dict,
    train,
    eval_spec: dict,
    variants: int,
    token_bytes: int = 0,
    train_tokens: int | None = None,
    eval_tokens: int | None = None,
) -> dict:
    """Estimated bytes of training (one micro-batch's pass, `micro_batch`), of validation and of
    evaluation (in batches of eval.batch_size) and floating-point operations of one run.
    `train` is its TrainConfig, `params` the model's parameter count, `token_bytes` its layer's widest
    projection per token (`activation_bytes`); `train_tokens` and `eval_tokens` the tokens of one
    input at the longest training and evaluation length (`Task.tokens`: a REPL trace of 64 commands
    is 1,421 tokens), by default the lengths themselves."""
    train_tokens = train_tokens or longest_training_length(train)
    longest = eval_tokens or max(eval_spec["lengths"])
    train_bytes = pass_bytes(params, model, micro_batch(train), train_tokens, token_bytes, training=True)
    batch = min(eval_spec["batch_size"], eval_spec["samples"])
    chunk = min(longest, eval_spec["chunk_size"] or longest)
    # inputs, targets and predictions of the whole length; the model's activations one chunk at a time
    eval_bytes = batch * longest * 3 * 8 + pass_bytes(params, model, batch, chunk, token_bytes, training=False)
    # validation: one forward pass of train.val_samples examples at the longest training length
    val_bytes = train.val_samples * train_tokens * 32 + pass_bytes(
        params, model, train.val_samples, train_tokens, token_bytes, training=False
    )
    # tokens trained and evaluated on, each length counted as its share of the longest one's tokens
    trained = train.steps * train.batch_size * (train.min_length + train.max_length) / 2
    trained *= train_tokens / longest_training_length(train)
    evaluated = eval_spec["samples"] * sum(eval_spec["lengths"]) * (1 + variants) * longest / max(eval_spec["lengths"])
    return {
        "train_bytes": train_bytes,
        "eval_bytes": eval_bytes,
        "val_bytes": val_bytes,
        "operations": params * (6 * trained + 2 * evaluated),
    }


def check_run_sizes(
    experiment: str,
    params: int,
    model: dict,
    train,
    eval_spec: dict,
    variants: int = 0,
    memory: int | None = None,
    token_bytes: int = 0,
    settings: str = "",
    train_tokens: int | None = None,
    eval_tokens: int | None = None,
) -> None:
    """A one-line error naming the settings when one run's estimated memory exceeds `memory` (default:
    what this machine has available) or its arithmetic exceeds MAX_OPERATIONS (`token_bytes`: see
    `activation_bytes`; `settings`: the model's own, named in the error, e.g. "state_size 2048";
    `train_tokens`, `eval_tokens`: see `run_sizes`)."""
    if lifted():
        return
    sizes = run_sizes(params, model, train, eval_spec, variants, token_bytes, train_tokens, eval_tokens)
    memory = available_memory() if memory is None else memory
    longest = longest_training_length(train)
    at_length = f"at train.max_length {longest}"
    if train.curriculum is not None:
        at_length = f"at the curriculum's longest length {longest}"
    if train_tokens and train_tokens != longest:
        at_length += f" ({train_tokens:,} tokens)"
    dataset = getattr(train, "dataset_size", None)
    if dataset:  # one fixed training set, held whole: inputs, targets and mask of every example
        check_memory(
            32 * dataset * (train_tokens or longest),
            f"experiment {experiment!r}: train.dataset_size {dataset} {at_length}",
            memory,
        )
    shape = f"model {model['name']!r} at d_model {model['d_model']}, num_layers {model['num_layers']}"
    shape += f", {settings}" if settings else ""
    if 2 * token_bytes > activation_bytes(model, 0, True):  # a layer's own width dominates: say how wide
        shape += f" ({_size(token_bytes)} a token in one layer's widest projection)"
    batch = f"train.batch_size {train.batch_size}"
    if train.accumulate > 1:
        batch += f" in train.accumulate {train.accumulate} micro-batches of {micro_batch(train)}"
    elif train.batch_size > 1:
        batch += " in one pass (train.accumulate splits it)"
    check_memory(sizes["train_bytes"], f"experiment {experiment!r}: {batch} {at_length} with {shape}", memory)
    check_memory(
        sizes["val_bytes"],
        f"experiment {experiment!r}: validating on train.val_samples {train.val_samples} {at_length} with {shape}",
        memory,
    )
    eval_longest = max(eval_spec["lengths"])
    eval_at = f"eval.lengths up to {eval_longest}"
    if eval_tokens and eval_tokens != eval_longest:
        eval_at += f" ({eval_tokens:,} tokens)"
    check_memory(
        sizes["eval_bytes"],
        f"experiment {experiment!r}: evaluating eval.samples {eval_spec['samples']} in batches of "
        f"eval.batch_size {eval_spec['batch_size']} at {eval_at} with {shape}",
        memory,
    )
    if sizes["operations"] > MAX_OPERATIONS:
        raise StatetrackError(
            f"experiment {experiment!r}: one run of train.steps {train.steps}, train.batch_size {train.batch_size}, "
            f"eval.samples {eval_spec['samples']} at {eval_at} "
            f"with {shape} ({params} parameters) is an "
            f"estimated {sizes['operations']:.2g} floating-point operations, beyond the limit of {MAX_OPERATIONS:.0g} "
            f"(a day or more of computing); {HOW_TO_LIFT}"
        )


def check_export_size(samples: int, lengths: list[int], out_dir: str | Path) -> None:
    """A one-line error when an export of `samples` examples at each of `lengths` would take more than
    the free space at `out_dir` or MAX_EXPORT_BYTES: at least 4 bytes a position (an input and a
    target id, each with a separator)."""
    if lifted():
        return
    size = 4 * samples * sum(lengths)
    path = Path(out_dir).absolute()
    existing = next(p for p in (path, *path.parents) if p.exists())
    free = shutil.disk_usage(existing).free
    limit, what = (
        (free, f"the {_gib(free)} free at {existing}")
        if free < MAX_EXPORT_BYTES
        else (MAX_EXPORT_BYTES, f"the limit of {_gib(MAX_EXPORT_BYTES)}")
    )
    if size > limit:
        raise StatetrackError(
            f"--samples {samples} at --lengths up to {max(lengths)} is an estimated {_gib(size)} of files, "
            f"more than {what}; {HOW_TO_LIFT}"
        )


def seconds_from_now(text: str) -> float:
    """An argparse type for a duration in seconds (> 0), read as the moment it ends (a `time.time()`)."""
    try:
        seconds = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number of seconds > 0, got {text!r}") from None
    if not math.isfinite(seconds) or seconds <= 0:
        raise argparse.ArgumentTypeError(f"must be a number of seconds > 0, got {text!r}")
    return time.time() + seconds


def argparse_int(low: int | None = None, high: int | None = None):
    """An argparse type for an integer option bounded by `statetrack.limits` (the upper bound of every
    integer is 64 bits); values below a command's own minimum are left to the command's message."""

    def parse(text: str) -> int:
        value = int(text)
        top = MAX_INT if high is None else high
        if value > top or (low is not None and value < low):
            expected = f"an integer <= {top:,}" if low is None else f"an integer from {low} to {top:,}"
            raise argparse.ArgumentTypeError(f"must be {expected}, got {shown(value)}")
        return value

    parse.__name__ = "int"  # argparse's "invalid int value: 'x'"
    return parse
