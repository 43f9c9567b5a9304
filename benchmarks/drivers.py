"""Wall time of one experiment divided between several `statetrack run` drivers on one store, side by
side with one driver, in one run of this script (docs/scaling.md, "Several drivers on one experiment").

    python benchmarks/drivers.py --markdown                      # the demo with seeds 0 and 1 (6 runs)
    python benchmarks/drivers.py --markdown train.steps=500      # the same grid, shorter runs
    python benchmarks/drivers.py --markdown --threads-apart      # also two drivers of two stores

Each case starts its drivers at once (`statetrack run demo 'seeds=[0,1]' --workers 1`, each in a
fresh results folder, or one shared by the drivers of a case) and waits for all of them:
- one driver, one torch thread (`OMP_NUM_THREADS=1`);
- two drivers of one store, one thread each: what two machines sharing a results folder give;
- two drivers of one store with torch's threads: each drops to one thread while it sees the other;
- with `--threads-apart`, two drivers of two stores with torch's threads (nothing to see: each keeps
  every thread), against the same with one thread each.
A row gives the wall time and the runs each driver trained (its `[k/N]` lines). Run it on an
otherwise idle machine; figures only, no assertions.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import emit  # noqa: E402

STATETRACK = str(Path(sys.executable).with_name("statetrack"))
RUN_LINE = re.compile(r"^\[\d+/\d+\] ", re.M)


def run_case(name: str, drivers: int, one_thread: bool, shared: bool, overrides: list[str], folder: Path) -> dict:
    """Start `drivers` drivers of the demo grid together (one results folder if `shared`), wait for all."""
    env = dict(os.environ)
    if one_thread:
        env["OMP_NUM_THREADS"] = "1"
    else:
        env.pop("OMP_NUM_THREADS", None)
    command = [STATETRACK, "run", "demo", "seeds=[0,1]", *overrides, "--workers", "1", "--no-progress"]
    start = time.perf_counter()
    procs = []
    for i in range(drivers):
        results = folder / re.sub(r"\W+", "-", name) / ("shared" if shared else f"driver{i}")
        procs.append(
            subprocess.Popen(
                [*command, "--results-dir", str(results)],
                env=env,
                text=True,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
            )
        )
    outputs = [p.communicate()[0] for p in procs]
    wall = time.perf_counter() - start
    failed = [p.returncode for p in procs if p.returncode]
    if failed:
        raise SystemExit(f"{name}: a driver exited with status {failed[0]}:\n{outputs[0][-2000:]}")
    return {
        "case": name,
        "drivers": drivers,
        "one_thread": one_thread,
        "shared_store": shared,
        "wall_s": round(wall, 1),
        "runs": [len(RUN_LINE.findall(o)) for o in outputs],
    }


def table(rows, args) -> str:
    lines = [f"statetrack run demo 'seeds=[0,1]' {' '.join(args.overrides)} --workers 1".rstrip()]
    lines += [f"{r['case']:<48} {r['wall_s']:>7.1f} s  runs {' + '.join(map(str, r['runs']))}" for r in rows]
    return "\n".join(lines)


def markdown(rows, args) -> str:
    lines = ["| | wall time | runs trained |", "| --- | ---: | --- |"]
    lines += [f"| {r['case']} | {r['wall_s']:.0f} s | {' + '.join(map(str, r['runs']))} |" for r in rows]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("overrides", nargs="*", help="key=value changes to the demo's spec (e.g. train.steps=500)")
    parser.add_argument("--json", action="store_true", help="print the JSON report instead of a table")
    parser.add_argument("--markdown", action="store_true", help="print a Markdown table (docs/scaling.md)")
    parser.add_argument(
        "--threads-apart",
        action="store_true",
        help="also time two drivers of two stores, with torch's threads and with one each",
    )
    args = parser.parse_args()
    cases = [
        ("one driver, one torch thread (`OMP_NUM_THREADS=1`)", 1, True, True),
        ("two drivers of one store, one thread each, started together", 2, True, True),
        ("two drivers of one store, torch's threads", 2, False, True),
    ]
    if args.threads_apart:
        cases += [
            ("two drivers of two stores, torch's threads", 2, False, False),
            ("two drivers of two stores, one thread each", 2, True, False),
        ]
    with tempfile.TemporaryDirectory(prefix="statetrack-drivers-") as folder:
        rows = [run_case(*case, args.overrides, Path(folder)) for case in cases]
    emit(rows, args, table, markdown)


if __name__ == "__main__":
    main()
