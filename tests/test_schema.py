"""The spec schema (statetrack.schema): one-line errors naming the key path, and the JSON Schema
`statetrack schema` prints, against which every shipped spec validates."""

import json
from importlib import resources

import jsonschema
import pytest
import yaml

from cli_helpers import run_cli
from statetrack.catalog import spec_json_schema
from statetrack.errors import StatetrackError
from statetrack.experiments.spec import shipped_specs
from statetrack.schema import TrainConfig, validate_spec

BASE = {"name": "t", "task": "parity", "models": ["lstm"], "eval": {"lengths": [4]}, "lrs": [1e-3], "seeds": [0]}


@pytest.fixture(scope="module")
def spec_schema():
    schema = spec_json_schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    return schema


def _raw(name: str) -> dict:
    return yaml.safe_load((resources.files("statetrack.experiments") / "specs" / f"{name}.yaml").read_text())


@pytest.mark.parametrize("name", sorted(shipped_specs()))
def test_every_shipped_spec_validates_against_the_json_schema(spec_schema, name):
    jsonschema.Draft202012Validator(spec_schema).validate(_raw(name))


@pytest.mark.parametrize("change, where", [
    ({"models": [{"name": "nosuchmodel"}]}, "models"),
    ({"models": [{"name": "deltanet", "eig_range": "[-2,1]"}]}, "models"),
    ({"models": [{"name": "lstm", "bogus": 1}]}, "models"),
    ({"task": {"name": "modadd", "m": "three"}}, "task"),
    ({"train": {"steps": 0}}, "train"),
    ({"selection": {"lr": "best"}}, "selection"),
    ({"scales": {"big": {}}}, "scales"),
    ({"paper": {"source": "x", "claims": [{"text": "t", "model": "LSTM", "at_least": "high"}]}}, "paper"),
])
def test_the_json_schema_refuses_what_the_library_refuses(spec_schema, change, where):
    """An editor flags the same mistakes: a model name or parameter not in the registry, a wrong type."""
    errors = list(jsonschema.Draft202012Validator(spec_schema).iter_errors({**BASE, **change}))
    assert errors and all(e.absolute_path and e.absolute_path[0] == where for e in errors), errors


def _keyed(spec_schema, kind):
    """{name: its parameters' schemas} of the ModelEntry or TaskEntry definition (keyed by name)."""
    return {e["then"]["properties"]["name"]["const"]: e["then"]["properties"] for e in spec_schema["$defs"][kind]["else"]["allOf"]}


def test_the_json_schema_names_every_models_and_tasks_parameters(spec_schema):
    entries = _keyed(spec_schema, "ModelEntry")
    assert entries["deltanet"]["eig_range"] == {"enum": ["[0,1]", "[-1,1]"], "default": "[0,1]"}
    assert entries["bilinear"]["mlp"]["type"] == "boolean" and "d_model" in entries["mamba"]
    tasks = _keyed(spec_schema, "TaskEntry")
    assert tasks["modadd"]["m"] == {"type": "integer", "default": 20} and "train" in tasks["modadd"]


@pytest.mark.parametrize("change, where, message", [
    ({"models": [{"name": "deltanet", "eig_rnge": "[-1,1]"}]}, ["models", 0], "('eig_rnge' was unexpected)"),
    ({"models": [{"name": "deltanett"}]}, ["models", 0, "name"], "'deltanett' is not one of ['bedouin'"),
    ({"models": ["deltanett"]}, ["models", 0], "'deltanett' is not one of ['bedouin'"),
    ({"models": [{"name": "deltanet", "eig_range": "[-2,1]"}]}, ["models", 0, "eig_range"], "is not one of ['[0,1]', '[-1,1]']"),
    ({"task": {"name": "modadd", "bogus": 1}}, ["task"], "('bogus' was unexpected)"),
])
def test_the_json_schemas_best_error_names_the_entrys_own_mistake(spec_schema, change, where, message):
    """An entry is checked against the parameters of the model or task it names: a typo is reported
    as an unknown parameter of that entry, not as a mismatch with every other model."""
    error = jsonschema.exceptions.best_match(jsonschema.Draft202012Validator(spec_schema).iter_errors({**BASE, **change}))
    assert list(error.absolute_path) == where and message in error.message, error.message


@pytest.mark.parametrize("change, message", [
    ({"train": {"steps": 0}}, "train.steps must be an integer >= 1, got 0"),
    ({"train": {"lr": 0.1}}, "train: lr is not a setting; each run's lr comes from the list 'lrs'"),
    ({"train": {"curriculum": [{"steps": 5, "length": 2}, {"steps": "many"}]}}, "train.curriculum[1].steps must be an integer >= 1, got 'many'"),
    ({"eval": {"lengths": [4], "samples": 0}}, "eval.samples must be an integer >= 1, got 0"),
    ({"task": None, "tasks": ["parity", {"name": "parity", "eval": {"chunk_size": 0}}]},
     "tasks[1].eval.chunk_size must be an integer >= 1 (or null: the whole input at once), got 0"),
    ({"lrs": [0.1, -1]}, "lrs[1] must be a number in (0, 10], got -1"),
    ({"seeds": [0, True]}, "seeds[1] must be an integer >= 0, got True"),
    ({"models": []}, "models must be a non-empty list, got []"),
    ({"selection": {"threshold": 0}}, "selection.threshold must be a number in (0, 1], got 0"),
    ({"paper": {"source": "x", "claims": [{"text": "t", "model": "LSTM", "below": 0.5, "seeds": "most"}]}},
     "unknown paper.claims[0].seeds 'most'; expected one of: majority, all, best"),
    ({"paper": {"source": "x", "claims": [{"text": "t", "model": "LSTM", "below": 0.5, "scale": "huge"}]}},
     "paper.claims[0]: unknown scale 'huge'; expected one of: quick, paper"),
    ({"bogus": 1}, "unknown key 'bogus'; expected one of: name, description, task, tasks, models"),
])
def test_errors_are_one_line_and_name_the_key_path(change, message):
    spec = {k: v for k, v in {**BASE, **change}.items() if v is not None}
    with pytest.raises(StatetrackError) as error:
        validate_spec(spec)
    assert str(error.value).startswith("experiment 't': ") and message in str(error.value) and "\n" not in str(error.value)


def test_train_config_is_checked_where_it_is_built():
    with pytest.raises(StatetrackError, match=r"^train\.batch_size must be an integer >= 1, got 0$"):
        TrainConfig(batch_size=0)
    with pytest.raises(StatetrackError, match=r"^train: dataset_balanced needs a fixed training set"):
        TrainConfig(dataset_balanced=True)
    config = TrainConfig.from_dict({"curriculum": [{"steps": 3, "length": 2}, {"steps": 2, "min_length": 3}], "max_length": 9})
    assert config.steps == 5 and [(s["end"], s["min_length"], s["max_length"]) for s in config.stages()] == [(3, 2, 2), (5, 3, 9)]
    assert config.betas == (0.9, 0.999) and TrainConfig(betas=[0.8, 0.9]).betas == (0.8, 0.9)


def test_the_schema_command_prints_it(capsys, spec_schema):
    code, out, _ = run_cli(capsys, "schema")
    assert code == 0 and json.loads(out) == json.loads(json.dumps(spec_schema))
