"""The tables of the performance pages (docs/performance.md and the pages it links, `PAGES`), rendered
from the benchmarks' JSON output in benchmarks/results/; `statetrack docs --write` fills the pages'
blocks with them and `statetrack docs --check` (a test) checks them.

Each generated block of a page (`<!-- generated:NAME -->` ... `<!-- /generated:NAME -->`) holds
the commands that re-measure it (read back from each JSON file: its arguments and environment, see
benchmarks/common.py) and the tables, rendered from those files by the benchmark's own Markdown
renderer. Nothing is measured here, so a page changes only when a JSON file does.
"""

from __future__ import annotations

import json
import shlex
import sys
from argparse import Namespace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "benchmarks"))

import bilinear  # noqa: E402
import fixedpoint  # noqa: E402
import long_input  # noqa: E402
import suite_flops  # noqa: E402
import train_step  # noqa: E402
import zoo_ops  # noqa: E402

import ops  # noqa: E402
from statetrack.errors import StatetrackError  # noqa: E402


def load(name: str, results: Path = RESULTS) -> dict:
    path = results / f"{name}.json"
    if not path.exists():
        raise StatetrackError(f"{path} is missing; measure it with the command its block in docs/performance*.md shows")
    return json.loads(path.read_text())


def command(name: str, data: dict) -> str:
    """The shell command that wrote results/NAME.json, and how long it took."""
    env = "".join(f"{k}={shlex.quote(v)} " for k, v in data["env"].items())
    python = "python" if "gpu" in data["machine"] else ".venv/bin/python"  # a CUDA torch: not the project's CPU venv
    script = f"benchmarks/{data['benchmark']}.py"
    line = f"{env}{python} {script} {shlex.join(data['command'])} > benchmarks/results/{name}.json"
    return f"{line}  # {_duration(data['elapsed_s'])}"


def _duration(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 90 else f"{seconds / 60:.0f} min"


def measured(names: list[str], table: str, results: Path = RESULTS) -> str:
    """A block: the commands (in a code block) above the table."""
    commands = "\n".join(command(n, load(n, results)) for n in names)
    return f"```\n{commands}\n```\n\n{table}"


def _args(data: dict, **more) -> Namespace:
    return Namespace(**data["args"], **more)


def _train_step_args(data: dict) -> Namespace:
    info = {k: data[k] for k in ("matmul_gflops", "threads", "malloc", "profiles", "device")}
    return _args(data, info=info)


# ---- one function per block: {block name: text} ---------------------------------------------------
def machines_block(results: Path) -> str:
    lines = [
        "| results file | CPU | cores | GPU | torch threads | torch | Python | measured |",
        "| --- | --- | ---: | --- | ---: | --- | --- | --- |",
    ]
    for path in sorted(results.glob("*.json")):
        data = json.loads(path.read_text())
        m = data["machine"]
        cpu = m["cpu"] + (f" ({m['simd']})" if m.get("simd") else "")
        gpu = f"{m['gpu']} (CUDA {m['cuda']})" if "gpu" in m else "-"
        cells = [f"`{path.name}`", cpu, m["cores"], gpu, m["threads"], m["torch"], m["python"], data["measured"]]
        lines.append("| " + " | ".join(map(str, cells)) + " |")
    return "\n".join(lines)


def ops_block(results: Path) -> str:
    rows, peak = ops.from_json(load("ops", results))
    return measured(["ops"], ops.markdown(rows, peak), results)


def zoo_ops_block(results: Path) -> str:
    data = load("zoo_ops", results)
    return measured(["zoo_ops"], zoo_ops.markdown(data["rows"], _args(data)), results)


def train_step_block(results: Path) -> str:
    data = load("train_step", results)
    return measured(["train_step"], train_step.markdown(data["rows"], _train_step_args(data)), results)


def native_block(results: Path) -> str:
    """The compiled loops (`statetrack.ops.native`) against the PyTorch forms (STATETRACK_NATIVE=0),
    per model and shape."""
    native, torch_forms = load("train_step_native", results), load("train_step_pytorch", results)
    by = {(r["model"], r["T"], r["layers"]): r for r in torch_forms["rows"]}
    first = native["rows"][0]
    lines = [
        f"ms per training step, batch {first['batch']}, d_model {first['d_model']}, "
        f"{native['threads']} thread(s); x LSTM of the same run in brackets.",
        "",
        "| model | T | layers | compiled loops: ms (x LSTM) | PyTorch forms: ms (x LSTM) | PyTorch / compiled |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in sorted(native["rows"], key=lambda r: (r["T"], r["layers"])):
        t = by[(r["model"], r["T"], r["layers"])]
        lines.append(
            f"| {r['model']} | {r['T']} | {r['layers']} | {r['ms']:.1f} ({r['x_lstm']:.1f}) | "
            f"{t['ms']:.1f} ({t['x_lstm']:.1f}) | {t['ms'] / r['ms']:.2f}x |"
        )
    return measured(["train_step_native", "train_step_pytorch"], "\n".join(lines), results)


def compile_block(results: Path) -> str:
    data = load("train_step_compile", results)
    return measured(["train_step_compile"], train_step.markdown(data["rows"], _train_step_args(data)), results)


def optimizers_block(results: Path) -> str:
    data = load("train_step_optimizers", results)
    return measured(["train_step_optimizers"], train_step.optimizer_table(data["rows"], _args(data)), results)


def batch_block(results: Path) -> str:
    data = load("train_step_batch", results)
    return measured(["train_step_batch"], train_step.batch_table(data["rows"], _args(data)), results)


def cuda_block(results: Path) -> str:
    names = ["train_step_cuda", "train_step_cuda_paper"]
    tables = [train_step.markdown(d["rows"], _train_step_args(d)) for d in (load(n, results) for n in names)]
    return measured(names, "\n\n".join(tables), results)


def bilinear_block(results: Path) -> str:
    data = load("bilinear", results)
    return measured(["bilinear"], bilinear.markdown(data["rows"], _args(data)), results)


def fixedpoint_block(results: Path) -> str:
    data = load("fixedpoint", results)
    return measured(["fixedpoint"], fixedpoint.markdown(data["rows"], _args(data)), results)


def long_input_block(results: Path) -> str:
    data = load("long_input", results)
    return measured(["long_input"], long_input.markdown(data["rows"], _args(data)), results)


def suite_block(results: Path) -> str:
    data = load("suite_flops", results)
    table = suite_flops.render(data["rows"], data["matmul_gflops"], data["workers"], data["args"]["scale"])
    return measured(["suite_flops"], table, results)


# {page under docs/: {block name: its renderer}}; a block's tables sit beside the prose that reads them
PAGES = {
    "performance.md": {"machines": machines_block, "ops": ops_block, "zoo-ops": zoo_ops_block},
    "performance-training.md": {
        "train-step": train_step_block,
        "native": native_block,
        "optimizers": optimizers_block,
        "compile": compile_block,
        "batch": batch_block,
        "cuda": cuda_block,
        "suite": suite_block,
    },
    "performance-layers.md": {
        "bilinear": bilinear_block,
        "fixedpoint": fixedpoint_block,
        "long-input": long_input_block,
    },
}


def performance_files(root: Path = ROOT) -> tuple[dict[Path, str], dict[Path, dict[str, str]]]:
    """What the benchmarks' JSON generates under the checkout `root`: no whole page, and the blocks of
    each performance page (the form `statetrack docs` reads from every generator)."""
    results = root / "benchmarks" / "results"
    return {}, {
        root / "docs" / page: {name: render(results) for name, render in blocks.items()}
        for page, blocks in PAGES.items()
    }
