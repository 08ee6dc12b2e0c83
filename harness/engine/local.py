"""Run a sweep's jobs on this machine: one fresh process per attempt, at most `workers` at a time.

Each attempt is a process of its own, forked from a server process that imported the training stack
(torch, transformers, MLflow: ~10 s of a 2-core machine's time) once and never ran a job
(multiprocessing's "forkserver"; "spawn", importing everything again per attempt, where there is no
fork). So no torch state, thread setting or leaked memory carries from one run to the next, and a job
that segfaults, hangs or is OOM-killed takes only itself down, as with a freshly started interpreter;
the child takes the parent's environment variables of the moment it is launched. The child reports
back over a pipe; anything it cannot report (a kill, a timeout) the parent detects, and
`harness.engine.executor.run_attempts` records in MLflow, so that no run of a sweep is left RUNNING
once `run` returns or raises. A child dies with the process that launched it (`die_with_parent`): a
sweep killed outright leaves no worker training on (and the fork server ends with its last child), and
its runs RUNNING for the rerun to end FAILED as orphaned.
"""

from __future__ import annotations

import ctypes
import multiprocessing as mp
import os
import select
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
PRELOAD = ["harness.engine.training", "harness.engine.executor", "harness.engine.tune"]
"""What the fork server imports before it forks the first attempt: everything a job or a trial imports."""


_PR_SET_PDEATHSIG = 1  # linux/prctl.h


def die_with_parent(launcher_pid: int) -> None:
    """Make this worker process die by SIGKILL as soon as `launcher_pid`, the process that launched it, is gone,
    however it ended (at once if it is gone already). Where the launcher is the parent (spawn) on Linux, the
    kernel's parent-death signal does it; else (a fork server's child, or not Linux) a thread waits for the
    launcher's exit on a pidfd, or polls its pid where there is none. The fork server itself cannot pass the news
    on: it lives until its last child has exited."""
    if sys.platform.startswith("linux") and os.getppid() == launcher_pid:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) == 0:
            if os.getppid() != launcher_pid:  # the parent died before the signal was armed
                os.kill(os.getpid(), signal.SIGKILL)
            return
    try:
        pidfd = os.pidfd_open(launcher_pid)  # Linux >= 5.3: readable once the process has exited
    except ProcessLookupError:
        os.kill(os.getpid(), signal.SIGKILL)
    except (AttributeError, OSError):
        pidfd = None

    def watch() -> None:
        if pidfd is not None:
            select.select([pidfd], [], [])
        else:
            while _alive(launcher_pid):
                time.sleep(1.0)
        os.kill(os.getpid(), signal.SIGKILL)

    threading.Thread(target=watch, name="launcher-watch", daemon=True).start()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # exists, another user's: a recycled pid, which only a launcher dead long ago leaves
    return True


def worker_setup(launcher_pid: int) -> None:
    """First thing in a worker process: die with its launcher; leave Ctrl-C to the parent (it terminates us);
    and give tqdm a thread lock instead of its default named semaphore, which a terminated worker cannot
    unregister (multiprocessing's resource tracker then warns of a "leaked semaphore" at exit)."""
    die_with_parent(launcher_pid)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    from tqdm import tqdm

    tqdm.set_lock(threading.RLock())


def _child(call: Callable[[], Any], conn: Connection, launcher_pid: int, env: dict[str, str]) -> None:
    """Worker entry point: run the attempt, send ("ok", what it returned) or ("error", one-line reason)."""
    worker_setup(launcher_pid)
    os.environ.clear()  # the launcher's environment now, not the fork server's when it started
    os.environ.update(env)
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
        self._ctx = worker_context()

    def launch(self, call: Callable[[], Any], name: str) -> _Worker:
        reader, writer = self._ctx.Pipe(duplex=False)
        args = (call, writer, os.getpid(), dict(os.environ))
        process = self._ctx.Process(target=_child, args=args, name=name, daemon=False)
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


def worker_context() -> mp.context.BaseContext:
    """The fork server (started on first use, then shared by every launcher of this process) where there is one,
    else "spawn"."""
    if "forkserver" not in mp.get_all_start_methods():
        return mp.get_context("spawn")
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(PRELOAD)
    return ctx


class LocalExecutor(RetryingExecutor):
    """Executor running each job in its own local process (see the module docstring)."""

    def __init__(self, workers: int = 1, timeout_s: float | None = None, retries: int = 0):
        if workers < 1 or retries < 0 or (timeout_s is not None and timeout_s <= 0):
            raise ValueError("workers must be >= 1, retries >= 0 and timeout_s > 0 (or None)")
        self.workers = workers
        """Jobs running at once; each uses `train.threads` torch threads of its own."""
        self.timeout_s = timeout_s
        self.retries = retries

    def warm(self) -> None:
        """Start the fork server now: its imports (~7 s of a 2-core machine) then run while the caller prepares
        the store (~6 s for a fresh SQLite one), instead of after it. The first launch would start it anyway."""
        if worker_context().get_start_method() == "forkserver":
            from multiprocessing import forkserver

            forkserver.ensure_running()

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
