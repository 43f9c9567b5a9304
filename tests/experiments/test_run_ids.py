"""The run ids of every shipped spec at every scale stay what they are: a stored run is found again
by its id, so a change to how a spec is resolved or expanded must not move them. The expected ids
(their count and the sha1 of the sorted list, per experiment and scale) are committed."""

import hashlib
import json
from pathlib import Path

import pytest

from statetrack.experiments.spec import expand, load_spec, shipped_specs
from statetrack.schema import SCALES

EXPECTED = json.loads((Path(__file__).parents[1] / "data" / "run_ids.json").read_text())


def test_every_shipped_spec_and_scale_is_recorded():
    assert set(EXPECTED) == {f"{name}:{scale}" for name in shipped_specs() for scale in SCALES}


@pytest.mark.parametrize("key", sorted(EXPECTED))
def test_run_ids_of_shipped_specs_are_unchanged(key, monkeypatch):
    monkeypatch.setenv("STATETRACK_NO_SIZE_LIMIT", "1")  # the paper scale's runs exceed this machine's memory bound
    name, scale = key.split(":")
    ids = sorted(run.id for run in expand(load_spec(name, scale), check=False))
    assert {"runs": len(ids), "sha1": hashlib.sha1("\n".join(ids).encode()).hexdigest()} == EXPECTED[key]
