"""Parameter-matched sizing (statetrack.models.sizing): per-layer counts, fitting d_model to a budget
(Anonymous 2025 compares models at about 3M parameters per layer), the `params`/`width` spec keys
and `statetrack models --params/--width`."""

import textwrap

import pytest

from cli_helpers import run_cli
from statetrack.errors import StatetrackError
from statetrack.experiments import expand, load_spec
from statetrack.models import sizing, zoo

PAPER_BUDGET = 3e6


def counts_by_width(name: str, up_to: float) -> dict[int, int]:
    """Every buildable width's per-layer count, from 1 until the count passes `up_to`."""
    counts = {}
    for d in range(1, 1025):
        try:
            counts[d] = sizing.layer_parameters({"name": name, "d_model": d})
        except StatetrackError:
            continue
        if counts[d] > up_to:
            break
    return counts


# ---- counting ------------------------------------------------------------------------------------
@pytest.mark.parametrize("d", [1, 8, 37])
def test_layer_parameters_is_a_hand_count(d):
    rnn = 2 * d * d + 2 * d  # torch.nn.RNN with hidden = d_model: W_ih, W_hh, b_ih, b_hh
    norm = 2 * d  # a LayerNorm's weight and bias
    mlp = (d * 4 * d + 4 * d) + (4 * d * d + d)  # Linear(d, 4d), Linear(4d, d)
    assert sizing.layer_parameters({"name": "rnn", "d_model": d, "mlp": False}) == rnn + norm
    assert sizing.layer_parameters({"name": "rnn", "d_model": d}) == rnn + norm + norm + mlp


def test_layer_parameters_is_one_block_of_the_real_model():
    spec = {"name": "deltanet", "d_model": 16, "num_layers": 3}
    model = zoo.build_model(spec, vocab_size=11, num_classes=5)  # on the CPU, a real task's sizes
    block = sum(p.numel() for p in model.blocks[0].parameters() if p.requires_grad)
    assert sizing.layer_parameters(spec) == block
    assert sizing.layer_parameters({**spec, "num_layers": 1}) == block  # independent of depth and vocabulary
    assert sizing.stack_parameters(spec) == 3 * block
    assert sizing.stack_parameters(spec) == model.num_parameters() - sum(
        p.numel() for m in (model.embedding, model.norm, model.readout) for p in m.parameters())


def test_layer_parameters_of_an_unbuildable_width_is_one_line_error():
    with pytest.raises(StatetrackError, match="d_model 7 is not divisible by num_heads 2"):
        sizing.layer_parameters({"name": "transformer", "d_model": 7})


# ---- fitting -------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", list(zoo.MODELS))
def test_every_model_fits_the_paper_budget(name):
    fitted = sizing.fit_width({"name": name}, PAPER_BUDGET)
    count = sizing.layer_parameters(fitted)
    assert abs(count - PAPER_BUDGET) <= 0.05 * PAPER_BUDGET, (name, fitted["d_model"], count)
    assert fitted == zoo.resolve({"name": name, "d_model": fitted["d_model"]})  # resolved, concrete
    # no buildable width nearby is nearer the budget
    for d in range(max(1, fitted["d_model"] - 16), fitted["d_model"] + 17):
        try:
            other = sizing.layer_parameters({**fitted, "d_model": d})
        except StatetrackError:
            continue
        assert abs(other - PAPER_BUDGET) >= abs(count - PAPER_BUDGET), (name, d, other, fitted["d_model"], count)


@pytest.mark.parametrize("name", list(zoo.MODELS))
def test_a_small_budget_gets_the_nearest_width_of_all(name):
    """At 2e4 per layer: the search agrees with trying every width, and fit_width accepts exactly the
    models with a width within 5% (not all have one: a fixed-size memory, or widths in steps of 8)."""
    budget = 2e4
    counts = counts_by_width(name, 3 * budget)
    best = min(counts, key=lambda d: (abs(counts[d] - budget), d))
    spec, count = sizing.nearest_width({"name": name}, budget)
    assert (spec["d_model"], count) == (best, counts[best])
    if abs(counts[best] - budget) <= 0.05 * budget:
        assert sizing.fit_width({"name": name}, budget)["d_model"] == best
    else:
        with pytest.raises(StatetrackError, match=rf"model '{name}'.*20,000 parameters per layer within 5%; nearest: d_model {best} "):
            sizing.fit_width({"name": name}, budget)


