"""`statetrack results EXPERIMENT`: an experiment's results from the store, as text or JSON."""

from __future__ import annotations

import json

from statetrack.cli.common import STORE, Arg, Command, known_experiment, open_store
from statetrack.paths import check_name


def cmd_results(args) -> int:
    from statetrack.results.report import results_text
    from statetrack.results.scoring import score_store

    check_name(args.experiment)
    store = open_store(args)
    known_experiment(store, args.experiment)
    if args.json:
        plan = store.plan(args.experiment)
        print(json.dumps(store.results(args.experiment, plan.ids if plan else None), indent=1))
        return 0
    print(results_text(score_store(store, args.experiment, run_data=True)))
    return 0


RESULTS = Command(
    "results",
    "print an experiment's results",
    cmd_results,
    (
        STORE,
        Arg("experiment", metavar="EXPERIMENT"),
        Arg("--json", action="store_true", help="a JSON list, one object per (run, evaluation length)"),
    ),
)
