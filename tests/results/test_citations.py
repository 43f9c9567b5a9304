"""Citations are by author and year, with full entries in docs/references.md.

Users see the package, the docs and the CLI text, not the internal notes the project was built
from, so no file they see may cite an internal path ("papers/...") or section of an internal
specification ("SPEC section 1.3", "SPEC 1.3").
"""

import re
from pathlib import Path

from statetrack.cli import main

ROOT = Path(__file__).resolve().parents[2]
REFERENCES = ROOT / "docs" / "references.md"
SOURCE_KEYS = (
    "Ebrahimi & Memisevic 2025",
    "Grazzi et al. 2025",
    "Siems et al. 2025",
    "Anonymous 2025",
    "Siems et al. 2026",
    "Movahedi et al. 2025",
)
INTERNAL = re.compile(r"papers/|SPEC(?:'s)? ?(?:§|section|\d)")
# "Name et al. 2024", "Name & Name 2023", with an optional letter for two works of one key
KEY = re.compile(r"\b([A-Z][\w'\-]+(?: et al\.| & [A-Z][\w'\-]+)),? (\d{4}[ab]?)\b")
AUTHOR_YEAR = re.compile(r"\b[A-Z][\w'\-]+(?: et al\.| & [A-Z][\w'\-]+)? (?:19|20)\d\d[ab]?\b")


def _user_facing_files():
    files = [ROOT / "README.md"]
    files += sorted((ROOT / "docs").rglob("*"))
    for path in sorted((ROOT / "src" / "statetrack").rglob("*")):
        if "__pycache__" in path.parts or any(part.endswith(".egg-info") for part in path.parts):
            continue
        files.append(path)
    return [p for p in files if p.is_file() and p.suffix not in (".pyc", ".so")]


def _lines(path):
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        return []
    return enumerate(text.splitlines(), 1)


def test_no_internal_paths_or_spec_sections():
    hits = [
        f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
        for path in _user_facing_files()
        for number, line in _lines(path)
        if INTERNAL.search(line)
    ]
    assert not hits, "cite by author and year (docs/references.md) instead of:\n" + "\n".join(hits)


def test_references_list_the_source_works():
    headings = set(re.findall(r"^### (.+)$", REFERENCES.read_text(encoding="utf-8"), re.M))
    missing = [key for key in SOURCE_KEYS if key not in headings]
    assert not missing, f"docs/references.md lacks entries for {missing}"


def test_every_cited_key_has_an_entry():
    headings = set(re.findall(r"^### (.+)$", REFERENCES.read_text(encoding="utf-8"), re.M))
    unknown = [
        f"{path.relative_to(ROOT)}:{number}: {match.group(1)} {match.group(2)}"
        for path in _user_facing_files()
        if path != REFERENCES
        for number, line in _lines(path)
        for match in KEY.finditer(line)
        if f"{match.group(1)} {match.group(2)}" not in headings
    ]
    assert not unknown, "keys without an entry in docs/references.md:\n" + "\n".join(unknown)


def test_tasks_command_cites_by_author_and_year(capsys):
    main(["tasks"])
    out = capsys.readouterr().out
    assert not INTERNAL.search(out), out
    assert AUTHOR_YEAR.search(out), out