@pytest.mark.parametrize("name", ["rnn", "lstm", "deltanet", "transformer", "mamba"])
def test_common_models_fit_a_small_budget(name):
    fitted = sizing.fit_width(name, 2e4)
    assert abs(sizing.layer_parameters(fitted) - 2e4) <= 0.05 * 2e4


def test_an_impossible_budget_names_the_model_the_budget_and_the_nearest_count():
    smallest = sizing.layer_parameters({"name": "rnn", "d_model": 1})
    with pytest.raises(StatetrackError, match=rf"model 'rnn' \(RNN\): no d_model gives 10 parameters per layer within 5%; "
                                              rf"nearest: d_model 1 with {smallest} "):
        sizing.fit_width({"name": "rnn"}, 10)
    with pytest.raises(StatetrackError, match="no d_model gives 1,000,000,000,000,000,000 parameters per layer"):
        sizing.fit_width({"name": "rnn"}, 1e18)  # past the widest width searched


def test_the_search_builds_few_widths():
    """Doubling and bisection, not a scan of every width (about 500 at 3e6)."""
    for name in ("rnn", "mamba2", "transformer"):
        sizing._cached_count.cache_clear()
        sizing.fit_width(name, PAPER_BUDGET)
        assert sizing._cached_count.cache_info().currsize < 80, name


def test_fit_keeps_the_other_settings_and_skips_unbuildable_widths():
    fitted = sizing.fit_width({"name": "transformer", "num_heads": 7, "mlp": False, "num_layers": 4}, 1e5)
    assert fitted["d_model"] % 7 == 0 and fitted["num_heads"] == 7 and not fitted["mlp"] and fitted["num_layers"] == 4
    preset = sizing.fit_width("deltanet-neg", 1e5)
    assert preset["name"] == "deltanet" and preset["eig_range"] == "[-1,1]"


@pytest.mark.parametrize("budget", [3e6, 3000000, "3e6", "3.0e+6", "3_000_000"])
def test_budget_forms(budget):
    assert sizing.fit_width("rnn", budget)["d_model"] == sizing.fit_width("rnn", 3e6)["d_model"]


@pytest.mark.parametrize("budget", ["abc", True, -5, 0, float("nan"), [3e6], None])
def test_bad_budgets(budget):
    with pytest.raises(StatetrackError, match="must be a positive number of parameters per layer"):
        sizing.fit_width("rnn", budget)


# ---- the spec keys -------------------------------------------------------------------------------
SPEC = """
name: sized
task: {name: parity}
models: %(models)s
model_defaults: %(defaults)s
train: {steps: 1, batch_size: 2, min_length: 2, max_length: 3, device: cpu}
eval: {lengths: [4], samples: 2}
lrs: [1.0e-3]
seeds: [0]
"""


def expand_spec(tmp_path, models, defaults="{}", overrides=()):
    path = tmp_path / "sized.yaml"
    path.write_text(textwrap.dedent(SPEC % {"models": models, "defaults": defaults}))
    return expand(load_spec(str(path), overrides=list(overrides)))


def test_params_in_model_defaults_fits_each_model(tmp_path):
    runs = expand_spec(tmp_path, "[rnn, {name: transformer, num_heads: 4}]", "{params: 3e6, num_layers: 2}")
    fitted = [sizing.fit_width({"name": "rnn", "num_layers": 2}, 3e6),
              sizing.fit_width({"name": "transformer", "num_heads": 4, "num_layers": 2}, 3e6)]
    assert [r.model for r in runs] == fitted
    assert all("params" not in r.model and "width" not in r.model for r in runs)
    assert fitted[1]["d_model"] % 4 == 0
    # the stored spec is concrete: the same runs (same ids) as writing the chosen widths out
    explicit = expand_spec(tmp_path, f"[{{name: rnn, d_model: {fitted[0]['d_model']}}}, "
                                     f"{{name: transformer, num_heads: 4, d_model: {fitted[1]['d_model']}}}]", "{num_layers: 2}")
    assert [r.id for r in runs] == [r.id for r in explicit]


@pytest.mark.parametrize("defaults", ["{params: 3e6}", "{params: 3.0e+6}", "{params: 3000000}"])
def test_params_yaml_forms(tmp_path, defaults):
    (run,) = expand_spec(tmp_path, "[rnn]", defaults)
    assert run.model["d_model"] == sizing.fit_width("rnn", 3e6)["d_model"]


