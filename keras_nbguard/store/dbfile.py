"""Whose file is it? The run history only ever writes to, migrates or moves aside a file that
is its own: new (missing or empty), marked with our ``PRAGMA application_id``, or from before
the mark (an unmarked SQLite file with our ``meta`` table). Anything else — another
application's SQLite database, a text file — is left byte for byte as it was."""

from __future__ import annotations

import os
import sqlite3
from urllib.parse import quote

APPLICATION_ID = 0x4B4E4247  # "KNBG", in bytes 68-71 of a SQLite header
SQLITE_MAGIC = b"SQLite format 3\x00"


class NotOurs(Exception):
    """The file at the history's path belongs to someone else."""


def file_owner(path: str) -> str | None:
    """None when ``path`` is ours to use; else what it is, in words."""
    try:
        with open(path, "rb") as f:
            header = f.read(100)
    except FileNotFoundError:
        return None
    if not header:
        return None  # empty: made by us a moment ago, or nothing yet
    if not header.startswith(SQLITE_MAGIC):
        return "not a SQLite database (a file of another kind)"
    if len(header) < 72:
        return None  # a truncated SQLite header: ours to judge as corrupt, if it is ours at all
    app_id = int.from_bytes(header[68:72], "big")
    if app_id == APPLICATION_ID:
        return None
    if app_id != 0:
        return f"another application's SQLite database (application_id {app_id:#x})"
    return None if _unmarked_but_ours(path) else "another application's SQLite database"


def _unmarked_but_ours(path: str) -> bool:
    """An unmarked SQLite file is ours when it has no tables yet (another kernel is setting up
    the same new file this moment) or our ``meta`` table (a file from before the mark). Read
    only (``mode=ro``), so that asking changes nothing."""
    try:
        # the name's bytes, quoted: a name that is not UTF-8 (a lone surrogate) opens too
        db = sqlite3.connect(f"file:{quote(os.fsencode(path))}?mode=ro", uri=True)
    except (sqlite3.Error, UnicodeError):
        return False
    try:
        tables = {
            row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
        }
        return not tables or (
            "meta" in tables
            and db.execute("SELECT 1 FROM meta WHERE key = 'schema'").fetchone() is not None
        )
    except sqlite3.Error:
        return False
    finally:
        db.close()
