"""The data directory is private: 0700, and the files that hold secrets 0600.

It holds the SQLite database (sessions, token digests, prompts) with its WAL and SHM files,
the generated secret key, the first-run admin password and the embedded Redis. Files are
created private (never created readable, then narrowed), and those of an older install are
narrowed when found. SQLite gives its -wal and -shm files the mode of the database file, so a
database created 0600 keeps all three private. Paths owned by another user (a mounted
volume) are left as they are: their owner decides.
"""

from __future__ import annotations

import os
from pathlib import Path

PRIVATE_DIR = 0o700
PRIVATE_FILE = 0o600
SQLITE_SIDE_FILES = ("-wal", "-shm", "-journal")


def _narrow(path: Path, mode: int) -> None:
    try:
        st = path.stat()
    except FileNotFoundError:
        return
    if st.st_uid == os.getuid() and st.st_mode & 0o777 != mode:
        path.chmod(mode)


def private_dir(path: Path) -> Path:
    """Create `path` (and its parents) if missing; the directory itself 0700."""
    path = Path(path)
    path.mkdir(mode=PRIVATE_DIR, parents=True, exist_ok=True)
    _narrow(path, PRIVATE_DIR)
    return path


def write_private(path: Path, text: str) -> Path:
    """Write `text` to `path`, a file only its owner can read (0600 from its creation)."""
    path = Path(path)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, PRIVATE_FILE)
    try:
        os.fchmod(fd, PRIVATE_FILE)  # an existing file keeps its mode through O_CREAT
        os.write(fd, text.encode())
    finally:
        os.close(fd)
    return path


def private_sqlite(path: Path | str) -> None:
    """Create the SQLite database file 0600 before SQLite does (it would use 0644), and
    narrow the database and its side files of an older install."""
    if str(path) in ("", ":memory:") or str(path).startswith("file:"):
        return
    path = Path(path)
    if not path.parent.is_dir():
        return  # SQLite reports a missing directory better than we would
    os.close(os.open(path, os.O_WRONLY | os.O_CREAT, PRIVATE_FILE))
    for suffix in ("", *SQLITE_SIDE_FILES):
        _narrow(Path(f"{path}{suffix}"), PRIVATE_FILE)
