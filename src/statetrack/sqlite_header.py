"""What an SQLite database says about itself, read from its files' bytes without SQLite opening it.

SQLite's read-only connection to a database in WAL mode still writes its `-shm` file (and may create
it); the store reads another application's database only through this module, so that it is left
byte for byte as it was. The layout is SQLite's file format (https://www.sqlite.org/fileformat.html):
a 100-byte header on page 1 (user_version at offset 60, application_id at 68) followed by the root
page of `sqlite_master`; in WAL mode the newest page 1 may be a frame of the `-wal` file, the last
one whose checksums and salts are valid and that a commit frame closes.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path

MAGIC = b"SQLite format 3\x00"
WAL_MAGIC = (0x377F0682, 0x377F0683)  # checksums of little-endian, big-endian words
LEAF_TABLE_PAGE = 0x0D


@dataclass(frozen=True)
class Page1:
    """The newest page 1 of a database: its header's stamps and the schema entries of its root page."""

    application_id: int
    user_version: int
    from_wal: bool  # page 1 is a committed frame of the -wal file
    # (type, name) of each entry of sqlite_master; None when they are not all on page 1 (a schema
    # larger than one page, or an entry that overflows it)
    schema: tuple[tuple[str, str], ...] | None


def _page_size(header: bytes) -> int | None:
    """The page size a database header states; None when it is no valid header (a damaged file)."""
    if len(header) < 100 or not header.startswith(MAGIC) or header[21:24] != b"\x40\x20\x20":
        return None
    size = struct.unpack(">H", header[16:18])[0]
    size = 65536 if size == 1 else size
    return size if 512 <= size <= 65536 and size & (size - 1) == 0 else None


def _checksum(data: bytes, s0: int, s1: int, big_endian: bool) -> tuple[int, int]:
    """The WAL's running checksum over `data` (a multiple of 8 bytes), from (s0, s1)."""
    words = struct.unpack(f"{'>' if big_endian else '<'}{len(data) // 4}I", data)
    for i in range(0, len(words), 2):
        s0 = (s0 + words[i] + s1) & 0xFFFFFFFF
        s1 = (s1 + words[i + 1] + s0) & 0xFFFFFFFF
    return s0, s1


def committed_page1(wal: Path) -> bytes | None:
    """Page 1 as the last commit in the -wal file left it; None when no committed frame holds it (an
    empty, reset or damaged WAL, whose frames SQLite ignores as well)."""
    try:
        data = wal.read_bytes()
    except FileNotFoundError:
        return None
    if len(data) < 32:
        return None
    magic, _version, page_size, _sequence, salt1, salt2, c0, c1 = struct.unpack(">8I", data[:32])
    if magic not in WAL_MAGIC or page_size < 512 or page_size > 65536 or page_size & (page_size - 1):
        return None
    big_endian = magic == WAL_MAGIC[1]
    s0, s1 = _checksum(data[:24], 0, 0, big_endian)
    if (s0, s1) != (c0, c1):
        return None
    newest, pending = None, None
    offset = 32
    while offset + 24 + page_size <= len(data):
        page, commit_size, frame_salt1, frame_salt2, f0, f1 = struct.unpack(">6I", data[offset : offset + 24])
        if (frame_salt1, frame_salt2) != (salt1, salt2):
            break  # a frame of an earlier generation of the WAL: the valid frames end here
        body = data[offset + 24 : offset + 24 + page_size]
        s0, s1 = _checksum(data[offset : offset + 8], s0, s1, big_endian)
        s0, s1 = _checksum(body, s0, s1, big_endian)
        if (s0, s1) != (f0, f1):
            break
        if page == 1:
            pending = body
        if commit_size and pending is not None:
            newest, pending = pending, None
        offset += 24 + page_size
    return newest


def _varint(data: bytes, at: int) -> tuple[int, int]:
    value = 0
    for i in range(8):
        byte = data[at + i]
        value = (value << 7) | (byte & 0x7F)
        if byte < 0x80:
            return value, at + i + 1
    return (value << 8) | data[at + 8], at + 9


def _schema(page: bytes, page_size: int) -> tuple[tuple[str, str], ...] | None:
    """(type, name) of the sqlite_master entries on page 1 when its root is a leaf holding them all."""
    if page[100] != LEAF_TABLE_PAGE:
        return None
    count = struct.unpack(">H", page[103:105])[0]
    usable = page_size - page[20]
    entries = []
    for i in range(count):
        (cell,) = struct.unpack(">H", page[108 + 2 * i : 110 + 2 * i])
        size, at = _varint(page, cell)
        _rowid, at = _varint(page, at)
        if size > usable - 35 or at + size > len(page):  # spills onto overflow pages
            return None
        header_size, cursor = _varint(page, at)
        kinds = []
        while cursor < at + header_size:
            kind, cursor = _varint(page, cursor)
            kinds.append(kind)
        values, body = [], at + header_size
        for kind in kinds[:2]:  # type and name: text (odd serial types from 13)
            if kind < 13 or kind % 2 == 0:
                return None
            length = (kind - 13) // 2
            values.append(page[body : body + length].decode("utf-8", "replace"))
            body += length
        if len(values) < 2:
            return None
        entries.append((values[0], values[1]))
    return tuple(entries)


def read_page1(path: Path) -> Page1 | None:
    """The newest page 1 of the database at `path` (with its -wal file), without SQLite opening it;
    None when neither holds a valid page 1 (an empty file, or a header this cannot vouch for: SQLite
    then says what is wrong)."""
    with open(path, "rb") as file:
        header = file.read(100)
        page_size = _page_size(header)
        page = header + file.read(page_size - 100) if page_size else b""
    newest = committed_page1(path.with_name(path.name + "-wal"))
    from_wal = newest is not None and _page_size(newest) is not None
    if newest is not None and from_wal:
        page, page_size = newest, _page_size(newest)
    if page_size is None:
        return None
    try:
        schema = _schema(page, page_size) if len(page) == page_size else None  # a short file: unknown
    except (IndexError, struct.error):
        schema = None
    application_id, user_version = struct.unpack(">i", page[68:72])[0], struct.unpack(">i", page[60:64])[0]
    return Page1(application_id, user_version, from_wal, schema)