def test_params_from_a_command_line_override(tmp_path):
    (run,) = expand_spec(tmp_path, "[rnn]", overrides=["model_defaults.params=2e4"])
    assert run.model == sizing.fit_width("rnn", 2e4)


def test_width_is_d_model(tmp_path):
    runs = expand_spec(tmp_path, "[rnn, {name: lstm, width: 12}, {name: gru, d_model: 10}]", "{width: 16}")
    assert [r.model["d_model"] for r in runs] == [16, 12, 10]
    assert all("width" not in r.model for r in runs)


def test_an_entry_overrides_the_defaults_way_of_sizing(tmp_path):
    fitted = sizing.fit_width("rnn", 2e4)["d_model"]
    runs = expand_spec(tmp_path, "[{name: rnn, d_model: 10}, {name: lstm, width: 11}, gru]", "{params: 2e4}")
    assert [r.model["d_model"] for r in runs] == [10, 11, sizing.fit_width("gru", 2e4)["d_model"]]
    runs = expand_spec(tmp_path, "[{name: rnn, params: 2e4}, lstm]", "{d_model: 10}")
    assert [r.model["d_model"] for r in runs] == [fitted, 10]
    runs = expand_spec(tmp_path, "[{name: rnn, params: 2e4}]", "{width: 10}")
    assert runs[0].model["d_model"] == fitted


@pytest.mark.parametrize(
    "models, defaults, expected",
    [
        ("[{name: rnn, width: 8, d_model: 8}]", "{}", "model 'rnn': give either 'width' or 'd_model'"),
        ("[{name: rnn, params: 3e6, d_model: 8}]", "{}", "model 'rnn': give either 'params' .* or 'd_model', not both"),
        ("[{name: rnn, params: 3e6, width: 8}]", "{}", "model 'rnn': give either 'params' .* or 'width', not both"),
        ("[rnn]", "{params: 3e6, width: 8}", "model_defaults: give either 'params' .* or 'width', not both"),
        ("[rnn]", "{width: 8, d_model: 8}", "model_defaults: give either 'width' or 'd_model'"),
        ("[rnn]", "{params: lots}", "model_defaults: params must be a positive number of parameters per layer .*'lots'"),
        ("[{name: rnn, params: [1, 2]}]", "{}", r"model 'rnn': params must be a positive number .*\[1, 2\]"),
        ("[rnn]", "{width: 8.5}", "model_defaults: width must be a positive integer"),
        ("[rnn]", "{params: 10}", r"model 'rnn' \(RNN\): no d_model gives 10 parameters per layer within 5%"),
        ("[rnn]", "[1]", "model_defaults must be a mapping"),
    ],
)
def test_conflicting_and_bad_sizing_keys(tmp_path, models, defaults, expected):
    with pytest.raises(StatetrackError, match=expected):
        expand_spec(tmp_path, models, defaults)


# ---- the CLI -------------------------------------------------------------------------------------
def test_cli_models_params_prints_every_model(capsys):
    code, out, err = run_cli(capsys, "models", "--params", "3e6")
    assert code == 0 and not err
    lines = out.splitlines()
    assert "3,000,000 trainable parameters per layer" in lines[0]
    assert lines[1].split() == ["model", "display", "name", "d_model", "per", "layer", "vs", "budget"]
    rows = {line.split()[0]: line for line in lines[3:]}
    assert set(rows) == set(zoo.MODELS)
    for name, line in rows.items():
        fitted = sizing.fit_width(name, 3e6)
        assert zoo.display_name(fitted) in line
        d_model, count, deviation = line.split()[-3:]
        assert int(d_model) == fitted["d_model"]
        assert int(count.replace(",", "")) == sizing.layer_parameters(fitted)
        assert abs(float(deviation.rstrip("%"))) <= 5


def test_cli_models_width_and_settings(capsys):
    code, out, _ = run_cli(capsys, "models", "rnn", "transformer", "--width", "64", "--num-layers", "3", "--set", "mlp=false", "num_heads=4")
    assert code == 0
    rows = {line.split()[0]: line.split() for line in out.splitlines()[3:]}
    assert set(rows) == {"rnn", "transformer"}
    assert rows["rnn"][-3:] == ["64", f"{sizing.layer_parameters({'name': 'rnn', 'd_model': 64, 'mlp': False}):,}",
                                f"{3 * sizing.layer_parameters({'name': 'rnn', 'd_model': 64, 'mlp': False}):,}"]
    per_layer = sizing.layer_parameters({"name": "transformer", "d_model": 64, "mlp": False, "num_heads": 4})
    assert rows["transformer"][-2] == f"{per_layer:,}"


