"""The models tables of docs/models.md and README.md are generated from the registry (that the
committed pages are current: tests/test_docs.py)."""

from pathlib import Path

import pytest
from torch import nn

from statetrack.catalog import catalogue_files, display_names, docs_table, packaged_models, readme_table
from statetrack.generated import fill_blocks
from statetrack.models import zoo

ROOT = Path(__file__).resolve().parents[2]


def stale() -> set[str]:
    """The names of the pages whose `models` block differs from the registry's table now."""
    _, blocks = catalogue_files(ROOT)
    return {path.name for path, named in blocks.items() if fill_blocks(path.read_text(), named, path, strict=False) != path.read_text()}


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
    assert stale() == {"models.md", "README.md"}


def test_user_models_are_not_documented(registry):
    zoo.register_model("test_echo", display="Echo")(Echo)  # defined in a test module: a user's model
    assert "test_echo" not in packaged_models() and not stale()


def test_the_catalogue_fills_the_models_blocks_and_writes_the_task_page():
    pages, blocks = catalogue_files(ROOT)
    assert set(pages) == {ROOT / "docs" / "tasks.md"} and "## `parity`" in pages[ROOT / "docs" / "tasks.md"]
    assert set(blocks) == {ROOT / "docs" / "models.md", ROOT / "README.md"}
    assert blocks[ROOT / "README.md"] == {"models": readme_table()}


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
