"""The calibration of the state table's protocol: the table's own spec, on the cells whose answer the
works establish, under each setting of the knobs that decide whether an exact solution is found
cheaply (the stack, the rate, the steps, the batch, the heads, the width, the training length).

    python benchmarks/table_calibration.py                      # every setting, one after another
    python benchmarks/table_calibration.py no-mlp-1000 no-mlp-4000 --results-dir results/calibration
    python benchmarks/table_calibration.py --list               # the settings and their overrides

Each setting is `statetrack run` of the table's spec (src/statetrack/experiments/tables/state-table.yaml)
with the overrides below: the known positives DeltaProduct_2 [-1,1] (Z2, Z3, S3; Siems et al.
2025), DeltaNet, Mamba and Mamba-3 [-1,1] (Z2), PD-SSM (Z2, Z3, S3; Terzić et al. 2025) and the LSTM
(every rung), beside DeltaNet [0,1], which provably cannot represent parity (Grazzi et al. 2025, Thm.
1); seeds 0 and 1, no early stop. docs/state-table.md lists what each setting measured. Figures only,
no assertions; the runs go to the results store, so a setting interrupted resumes where it stopped.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

SPEC = Path(__file__).resolve().parents[1] / "src" / "statetrack" / "experiments" / "tables" / "state-table.yaml"
CELLS = [
    "tasks=[{name: word_problem, group: Z2}, {name: word_problem, group: Z3}, {name: word_problem, group: S3}]",
    "models=[{name: deltaproduct, n_h: 2, eig_range: '[-1,1]'}, {name: deltanet, eig_range: '[-1,1]'}, "
    "{name: mamba, eig_range: '[-1,1]'}, {name: mamba3, eig_range: '[-1,1]'}, {name: pdssm}, {name: lstm}, "
    "{name: deltanet, eig_range: '[0,1]'}]",
    "seeds=[0, 1]",
    "train.early_stop_fit=null",
]
LONG = ["train.steps=3000", "train.warmup=300"]
RATES = ["lrs=[5.0e-4, 1.0e-3, 2.0e-3]", "seeds=[0, 1, 2]"]
LENGTH32 = [
    "lrs=[1.0e-3, 2.0e-3]",
    "seeds=[0, 1, 2]",
    "train.min_length=32",
    "train.max_length=32",
    "eval.lengths=[32, 128, 512]",
]
Z2_MODELS = (
    "{name: bilinear, structure: rotation}, {name: deltanet, eig_range: '[-1,1]'}, {name: deltanet, eig_range: '[0,1]'}, "
    "{name: mamba, eig_range: '[-1,1]'}, {name: rwkv7, eig_range: '[-1,1]'}, {name: kda, eig_range: '[-1,1]'}, "
    "{name: kda, eig_range: '[0,1]'}, {name: deltaproduct, n_h: 2, eig_range: '[-1,1]'}, "
    "{name: deltaproduct, n_h: 2, eig_range: '[0,1]'}, {name: gated_deltaproduct, eig_range: '[-1,1]'}, "
    "{name: pdssm}, {name: mamba3, eig_range: '[-1,1]'}, {name: deltaformer, eig_range: '[-1,1]'}, "
    "{name: path_attention, eig_range: '[-1,1]'}"
)
GROUPS = (
    "{name: word_problem, group: Z3}, {name: word_problem, group: Z5}, {name: word_problem, group: S3}, "
    "{name: fsm, states: 6, supervise: all}"
)
GROUP_MODELS = (
    "{name: bilinear, structure: rotation}, {name: deltaproduct, n_h: 2, eig_range: '[-1,1]'}, "
    "{name: gated_deltaproduct, eig_range: '[-1,1]'}, {name: pdssm}, {name: deltanet, eig_range: '[-1,1]'}"
)
# the known positives that the table's first budget (1000 steps) leaves undecided, each at the rate its
# pilot chose, with 16x the steps: whether a larger budget is what they lack
BUDGET16K = ["seeds=[0, 1, 2]", "train.steps=16000", "train.warmup=1600"]
SETTINGS = {
    "mlp-1000": ["model_defaults.mlp=true", "lrs=[1.0e-3]"],
    "mlp-3000": ["model_defaults.mlp=true", "lrs=[2.0e-3]", *LONG],
    "mlp-3000-batch256": ["model_defaults.mlp=true", "lrs=[2.0e-3]", "train.batch_size=256", *LONG],
    "mlp-3000-one-head": [
        "model_defaults.mlp=true",
        "lrs=[2.0e-3]",
        *LONG,
        "models=[{name: deltaproduct, n_h: 2, eig_range: '[-1,1]', num_heads: 1}, "
        "{name: deltanet, eig_range: '[-1,1]', num_heads: 1}, {name: deltanet, eig_range: '[0,1]', num_heads: 1}]",
    ],
    "mlp-length64": [
        "model_defaults.mlp=true",
        "lrs=[2.0e-3]",
        "train.min_length=64",
        "train.max_length=64",
        "eval.lengths=[64, 256]",
    ],
    "no-mlp-1000": ["lrs=[1.0e-3, 2.0e-3]"],
    "no-mlp-3000": ["lrs=[2.0e-3]", *LONG],
    "no-mlp-4000": ["lrs=[2.0e-3]", "train.steps=4000", "train.warmup=400"],
    # the table's spec with no early stop, every pilot rate and three seeds, on the mixers' known positives
    # and a few provable negatives beside them: what a rate chosen per cell on the training lengths reads
    # (benchmarks/table_rates.py reads it: the rate whose seed 0 ends with the lowest training loss)
    "rates-z2": [*RATES, "tasks=[{name: word_problem, group: Z2}]", f"models=[{Z2_MODELS}]"],
    "rates-groups": [*RATES, f"tasks=[{GROUPS}]", f"models=[{GROUP_MODELS}]"],
    # the same cells at twice the training length (32, read at 128 and 512), the works' two rates
    "length32-z2": [*LENGTH32, "tasks=[{name: word_problem, group: Z2}]", f"models=[{Z2_MODELS}]"],
    # the Z2 cells at twice the width (64; the works train at 128 to 512), every pilot rate, three seeds
    "width64-z2": [*RATES, "model_defaults.d_model=64", "tasks=[{name: word_problem, group: Z2}]", f"models=[{Z2_MODELS}]"],
    "budget16k-z2": [
        *BUDGET16K,
        "tasks=[{name: word_problem, group: Z2}]",
        "models=[{name: deltanet, eig_range: '[-1,1]', lrs: [1.0e-3]}, {name: rwkv7, eig_range: '[-1,1]', lrs: [5.0e-4]}, "
        "{name: gated_deltaproduct, eig_range: '[-1,1]', lrs: [2.0e-3]}, {name: pdssm, lrs: [2.0e-3]}, "
        "{name: path_attention, eig_range: '[-1,1]', lrs: [5.0e-4]}, {name: deltaformer, eig_range: '[-1,1]', lrs: [2.0e-3]}]",
    ],
    "budget16k-z3": [
        *BUDGET16K,
        "tasks=[{name: word_problem, group: Z3}]",
        "models=[{name: deltaproduct, n_h: 2, eig_range: '[-1,1]', lrs: [5.0e-4]}]",
    ],
    "budget16k-groups": [
        *BUDGET16K,
        "lrs=[2.0e-3]",
        "tasks=[{name: word_problem, group: Z5}, {name: word_problem, group: S3}, {name: fsm, states: 6, supervise: all}]",
        "models=[{name: deltaproduct, n_h: 2, eig_range: '[-1,1]'}, {name: pdssm}]",
    ],
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("settings", nargs="*", help=f"settings to run (default: all): {', '.join(SETTINGS)}")
    parser.add_argument("--results-dir", default="results/calibration")
    parser.add_argument("--workers", default="2")
    parser.add_argument("--list", action="store_true", help="print each setting's overrides and exit")
    args = parser.parse_args(argv)
    unknown = [s for s in args.settings if s not in SETTINGS]
    if unknown:
        parser.error(f"unknown setting(s) {', '.join(unknown)}; expected some of: {', '.join(SETTINGS)}")
    for name in args.settings or SETTINGS:
        overrides = [*CELLS, *SETTINGS[name]]
        if args.list:
            print(f"{name}: {' '.join(SETTINGS[name])}")
            continue
        command = ["statetrack", "run", str(SPEC), *overrides, "--name", f"calibration-{name}"]
        command += ["--results-dir", args.results_dir, "--workers", args.workers, "--no-progress"]
        print("$", " ".join(command), flush=True)
        if subprocess.run(command).returncode:
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
