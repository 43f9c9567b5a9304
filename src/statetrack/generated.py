"""Generated docs: one marker syntax for a generated block inside a hand-written page, and one way
to write generated files or check them against their generation (`statetrack docs`).

A block is the text between `<!-- generated:NAME -->` and `<!-- /generated:NAME -->` (each marker
on a line of its own); a generator renders each block it owns by name, and a page made whole by a
generator is written whole. Nothing here knows what the blocks hold.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path

from statetrack.errors import StatetrackError
from statetrack.paths import write_text

BLOCK = re.compile(r"(<!-- generated:(?P<name>[a-z][a-z0-9-]*) -->\n)(.*?)(<!-- /generated:(?P=name) -->)", re.S)


def begin(name: str) -> str:
    return f"<!-- generated:{name} -->"


def end(name: str) -> str:
    return f"<!-- /generated:{name} -->"


def block_texts(text: str) -> dict[str, str]:
    """{name: the text between its markers} of every block of `text`."""
    return {m.group("name"): m.group(3) for m in BLOCK.finditer(text)}


def block_problems(text: str, blocks: Mapping[str, str], strict: bool = True) -> list[str]:
    """What keeps `blocks` from filling `text`: a block there twice and, when `strict` (`blocks` are
    every block the page should have), a block of theirs missing from it or one they do not render."""
    found = [m.group("name") for m in BLOCK.finditer(text)]
    problems = [
        f"block {name!r} appears {found.count(name)} times" for name in dict.fromkeys(found) if found.count(name) > 1
    ]
    if strict:
        problems += [
            f"block {name!r} is missing (expected {begin(name)} ... {end(name)})"
            for name in blocks
            if name not in found
        ]
        problems += [
            f"block {name!r} has no generator (known: {', '.join(sorted(blocks))})"
            for name in dict.fromkeys(found)
            if name not in blocks
        ]
    return problems


def fill_blocks(text: str, blocks: Mapping[str, str], where: str | Path, strict: bool = True) -> str:
    """`text` with each block of `blocks` replaced by its text; a one-line error naming `where` when
    a block is doubled or, when `strict`, missing or unknown (`block_problems`). Not `strict`, the
    blocks `text` has are filled and the others left as they are (a user's own README)."""
    problems = block_problems(text, blocks, strict)
    if problems:
        raise StatetrackError(f"{where}: {'; '.join(problems)}")
    return BLOCK.sub(
        lambda m: m.group(1) + blocks[m.group("name")] + "\n" + m.group(4) if m.group("name") in blocks else m.group(0),
        text,
    )


def sync(wanted: Mapping[Path, str | None], check: bool = False) -> list[Path]:
    """The files whose text differs from `wanted` (None: a file that should not exist), written (or
    removed) unless `check`."""
    differ = [
        path
        for path, text in wanted.items()
        if (text is None and path.exists()) or (text is not None and (not path.exists() or path.read_text() != text))
    ]
    if not check:
        for path in differ:
            text = wanted[path]
            if text is None:
                path.unlink()
            else:
                path.parent.mkdir(parents=True, exist_ok=True)
                write_text(path, text)
    return differ
