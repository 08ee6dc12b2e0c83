"""The processes a helper's code started, found and killed from /proc (Linux).

Two ways to find them, because user code can leave its process tree: every process of a `BoundedService`
carries a token in its environment (`TOKEN_ENV`), which a forked or spawned descendant inherits even after
`setsid` or its parent's death; and the helper is a child subreaper, so an orphan whose parent died is
re-parented to it, not to init. Killing repeats until a scan finds none, so a fork bomb cannot outrun it.
"""

from __future__ import annotations

import ctypes
import os
import signal
from dataclasses import dataclass

TOKEN_ENV = "HARNESS_BOUNDED_TOKEN"
"""The environment variable whose value marks the processes of one helper."""
_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
_PR_SET_CHILD_SUBREAPER = 36
_KILL_PASSES = 200


@dataclass(frozen=True)
class Usage:
    """What a set of live processes holds now."""

    processes: int
    memory_bytes: int
    """Resident memory that is not file-backed (anonymous pages), summed."""
    cpu_s: float
    """User + system CPU time of the live processes, summed."""


def become_subreaper() -> bool:
    """Make this process the reaper of its orphaned descendants (Linux ≥ 3.4); False where that is not possible."""
    try:
        return ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def _stat(pid: int) -> tuple[int, float] | None:
    """(parent pid, CPU seconds) of a live process, None if it is gone or a zombie."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
    except OSError:
        return None
    if fields[0] == b"Z":
        return None
    return int(fields[1]), (int(fields[11]) + int(fields[12])) / _TICKS


def _pids() -> list[int]:
    try:
        return [int(p) for p in os.listdir("/proc") if p.isdigit()]
    except OSError:
        return []


def descendants(root: int) -> list[int]:
    """The live descendants of `root` (not `root` itself), from one scan of /proc."""
    children: dict[int, list[int]] = {}
    for pid in _pids():
        st = _stat(pid)
        if st is not None:
            children.setdefault(st[0], []).append(pid)
    out, todo = [], list(children.get(root, ()))
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(children.get(pid, ()))
    return out


def tagged(token: str) -> list[int]:
    """Live processes (other than this one) whose environment carries `TOKEN_ENV=token`."""
    mark, me, out = f"{TOKEN_ENV}={token}".encode(), os.getpid(), []
    for pid in _pids():
        if pid == me:
            continue
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                found = mark in f.read().split(b"\0")
        except OSError:
            continue
        if found and _stat(pid) is not None:
            out.append(pid)
    return out


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of a live process so far (0 once it is gone)."""
    st = _stat(pid)
    return 0.0 if st is None else st[1]


def usage(pids: list[int]) -> Usage:
    """Processes, anonymous resident memory and CPU time of `pids` (those still alive)."""
    count, memory, cpu = 0, 0, 0.0
    for pid in pids:
        st = _stat(pid)
        try:
            with open(f"/proc/{pid}/statm", "rb") as f:
                resident, shared = (int(x) for x in f.read().split()[1:3])
        except OSError:
            continue
        if st is None:
            continue
        count, memory, cpu = count + 1, memory + max(resident - shared, 0) * _PAGE, cpu + st[1]
    return Usage(count, memory, cpu)


def kill_all(find, reap: bool = True) -> int:
    """SIGKILL every process `find()` returns, scanning again until it returns none; reap those that are this
    process's children. Returns how many were killed."""
    killed = 0
    for _ in range(_KILL_PASSES):
        pids = find()
        if not pids:
            break
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
                killed += 1
            except OSError:
                pass
        if reap:
            reap_children()
    return killed


def reap_children() -> list[tuple[int, int]]:
    """Collect every exited child of this process without blocking: [(pid, wait status)]."""
    out = []
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return out
        if pid == 0:
            return out
        out.append((pid, status))


def describe(status: int) -> str:
    """'exited with status 0', 'was killed by SIGKILL': a wait status in words."""
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        try:
            return f"was killed by {signal.Signals(sig).name}"
        except ValueError:
            return f"was killed by signal {sig}"
    return f"exited with status {os.WEXITSTATUS(status)}"
