"""What the state table's cells read when each cell's learning rate is chosen on its own training
lengths, from a store where every rate trained every seed (`python benchmarks/table_calibration.py
rates-z2 rates-groups`). Two rules, both on the training length only, side by side:

- accuracy: the rate whose seed 0 has the best scaled accuracy at the training length, every rate within
  ACCURACY_TIE of it tied;
- loss: the rate whose seed 0 ends with the lowest training loss (the mean of the last `--windows` logged
  windows), every rate within `--tie` (relative; default statetable.LOSS_TIE) of it tied: the table's rule.

A cell reads `fitted · holding 4x · holding 16x` over the seeds at its chosen rate, the weakest over tied
rates in the table's order (`weakest`). Figures only, no assertions.

    python benchmarks/table_rates.py results/calibration/statetrack.db calibration-rates-z2 calibration-rates-groups
"""

from __future__ import annotations

import argparse
import sys
from collections import defaultdict

from statetrack.results import statetable as st
from statetrack.results.selection import final_loss
from statetrack.schema import FIT_THRESHOLD
from statetrack.store import Store

ACCURACY_TIE = 0.005  # the accuracy rule's tie: scaled accuracies this close to the best


def seed_figures(store: Store, run: dict, windows: int) -> dict:
    """One run's scaled accuracy by length and its final training loss."""
    scaled = {e["length"]: e["scaled_accuracy"] for e in store.evals(run["id"])}
    loss = final_loss(store.curves(run["id"]), windows)
    return {"scaled": scaled, "loss": float("inf") if loss is None else loss}


def reading(seeds: dict[int, dict], train_length: int) -> tuple[int, ...]:
    """(fitted, holding 4x, holding 16x) over the seeds of one rate, at the table's thresholds."""
    fitted = [f for f in seeds.values() if f["scaled"].get(train_length, 0.0) >= FIT_THRESHOLD]
    holding = [sum(f["scaled"].get(train_length * k, 0.0) >= st.HOLD for f in fitted) for k in st.FACTORS]
    return (len(fitted), *holding)


def weakest(readings: list[tuple[int, ...]]) -> tuple[int, ...]:
    """The table's weakest reading over tied rates: fewest holding 4x, then 16x, then fewest fitted."""
    return min(readings, key=lambda r: (r[1], r[2], r[0]))


def chosen(per_rate: dict[float, dict[int, dict]], key, best_is_low: bool, tie) -> list[float]:
    """The rates tied with the best by seed 0's `key` figure."""
    figures = {lr: key(seeds[0]) for lr, seeds in per_rate.items() if 0 in seeds}
    best = (min if best_is_low else max)(figures.values())
    return sorted(lr for lr, v in figures.items() if tie(v, best))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("store")
    parser.add_argument("experiments", nargs="+")
    parser.add_argument("--train-length", type=int, default=16)
    parser.add_argument("--windows", type=int, default=3, help="logged training windows averaged (default 3)")
    parser.add_argument("--tie", type=float, default=st.LOSS_TIE, help=f"relative loss tie (default {st.LOSS_TIE:g})")
    args = parser.parse_args(argv)
    store = Store(args.store, read_only=True)
    cells: dict[tuple[str, str], dict[float, dict[int, dict]]] = defaultdict(lambda: defaultdict(dict))
    for experiment in args.experiments:
        for run in store.runs(experiment):
            if run["status"] == "done":
                cells[run["model"], run["task"]][float(run["lr"])][run["seed"]] = seed_figures(store, run, args.windows)
    length = args.train_length
    print(f"{'model':24} {'task':24} {'per rate (fit·4x·16x; seed 0 loss)':58} {'accuracy rule':22} loss rule")
    for (model, task), per_rate in sorted(cells.items()):
        by_rate = {lr: reading(seeds, length) for lr, seeds in sorted(per_rate.items())}
        rules = []
        for key, low, tie in (
            (lambda f: f["scaled"].get(length, 0.0), False, lambda v, best: v >= best - ACCURACY_TIE),
            (lambda f: f["loss"], True, lambda v, best: v <= best * (1 + args.tie)),
        ):
            rates = chosen(per_rate, key, low, tie)
            rules.append(
                f"{'·'.join(map(str, weakest([by_rate[lr] for lr in rates])))} at {', '.join(f'{lr:g}' for lr in rates)}"
            )
        rates_text = "  ".join(
            f"{lr:g}: {'·'.join(map(str, r))} ({per_rate[lr][0]['loss']:.0e})" if 0 in per_rate[lr] else f"{lr:g}: -"
            for lr, r in by_rate.items()
        )
        print(f"{model[:24]:24} {task[:24]:24} {rates_text:58} {rules[0]:22} {rules[1]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