def test_cli_models_marks_budgets_out_of_reach(capsys):
    code, out, err = run_cli(capsys, "models", "rnn", "transformer", "--width", "7")  # the table, then the failing row's error
    assert code == 2 and "\nrnn " in out and "transformer: model 'transformer': d_model 7 is not divisible by num_heads 2" in err
    code, out, _ = run_cli(capsys, "models", "rnn", "--params", "10")
    assert code == 0 and "+" in out and "*" in out and "rnn: * no d_model comes within 5%" in out


def test_cli_models_without_flags_lists_as_before(capsys):
    code, out, _ = run_cli(capsys, "models")
    assert code == 0 and "parameters: " in out and "presets: " in out and "per layer" not in out
    code, out, _ = run_cli(capsys, "models", "mamba-neg", "lstm")  # names alone: only those models
    assert code == 0 and out.startswith("mamba ") and "\nlstm " in out and "deltanet" not in out


def test_pass_flops_counts_the_arithmetic_per_sequence():
    import torch

    lstm, task = {"name": "lstm", "d_model": 16}, {"name": "word_problem", "group": "S3"}
    forward = sizing.pass_flops(lstm, task, 8, backward=False)
    # the LSTM's gates: 2 x (4 d) x (d + d) per token, and the read-out's product on top
    assert forward >= 8 * 2 * 4 * 16 * 32
    assert sizing.pass_flops(lstm, task, 16, backward=False) == pytest.approx(2 * forward)  # linear in the length
    assert 2 * forward <= sizing.pass_flops(lstm, task, 8) <= 4 * forward  # the backward's two products per forward one
    assert sizing.pass_flops({**lstm, "d_model": 32}, task, 8, backward=False) > 3 * forward  # quadratic in the width
    torch.manual_seed(5)
    expected = torch.rand(3)
    torch.manual_seed(5)
    sizing.pass_flops({"name": "gru", "d_model": 8}, task, 4)  # builds a model, draws a batch
    assert torch.equal(torch.rand(3), expected)  # without touching the caller's random stream


# ---- memory: a layer's widest projection per token ------------------------------------------------------
@pytest.mark.parametrize("spec, floats", [
    ({"name": "pdssm", "d_model": 16, "state_size": 64}, 64 * 64),  # the N x N dictionary mixed per token
    ({"name": "mamba3", "d_model": 16, "expand": 64}, 2 * 64 * 16),  # at least x and z at the expanded width
    ({"name": "rwkv7", "d_model": 16, "num_heads": 500, "head_dim": 1}, 500),  # r, k, v at num_heads x head_dim
])
def test_token_bytes_covers_a_layers_own_width(spec, floats):
    assert sizing.token_bytes(spec) >= 4 * floats


def test_token_bytes_grows_with_the_setting_and_not_with_d_model_alone():
    small, large = (sizing.token_bytes({"name": "pdssm", "state_size": n}) for n in (16, 128))
    assert large == 64 * small  # N^2
    assert sizing.token_bytes({"name": "lstm", "d_model": 16}) <= 4 * 4 * 16  # a plain layer: its gates at most


def test_pass_flops_allocates_no_model_where_the_meta_device_counts(monkeypatch):
    def no_cpu_pass(*args):
        raise AssertionError("a model was built on the CPU to count its arithmetic")

    monkeypatch.setattr(sizing, "_check_pass_memory", no_cpu_pass)
    task = {"name": "word_problem", "group": "S3"}
    for name in ("lstm", "pdssm", "mamba3", "rwkv7", "transformer"):
        assert sizing.pass_flops({"name": name, "d_model": 8}, task, 5) > 0


def test_a_mixer_that_reads_its_values_is_counted_on_the_cpu_once_its_memory_is_checked(monkeypatch):
    from statetrack import limits

    task = {"name": "word_problem", "group": "S3"}
    assert sizing.pass_flops({"name": "fixedpoint", "d_model": 8}, task, 5) > 0  # its iterations read values
    monkeypatch.delenv(limits.LIFT, raising=False)
    monkeypatch.setattr(limits, "available_memory", lambda: 2**10)
    with pytest.raises(StatetrackError, match="model 'fixedpoint': counting its arithmetic at length 6 would take"):
        sizing.pass_flops({"name": "fixedpoint", "d_model": 8}, task, 6)
