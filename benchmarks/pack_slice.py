"""Pack a results folder into one archive that the next time-limited session unpacks and resumes.

    python benchmarks/pack_slice.py RESULTS_DIR ARCHIVE.tar.gz [--limit-mib 16] [--without-checkpoints]
    python benchmarks/pack_slice.py --unpack ARCHIVE.tar.gz RESULTS_DIR

The archive holds the store (a consistent copy, through SQLite's backup), the checkpoints of the
runs that are not done (the paused ones a resumed command continues from) and the snapshots `table
--zoo` and `--full-budget` keep under table/ while they measure (their parts: the wall time of each
session). A done run's checkpoint and the reports are left out: the store holds their results, and
the resumed command writes the reports again. It refuses to write an archive over
`--limit-mib` (exit 1), naming the size, so that a session never ships one it cannot bring back.
`--without-checkpoints` leaves the paused runs' checkpoints out too (a large model's weights and
optimizer state do not fit the limit): those runs start again from their first step when resumed.
"""

from __future__ import annotations

import argparse
import sqlite3
import sys
import tarfile
import tempfile
from pathlib import Path

STORE = "statetrack.db"


def _done_runs(store: Path) -> set[str]:
    with sqlite3.connect(f"file:{store}?mode=ro", uri=True) as db:
        return {row[0] for row in db.execute("SELECT id FROM runs WHERE status = 'done'")}


def pack(results: Path, archive: Path, limit_mib: float, checkpoints: bool = True) -> int:
    store = results / STORE
    if not store.is_file():
        print(f"pack_slice: no store at {store}", file=sys.stderr)
        return 2
    done = _done_runs(store)
    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp) / STORE
        with sqlite3.connect(store) as source, sqlite3.connect(copy) as target:
            source.backup(target)
        kept = skipped = 0
        with tarfile.open(archive, "w:gz") as tar:
            tar.add(copy, arcname=STORE)
            for path in sorted(results.rglob("*")):
                if not path.is_file() or path.name.startswith(STORE):
                    continue
                snapshot = path.parent == results / "table" and path.name.endswith(".quick.json")
                paused = path.suffix == ".pt" and path.parent.name == "checkpoints" and path.stem not in done
                if paused and not checkpoints:
                    print(f"pack_slice: left out the paused run {path.stem}'s checkpoint: it starts again when resumed")
                if not (snapshot or (paused and checkpoints)):
                    skipped += 1
                    continue
                tar.add(path, arcname=str(path.relative_to(results)))
                kept += 1
    mib = archive.stat().st_size / 2**20
    print(f"pack_slice: {archive} {mib:.1f} MiB ({len(done)} runs done, {kept} paused checkpoints and snapshots kept, "
          f"{skipped} other files left out)")
    if mib > limit_mib:
        archive.unlink()
        print(f"pack_slice: {mib:.1f} MiB is over the limit of {limit_mib} MiB; nothing written", file=sys.stderr)
        return 1
    return 0


def unpack(archive: Path, results: Path) -> int:
    if (results / STORE).exists():
        print(f"pack_slice: {results / STORE} exists; unpack into an empty folder", file=sys.stderr)
        return 2
    results.mkdir(parents=True, exist_ok=True)
    with tarfile.open(archive, "r:gz") as tar:
        try:
            tar.extractall(results, filter="data")  # Python >= 3.10.12: no paths outside the folder
        except TypeError:
            tar.extractall(results)
    print(f"pack_slice: {archive} unpacked into {results}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--unpack", action="store_true", help="unpack ARCHIVE into RESULTS_DIR instead")
    parser.add_argument("--limit-mib", type=float, default=16.0, help="the largest archive to write (default 16)")
    parser.add_argument("--without-checkpoints", action="store_true",
                        help="leave the paused runs' checkpoints out: they start again when resumed")
    parser.add_argument("paths", nargs=2, metavar="PATH", help="RESULTS_DIR ARCHIVE (with --unpack: ARCHIVE RESULTS_DIR)")
    args = parser.parse_args(argv)
    first, second = (Path(p) for p in args.paths)
    return unpack(first, second) if args.unpack else pack(first, second, args.limit_mib, not args.without_checkpoints)


if __name__ == "__main__":
    raise SystemExit(main())
