"""The generated docs: every one equals its generation from the committed data (`statetrack docs
--check`), an edited generated block or page is found, and the docs read in a hurry: no page of
docs/ or the README over 600 lines, hand-written or generated, no paragraph or bullet over 150 words."""

import re
from pathlib import Path

import pytest

from statetrack import docs
from statetrack.errors import StatetrackError
from statetrack.generated import block_texts, fill_blocks, sync
from statetrack.results import statetable

ROOT = Path(__file__).resolve().parents[1]
MAX_LINES = 600
MAX_WORDS = 150


@pytest.fixture(scope="module")
def generated():
    """Every generator's pages and blocks for the committed checkout, generated once."""
    return docs.generated_files(ROOT)


def test_every_generated_doc_equals_its_generation(generated):
    pages, blocks = generated
    wanted = dict(pages) | {path: fill_blocks(path.read_text(), named, path) for path, named in blocks.items()}
    differ = sync(wanted, check=True) + statetable.write_page(check=True, root=ROOT)
    assert differ == [], f"run `statetrack docs --write` from the repository root: {', '.join(map(str, differ))}"
    # the book, the catalogues and the performance tables each have their part
    names = {p.relative_to(ROOT).as_posix() for p in pages}
    assert {"docs/claims.md", "docs/tasks.md", "docs/experiments/demo.md"} <= names
    performance = {p.relative_to(ROOT).as_posix(): set(b) for p, b in docs.performance_files(ROOT)[1].items()}
    assert set(performance) == {"docs/performance.md", "docs/performance-training.md", "docs/performance-layers.md"}
    assert {p.relative_to(ROOT).as_posix(): set(b) for p, b in blocks.items()} == {
        "README.md": {"demo", "experiments", "models"},
        "docs/models.md": {"models"},
        "docs/scaling.md": {"paper-hours"},
        **performance,
    }


def test_an_edited_generated_block_is_found_and_the_prose_around_it_kept(generated):
    _, blocks = generated
    checked = 0
    for path, named in blocks.items():
        text = path.read_text()
        for name, body in block_texts(text).items():
            edited = text.replace(body, body.replace("|", "| 0", 1) if "|" in body else body + "edited\n", 1)
            assert edited != text and fill_blocks(edited, named, path) == text, f"{path}: block {name!r}"
            checked += 1
        prose = text.replace("\n", "\nA sentence of one's own.\n", 1)
        assert fill_blocks(prose, named, path) == prose
    assert checked >= 16


def test_an_edited_page_or_a_stale_one_is_found(generated, tmp_path):
    pages, _ = generated
    page = ROOT / "docs" / "experiments" / "demo.md"
    copy, stale = tmp_path / "demo.md", tmp_path / "gone.md"
    copy.write_text(page.read_text().replace("3/3 claims ✓", "3/3 claims ✗"))
    stale.write_text("an experiment no longer shipped\n")
    assert sync({copy: pages[page], stale: None}, check=True) == [copy, stale]
    assert sync({copy: pages[page], stale: None}) == [copy, stale]
    assert copy.read_text() == pages[page] and not stale.exists()


def test_a_block_missing_doubled_or_without_generator_is_one_line_error():
    text = "<!-- generated:a -->\nx\n<!-- /generated:a -->\n"
    with pytest.raises(StatetrackError, match=r"^p.md: block 'b' is missing \(expected <!-- generated:b -->"):
        fill_blocks(text, {"a": "A", "b": "B"}, "p.md")
    with pytest.raises(StatetrackError, match=r"block 'a' has no generator \(known: c\)"):
        fill_blocks(text, {"c": "C"}, "p.md", strict=True)
    with pytest.raises(StatetrackError, match="block 'a' appears 2 times"):
        fill_blocks(text + text, {"a": "A"}, "p.md", strict=False)
    assert fill_blocks(text, {"b": "B"}, "p.md", strict=False) == text  # a user's README: only its blocks
    assert fill_blocks(text, {"a": "A"}, "p.md") == "<!-- generated:a -->\nA\n<!-- /generated:a -->\n"


def test_docs_runs_in_a_checkout_only(tmp_path):
    with pytest.raises(StatetrackError, match="is not a checkout of statetrack .*run it from the repository root"):
        docs.write_docs(tmp_path, check=True)


