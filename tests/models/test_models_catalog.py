"""The models tables of docs/models.md and README.md are generated from the registry and current."""

from pathlib import Path

import pytest
from torch import nn

from statetrack.catalog import (
    BEGIN,
    COMMAND,
    END,
    display_names,
    docs_table,
    packaged_models,
    readme_table,
    render,
    stale,
    targets,
)
from statetrack.models import zoo

ROOT = Path(__file__).resolve().parents[2]


def test_docs_and_readme_tables_are_current():
    assert not stale(ROOT), f"regenerate the models tables: {COMMAND}"


@pytest.mark.parametrize("name, expected", [
    ("deltanet", ["DeltaNet [0,1]", "DeltaNet [-1,1]"]),
    ("deltaproduct", ["DeltaProduct_{n_h} [0,1]", "DeltaProduct_{n_h} [-1,1]"]),
    ("transformer", ["Transformer", "Transformer (sinusoidal)", "Transformer (RoPE)"]),
    ("lstm", ["LSTM"]),
])
def test_display_names_come_from_the_registry(name, expected):
    assert display_names(name) == expected


def test_every_packaged_model_has_a_row_in_both_tables():
    for table in (docs_table(), readme_table()):
        rows = [line for line in table.splitlines() if line.startswith("| `")]
        assert [row.split("`")[1] for row in rows] == packaged_models()
    assert {"deltanet", "deltaproduct", "mamba", "transformer"} <= set(packaged_models())
    assert "`eig_range='[0,1]'`" in docs_table()  # the documented default


class Echo(nn.Module):
    """Returns its input (a test mixer)."""

    def __init__(self, d_model: int, width: int = 3):
        super().__init__()

    def forward(self, x, state=None):
        return x, state


def test_a_new_layer_file_appears_in_the_tables_and_makes_them_stale(registry, monkeypatch):
    monkeypatch.setattr(Echo, "__module__", "statetrack.layers.echo")  # as if defined in src/statetrack/layers/echo.py
    zoo.register_model("test_echo", display="Echo-{width}")(Echo)
    assert display_names("test_echo") == ["Echo-{width}"]
    assert "| `test_echo` | `Echo-{width}` | `width=3` | yes | Returns its input (a test mixer) | none stated |" in docs_table()
    assert {path.name for path in stale(ROOT)} == {"models.md", "README.md"}


def test_user_models_are_not_documented(registry):
    zoo.register_model("test_echo", display="Echo")(Echo)  # defined in a test module: a user's model
    assert "test_echo" not in packaged_models() and not stale(ROOT)


def test_render_replaces_only_the_marked_block(tmp_path):
    text = f"# Title\n\nprose before\n\n{BEGIN}\nold table\n{END}\n\nprose after\n"
    out = render(text, "NEW", tmp_path / "x.md")
    assert out == f"# Title\n\nprose before\n\n{BEGIN}\nNEW\n{END}\n\nprose after\n"
    assert render(out, "NEW", tmp_path / "x.md") == out
    assert set(targets(ROOT)) == {ROOT / "docs" / "models.md", ROOT / "README.md"}
    with pytest.raises(SystemExit, match="expected one"):
        render("no markers", "NEW", tmp_path / "x.md")


def test_no_layer_module_imports_the_zoo():
    """The layers sit below the zoo: a module under statetrack/layers importing statetrack.models.zoo
    (or anything else above it) would run the dependency back up the layers."""
    import ast

    layers = Path(__file__).resolve().parents[2] / "src" / "statetrack" / "layers"
    upward = []
    for path in sorted(layers.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            upward += [f"{path.name}: {n}" for n in names if n == "statetrack.models.zoo" or n.startswith("statetrack.models.zoo.")]
    assert upward == []
