"""Locks between processes that share a file. What a file holds, and how it is read and written, is the
contract's (`schema.py`); this only orders who rewrites it when."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def locked(path: Path) -> Iterator[None]:
    """Hold an exclusive lock on `path` (created if missing) while the block runs: processes that read, change
    and rewrite one file (shards of a sweep updating its manifest) take turns instead of losing each other's
    changes. POSIX advisory locks (flock) also hold across hosts on NFS v4 and Lustre."""
    import fcntl

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
