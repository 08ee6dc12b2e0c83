"""OS file locks that die with their holder: one migration of a store at a time, one run of a sweep at a time.

`fcntl.flock` on an open file: the kernel drops the lock when the holder's process ends, however it
ends (SIGKILL included), so a stale lock file never blocks a rerun. The holder writes its pid into
the file, for the message of whoever is refused.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


class Busy(RuntimeError):
    """The lock is held by another live process (`pid`, None if it had not written it yet)."""

    def __init__(self, path: Path, pid: int | None):
        super().__init__(f"{path} is locked by pid {pid if pid is not None else '?'}")
        self.path, self.pid = path, pid


@contextmanager
def hold(path: Path, *, wait: bool = True) -> Iterator[None]:
    """Hold an exclusive lock on `path` (created if missing) for the `with` block.

    `wait=False` raises `Busy` at once when another process holds it; `wait=True` blocks until it is free.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        except BlockingIOError:
            raise Busy(path, _pid(fd)) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)
        yield
    finally:
        os.close(fd)  # releases the lock


def _pid(fd: int) -> int | None:
    text = os.pread(fd, 32, 0).decode(errors="replace").strip()
    return int(text) if text.isdigit() else None
