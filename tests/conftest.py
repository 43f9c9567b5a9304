import textwrap

import pytest
import torch

# The models in tests are tiny: one thread is faster than two, and stays fast when the machine is
# shared (CI runs on 2 cores).
torch.set_num_threads(1)

TINY_SPEC = """
name: tiny
description: a tiny grid for tests
task: {name: modadd, m: 3}
models:
  - {name: deltanet, eig_range: "[-1,1]", num_heads: 1}
  - {name: lstm}
model_defaults: {d_model: 8}
train: {steps: %(steps)d, batch_size: 8, min_length: 2, max_length: 5, early_stop_loss: null, device: cpu, checkpoint_every: 10}
eval: {lengths: [5, 9], samples: 16}
lrs: [1.0e-2]
seeds: %(seeds)s
"""


@pytest.fixture
def tiny_spec(tmp_path):
    """Write a tiny experiment spec; returns a function (steps, seeds) -> path."""

    def write(steps=20, seeds="[0, 1]", name="tiny.yaml"):
        path = tmp_path / name
        path.write_text(textwrap.dedent(TINY_SPEC % {"steps": steps, "seeds": seeds}))
        return path

    return write


@pytest.fixture
def registry():
    """The model registry, restored afterwards: models registered by a test do not leak."""
    from statetrack.layers import MODELS

    saved = dict(MODELS)
    yield MODELS
    MODELS.clear()
    MODELS.update(saved)


@pytest.fixture
def added_model(registry):
    """A model added to the package after the state table was measured, as a new file under
    src/statetrack/layers/ would register it ("added", with an eig_range), and a user's model
    registered from outside the package ("users"); both leave the registry afterwards."""
    import torch
    from torch import nn

    from statetrack.layers.registry import register_model

    class Added(nn.Module):
        def __init__(self, d_model: int, eig_range: str = "[0,1]"):
            super().__init__()
            self.proj = nn.Linear(d_model, d_model)

        def forward(self, x: torch.Tensor, state=None):
            return self.proj(x), state

        @staticmethod
        def transition_class(spec: dict) -> str:
            return "diagonal-positive" if spec["eig_range"] == "[0,1]" else "diagonal-real"

    Added.__module__ = "statetrack.layers.added"
    register_model("added", display="Added {eig_range}")(Added)
    users = type("Users", (Added,), {"__module__": "my_models"})
    register_model("users", display="Users {eig_range}")(users)
    return registry
