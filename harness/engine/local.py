"""Run a sweep's jobs on this machine: one fresh process per attempt, at most `workers` at a time.

A fresh "spawn" process per attempt (not a fork, not a reused pool worker) means no torch state,
thread setting or leaked memory carries from one run to the next, and a job that segfaults,
hangs or is OOM-killed takes only itself down. The child reports back over a pipe; anything
it cannot report (a kill, a timeout) the parent detects, and `harness.engine.executor.run_attempts`
records in MLflow, so that no run of a sweep is left RUNNING once `run` returns or raises. A child
dies with its parent (`die_with_parent`): a sweep killed outright leaves no worker training on, and
its runs RUNNING for the rerun to end FAILED as orphaned.
"""

from __future__ import annotations

import ctypes
import multiprocessing as mp
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from typing import Any

from harness.engine.executor import RetryingExecutor
from harness.runs.writer import failure_reason

_KILL_GRACE_S = 5.0
_POLL_S = 0.5


_PR_SET_PDEATHSIG = 1  # linux/prctl.h


def die_with_parent(parent_pid: int) -> None:
    """Make this (spawned) process die by SIGKILL as soon as `parent_pid`, its parent, is gone, however the
    parent ended. Linux: the kernel's parent-death signal; elsewhere a thread watching the parent pid."""
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) == 0:
            if os.getppid() != parent_pid:  # the parent died before the signal was armed
                os.kill(os.getpid(), signal.SIGKILL)
            return

    def watch() -> None:
        while os.getppid() == parent_pid:
            time.sleep(1.0)
        os.kill(os.getpid(), signal.SIGKILL)

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


def worker_setup(parent_pid: int) -> None:
    """First thing in a worker process: die with the parent; leave Ctrl-C to the parent (it terminates us);
    and give tqdm a thread lock instead of its default named semaphore, which a terminated worker cannot
    unregister (multiprocessing's resource tracker then warns of a "leaked semaphore" at exit)."""
    die_with_parent(parent_pid)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    from tqdm import tqdm

    tqdm.set_lock(threading.RLock())


def _child(call: Callable[[], Any], conn: Connection, parent_pid: int) -> None:
    """Worker entry point: run the attempt, send ("ok", what it returned) or ("error", one-line reason)."""
    worker_setup(parent_pid)
    try:
        message = ("ok", call())
    except BaseException as exc:  # noqa: BLE001 - everything goes back to the parent as one line
        message = ("error", failure_reason(exc))
    try:
        conn.send(message)
    finally:
        conn.close()


@dataclass(eq=False)
class _Worker:
    process: mp.process.BaseProcess
    conn: Connection


class _Processes:
    """The local `Launcher`: a spawned process per attempt."""

    poll_s = _POLL_S

    def __init__(self, slots: int):
        self.slots = slots
        self._ctx = mp.get_context("spawn")

    def launch(self, call: Callable[[], Any], name: str) -> _Worker:
        reader, writer = self._ctx.Pipe(duplex=False)
        process = self._ctx.Process(target=_child, args=(call, writer, os.getpid()), name=name, daemon=False)
        process.start()
        writer.close()  # the child holds the only writer: EOF then means it is gone
        return _Worker(process, reader)

    def wait(self, handles: list[_Worker], timeout: float) -> list[tuple[_Worker, Any, str | None]]:
        wait([w.conn for w in handles] + [w.process.sentinel for w in handles], timeout=timeout)
        ended = []
        for worker in handles:
            result = _check(worker)
            if result is not None:
                worker.conn.close()
                ended.append((worker, *result))
        return ended

    def kill(self, handles: list[_Worker]) -> None:
        for worker in handles:
            worker.process.terminate()
        for worker in handles:
            _stop(worker.process)
            worker.conn.close()


class LocalExecutor(RetryingExecutor):
    """Executor running each job in its own local process (see the module docstring)."""

    def __init__(self, workers: int = 1, timeout_s: float | None = None, retries: int = 0):
        if workers < 1 or retries < 0 or (timeout_s is not None and timeout_s <= 0):
            raise ValueError("workers must be >= 1, retries >= 0 and timeout_s > 0 (or None)")
        self.workers = workers
        """Jobs running at once; each uses `train.threads` torch threads of its own."""
        self.timeout_s = timeout_s
        self.retries = retries

    @contextmanager
    def launcher(self) -> Iterator[_Processes]:
        yield _Processes(self.workers)


def _check(worker: _Worker) -> tuple[Any, str | None] | None:
    """(returned value, failure reason) once the attempt has ended, None while it runs."""
    alive = worker.process.is_alive()  # read before polling: a child may report, then exit
    if worker.conn.poll():
        try:
            kind, value = worker.conn.recv()
        except (EOFError, OSError):
            pass  # closed without a message: it died, handled below
        else:
            _stop(worker.process)
            return (value, None) if kind == "ok" else (None, value)
    if not alive:
        worker.process.join()
        return None, f"worker died (exit code {worker.process.exitcode})"
    return None


def _stop(process: mp.process.BaseProcess) -> None:
    """Wait for a process to exit; SIGKILL it if it has not after a grace period."""
    process.join(_KILL_GRACE_S)
    if process.is_alive():
        process.kill()
        process.join()
