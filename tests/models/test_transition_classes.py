"""Each mixer declares its transition class in its own file (`layers.registry.DeclaresTransition`), as a
function of its resolved spec: every registered model's declaration names a class theory knows, the
spectrum its materialised transitions have lies where that class says, a declaration outside the
vocabulary fails at registration, and a user's mixer declares its class the same way."""

import pytest
import torch
from torch import nn

from statetrack import theory
from statetrack.errors import StatetrackError
from statetrack.layers.common import EIG_RANGES
from statetrack.layers.registry import TransitionEigenvalues, register_model
from statetrack.models import zoo
from statetrack.tasks import make_task

D = 8


def specs():
    """Every registered model, at each eig_range where it has one."""
    out = []
    for name in sorted(zoo.MODELS):
        ranges = EIG_RANGES if "eig_range" in zoo.mixer_parameters(name) else (None,)
        out += [zoo.resolve({"name": name, "d_model": D, **({"eig_range": r} if r else {})}) for r in ranges]
    return out


def test_every_registered_model_declares_a_class_theory_knows_or_none():
    declared = {s["name"]: theory.transition_class(s) for s in specs()}
    assert all(kind is None or kind in theory.TRANSITION_CLASSES for kind in declared.values()), declared
    assert declared["deltanet"] is not None and declared["lstm"] == "nonlinear"


# where each class puts one layer's transition eigenvalues: (real, lowest real part, largest modulus)
SPECTRUM = {
    "diagonal-positive": (True, 0.0, 1.0),
    "householder-positive": (True, 0.0, 1.0),
    "diagonal-real": (True, -1.0, 1.0),
    "householder-real": (True, -1.0, 1.0),
    "real-spectrum": (True, None, None),
    "real-spectrum-signed": (True, None, None),
    "generalized-delta": (True, -1.0, 1.0),
    "generalized-delta-signed": (True, -1.0, 1.0),
    "attention-householder-positive": (True, 0.0, 1.0),
    "attention-householder-real": (True, -1.0, 1.0),
    "householder-products": (False, None, 1.0),
    "diagonal-complex": (False, None, 1.0),
    "diagonal-complex-affine": (False, None, 1.0),
    "time-invariant": (False, None, 1.0),
    "automaton": (False, None, 1.0),
}


@pytest.mark.parametrize("spec", [s for s in specs() if theory.transition_class(s) in SPECTRUM], ids=zoo.display_name)
def test_a_declared_class_holds_for_the_materialised_transitions(spec):
    """An independent reading of the declaration: the eigenvalues of the transitions the layer
    applies to random inputs lie where its declared class says."""
    real, lowest, modulus = SPECTRUM[theory.transition_class(spec)]
    torch.manual_seed(0)
    kwargs = {k: v for k, v in spec.items() if k != "name" and k not in zoo.MODEL_DEFAULTS}
    layer = zoo.get_entry(spec["name"]).mixer(D, **kwargs).double()
    assert isinstance(layer, TransitionEigenvalues)
    with torch.no_grad():
        eigenvalues = torch.as_tensor(layer.transition_eigenvalues(torch.randn(2, 6, D, dtype=torch.float64) * 3))
    parts = eigenvalues.real if eigenvalues.is_complex() else eigenvalues
    if real and eigenvalues.is_complex():
        assert eigenvalues.imag.abs().max() < 1e-6
    if lowest is not None:
        assert parts.min() >= lowest - 1e-6
    if modulus is not None:
        assert eigenvalues.abs().max() <= modulus + 1e-6


def _mixer(declare):
    class Mixer(nn.Module):
        def __init__(self, d_model: int, eig_range: str = "[0,1]"):
            super().__init__()

        def forward(self, x, state=None):
            return x, state

    if declare is not None:
        Mixer.transition_class = declare  # type: ignore[attr-defined]
    return Mixer


def test_a_users_mixer_declares_its_class_as_the_zoo_does(registry):
    register_model("declared", display="D")(_mixer(staticmethod(lambda spec: "nonlinear")))
    register_model("by_range", display="R")(
        _mixer(staticmethod(lambda spec: "householder-real" if spec["eig_range"] == "[-1,1]" else None))
    )
    register_model("undeclared", display="U")(_mixer(None))
    a5, z2 = make_task("word_problem", group="A5"), make_task("word_problem", group="Z2")
    assert theory.predict(zoo.resolve("declared"), a5).verdict == theory.CAN
    assert theory.predict(zoo.resolve("undeclared"), a5).verdict == theory.UNKNOWN
    assert theory.predict(zoo.resolve({"name": "by_range", "eig_range": "[-1,1]"}), z2).verdict == theory.CAN
    assert theory.predict(zoo.resolve("by_range"), z2).verdict == theory.UNKNOWN


@pytest.mark.parametrize(
    "declare, expected",
    [
        (staticmethod(lambda spec: "rotations"), "'rotations'.*expected None or one of: nonlinear, dense"),
        (staticmethod(lambda spec: "attention" if spec["eig_range"] == "[0,1]" else "orthogonal"), "'orthogonal'"),
        ("nonlinear", "must be a static method"),
        (staticmethod(lambda spec: spec["no_such_parameter"]), "fails for .*KeyError"),
    ],
)
def test_a_declaration_outside_the_vocabulary_fails_at_registration(registry, declare, expected):
    with pytest.raises(StatetrackError, match=expected):
        register_model("bad_class", display="B")(_mixer(declare))
    assert "bad_class" not in registry


def test_a_class_a_spec_reaches_outside_the_defaults_is_named_when_asked(registry):
    register_model("late", display="L")(
        _mixer(staticmethod(lambda spec: "nonlinear" if spec.get("d_model", 1) else "x"))
    )
    with pytest.raises(StatetrackError, match="'x'.*expected None or one of"):
        theory.transition_class({"name": "late", "d_model": 0})
