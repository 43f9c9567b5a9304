"""The tables of docs/performance.md, rendered from the benchmarks' JSON output in benchmarks/results/.

    python benchmarks/tables.py            # print every generated block
    python benchmarks/tables.py --write    # fill the page's blocks
    python benchmarks/tables.py --check    # exit 1 if a block differs from its generation

Each block of the page between `<!-- bench:NAME -->` and `<!-- /bench:NAME -->` holds the commands
that re-measure it (read back from each JSON file: its arguments and environment, see
benchmarks/common.py) and the tables, rendered from those files by the benchmark's own Markdown
renderer. Nothing is measured here, so the page changes only when a JSON file does.
"""

from __future__ import annotations

import argparse
import json
import re
import shlex
import sys
from argparse import Namespace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
PAGE = ROOT / "docs" / "performance.md"
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "benchmarks"))

import bilinear  # noqa: E402
import fixedpoint  # noqa: E402
import long_input  # noqa: E402
import suite_flops  # noqa: E402
import train_step  # noqa: E402
import zoo_ops  # noqa: E402

import ops  # noqa: E402


def load(name: str, results: Path = RESULTS) -> dict:
    path = results / f"{name}.json"
    if not path.exists():
        sys.exit(f"error: {path} is missing; measure it with the command its block in {PAGE.name} shows")
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
    lines = ["| results file | CPU | cores | GPU | torch threads | torch | Python | measured |",
             "| --- | --- | ---: | --- | ---: | --- | --- | --- |"]
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
    lines = [f"ms per training step, batch {first['batch']}, d_model {first['d_model']}, "
             f"{native['threads']} thread(s); x LSTM of the same run in brackets.", "",
             "| model | T | layers | compiled loops: ms (x LSTM) | PyTorch forms: ms (x LSTM) | PyTorch / compiled |",
             "| --- | ---: | ---: | ---: | ---: | ---: |"]
    for r in sorted(native["rows"], key=lambda r: (r["T"], r["layers"])):
        t = by[(r["model"], r["T"], r["layers"])]
        lines.append(f"| {r['model']} | {r['T']} | {r['layers']} | {r['ms']:.1f} ({r['x_lstm']:.1f}) | "
                     f"{t['ms']:.1f} ({t['x_lstm']:.1f}) | {t['ms'] / r['ms']:.2f}x |")
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


BLOCKS = {
    "machines": machines_block,
    "ops": ops_block,
    "zoo-ops": zoo_ops_block,
    "train-step": train_step_block,
    "native": native_block,
    "optimizers": optimizers_block,
    "compile": compile_block,
    "batch": batch_block,
    "cuda": cuda_block,
    "bilinear": bilinear_block,
    "fixedpoint": fixedpoint_block,
    "long-input": long_input_block,
    "suite": suite_block,
}

BLOCK = re.compile(r"(<!-- bench:(?P<name>[a-z-]+) -->\n)(.*?)(<!-- /bench:(?P=name) -->)", re.S)


def blocks(results: Path = RESULTS) -> dict[str, str]:
    """{block name: its generated text}."""
    return {name: render(results) for name, render in BLOCKS.items()}


def fill(text: str, generated: dict[str, str]) -> str:
    """`text` with every block replaced by its generation; a block with no generator is an error."""
    unknown = sorted(set(m.group("name") for m in BLOCK.finditer(text)) - set(generated))
    if unknown:
        raise SystemExit(f"error: {PAGE.name} has blocks no generator renders: {', '.join(unknown)} "
                         f"(known: {', '.join(generated)})")
    return BLOCK.sub(lambda m: m.group(1) + generated[m.group("name")] + "\n" + m.group(4), text)


def problems(text: str, generated: dict[str, str]) -> list[str]:
    """What keeps `text` from being its own generation: blocks missing from the page, or stale."""
    found = [m.group("name") for m in BLOCK.finditer(text)]
    issues = [f"block {name!r} is missing from the page" for name in generated if name not in found]
    issues += [f"block {name!r} appears {found.count(name)} times" for name in dict.fromkeys(found)
               if found.count(name) > 1]
    current = {m.group("name"): m.group(3) for m in BLOCK.finditer(text)}
    issues += [f"block {name!r} has no generator (known: {', '.join(generated)})" for name in current
               if name not in generated]
    issues += [f"block {name!r} differs from its generation" for name in current
               if name in generated and current[name] != generated[name] + "\n"]
    return issues


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    action = parser.add_mutually_exclusive_group()
    action.add_argument("--write", action="store_true", help=f"fill the generated blocks of {PAGE.relative_to(ROOT)}")
    action.add_argument("--check", action="store_true", help="exit 1 if a generated block differs from its generation")
    args = parser.parse_args(argv)
    generated = blocks()
    if not (args.write or args.check):
        for name, text in generated.items():
            print(f"<!-- bench:{name} -->\n{text}\n<!-- /bench:{name} -->\n")
        return 0
    text = PAGE.read_text()
    if args.check:
        issues = problems(text, generated)
        for issue in issues:
            print(f"{PAGE.relative_to(ROOT)}: {issue}", file=sys.stderr)
        if issues:
            print("re-render with: .venv/bin/python benchmarks/tables.py --write", file=sys.stderr)
        return 1 if issues else 0
    filled = fill(text, generated)
    missing = [name for name in generated if f"<!-- bench:{name} -->" not in filled]
    if filled != text:
        PAGE.write_text(filled)
    if missing:
        print(f"note: {PAGE.relative_to(ROOT)} has no block for {', '.join(missing)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