def paragraphs(text: str) -> list[str]:
    """The paragraphs and list items of a Markdown page: code blocks, tables, headings and
    generated-block markers left out."""
    out, current, fenced = [], [], False
    for line in text.splitlines() + [""]:
        stripped = line.strip()
        if stripped.startswith("```"):
            fenced = not fenced
        starts_item = re.match(r"([-*+]|\d+\.)\s", stripped)
        ends = fenced or stripped.startswith(("```", "|", "#", "<!--")) or not stripped
        if (ends or starts_item) and current:
            out.append(" ".join(current))
            current = []
        if not ends:
            current.append(stripped)
    return out


def long_pages(texts: dict[Path, str]) -> list[str]:
    """'PAGE: N lines' for each page over MAX_LINES."""
    return [
        f"{path.relative_to(ROOT)}: {len(text.splitlines())} lines"
        for path, text in texts.items()
        if len(text.splitlines()) > MAX_LINES
    ]


def test_no_page_is_long_and_no_paragraph_is(generated):
    pages, _ = generated
    on_disk = {path: path.read_text() for path in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]}
    # every page as it is, hand-written or generated, and every generated page as its generator writes it
    texts = on_disk | {path: text for path, text in pages.items() if text is not None}
    assert ROOT / statetable.PAGE in texts and ROOT / "docs" / "scaling.md" in texts
    too_long = long_pages(texts)
    assert not too_long, f"pages over {MAX_LINES} lines (split each by topic): " + ", ".join(too_long)
    long_paragraphs = [
        f"{path.relative_to(ROOT)}: {len(p.split())} words: {p[:60]}..."
        for path, text in on_disk.items()
        for p in paragraphs(text)
        if len(p.split()) > MAX_WORDS
    ]
    assert not long_paragraphs, "\n".join(long_paragraphs)


def test_a_long_page_is_named_with_its_length():
    short, long = ROOT / "docs" / "a.md", ROOT / "README.md"
    texts = {short: "line\n" * MAX_LINES, long: "line\n" * (MAX_LINES + 1)}
    assert long_pages(texts) == [f"README.md: {MAX_LINES + 1} lines"]


def test_the_paragraph_reader_tells_prose_from_tables_code_and_items():
    text = "# T\n\none two\nthree\n\n- a b\n  c\n- d\n\n| x | y |\n\n```\ncode code\n```\n<!-- generated:a -->\n"
    assert paragraphs(text) == ["one two three", "- a b c", "- d"]


def test_the_docs_command_checks_then_writes_every_generated_file(tmp_path, monkeypatch, capsys):
    """`statetrack docs --check` exits 1 naming each file that differs (a generated block edited by
    hand, a page gone), `--write` writes them, and the check then passes; the state table's page is
    its own generator's part."""
    from statetrack.cli import main

    for name in ("README.md", "benchmarks/tables.py", "docs/x.md"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("")
    readme = tmp_path / "README.md"
    readme.write_text("# x\n<!-- generated:demo -->\nedited by hand\n<!-- /generated:demo -->\n")
    page = tmp_path / "docs" / "claims.md"
    monkeypatch.setattr(
        docs,
        "generated_files",
        lambda root: ({root / "docs/claims.md": "every claim\n"}, {root / "README.md": {"demo": "the demo's table"}}),
    )
    table = []
    monkeypatch.setattr(statetable, "write_page", lambda check, root: table.append((check, root)) or [])
    monkeypatch.chdir(tmp_path)
    assert main(["docs", "--check"]) == 1
    out, err = capsys.readouterr()
    assert out.splitlines() == [
        f"differs from its generation: {p}" for p in (Path("docs/claims.md"), Path("README.md"))
    ]
    assert "statetrack docs --write" in err and readme.read_text().count("edited by hand") == 1
    assert main(["docs", "--write"]) == 0 and main(["docs", "--check"]) == 0
    assert page.read_text() == "every claim\n" and "the demo's table" in readme.read_text()
    assert [check for check, _ in table] == [True, False, True]
    assert main(["docs"]) == 2 and "give --write" in capsys.readouterr().err
    monkeypatch.chdir(tmp_path / "docs")
    assert main(["docs", "--check"]) == 2 and "is not a checkout of statetrack" in capsys.readouterr().err
