"""Every generated doc, written or checked at once (`statetrack docs --write` / `--check`): the book
(a page per experiment, docs/claims.md and the README's `demo` and `experiments` blocks,
`statetrack.results.book`), the catalogues (docs/tasks.md and the `models` blocks of the README and
docs/models.md, `statetrack.catalog`), the state table's page and picture
(`statetrack.results.statetable.write_page`) and the performance tables (benchmarks/tables.py, from
benchmarks/results/).

Each generator gives its whole pages and its named blocks (`statetrack.generated`); a page's blocks
from every generator are filled at once, so a block that no generator renders is an error. It runs
in a checkout: the docs and the benchmarks are not part of the installed package.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from statetrack.catalog import catalogue_files
from statetrack.errors import StatetrackError
from statetrack.generated import fill_blocks, sync
from statetrack.paths import under
from statetrack.results import statetable
from statetrack.results.book import book_files, read_snapshots

Files = tuple[dict[Path, str | None], dict[Path, dict[str, str]]]  # ({page: text}, {page: {block: text}})


def checkout(root: str | Path = ".") -> Path:
    """`root` when it is a checkout of statetrack (its docs/ and benchmarks/tables.py), else a one-line error."""
    root = Path(root)
    missing = [p for p in ("README.md", "docs", "benchmarks/tables.py") if not (root / p).exists()]
    if missing:
        raise StatetrackError(
            f"docs: {root.absolute()} is not a checkout of statetrack (no {', '.join(missing)}); "
            "run it from the repository root"
        )
    return root


def performance_files(root: Path) -> Files:
    """The performance tables: benchmarks/tables.py of the checkout, loaded by its path (the
    benchmarks are scripts beside the package, not part of it)."""
    path = root / "benchmarks" / "tables.py"
    spec = importlib.util.spec_from_file_location("statetrack_benchmark_tables", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.performance_files(root)


def generated_files(root: Path) -> Files:
    """Every generator's pages and blocks under the checkout `root`, the blocks of a page merged."""
    pages: dict[Path, str | None] = {}
    blocks: dict[Path, dict[str, str]] = {}
    book = book_files(root / "docs", root / "README.md", read_snapshots())
    for generated_pages, generated_blocks in (book, catalogue_files(root), performance_files(root)):
        pages |= generated_pages
        for path, named in generated_blocks.items():
            twice = set(named) & set(blocks.get(path, {}))
            if twice:
                raise StatetrackError(f"{path}: two generators render the block {sorted(twice)[0]!r}")
            blocks.setdefault(path, {}).update(named)
    return pages, blocks


def wanted_files(root: Path) -> dict[Path, str | None]:
    """{file: its generated text (None: a file that should not exist)} of every generated page, a
    page with blocks filled from its current text."""
    pages, blocks = generated_files(root)
    wanted = dict(pages)
    for path, named in blocks.items():
        wanted[path] = fill_blocks(path.read_text(), named, path)
    return wanted


def write_docs(root: str | Path = ".", check: bool = False) -> list[Path]:
    """Write every generated doc under the checkout `root` (with `check`, nothing; none through a
    link out of it) and return the files that differ from their generation."""
    root = checkout(root)
    wanted = wanted_files(root)
    if not check:  # a link out of the checkout (docs/ to elsewhere, say) is refused before anything is written
        for path in [*wanted, root / statetable.PAGE, root / statetable.PICTURE]:
            under(root, *path.relative_to(root).parts)
    return sync(wanted, check) + statetable.write_page(check=check, root=root)
