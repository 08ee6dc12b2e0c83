"""Calls that a model's output can make slow, each under a hard budget of CPU time, memory and processes.

A `BoundedService` runs one function, named `module:factory`, outside the caller: a helper process
(trainer/rewards/helper.py) imports the module and calls `factory(init)` once (imports, warm-up, the user's
module), then forks a child that answers requests; a request that uses its budget of CPU time (or
`WALL_FACTOR` times it of wall-clock time, for a child that stalls) gets its child SIGKILLed and comes back timed
out. A fresh child is forked from the warmed-up helper right after, within milliseconds, off the caller's path.

Why a process and not a signal or a thread: a signal cannot stop code that holds the GIL in C (a
big-integer power), cannot go below a second, and works in the main thread only; a thread cannot be
stopped at all. Why CPU time: on a busy machine a call that waits for a core is not cut short (a
wall-clock budget lost MATH-500 answers at load 11 on 2 cores); on an idle one the two agree.

The other bounds (`Limits`): each process of the helper has a data segment of at most `memory_mb`
(`RLIMIT_DATA`: an allocation past it fails at once), and a call whose process tree (the child, what it
started, detached or orphaned processes included: trainer/rewards/process_tree.py) holds more than `memory_mb`
of anonymous memory or more than `processes` processes besides the child is killed, with everything it
started. The helper is a session of its own and each child another, so a `killpg(0)` reaches no further than
the child. What the code prints (stdout and stderr) is kept, cut to `output_kb`, never streamed to the caller's
terminal: `BoundedService.output()`. On `close()`, on a helper's death and at the caller's exit, every process
the helper's code started is killed.

What crosses the process boundary is JSON. An exception in the function comes back as `Reply.error`
(its one-line text) with the traceback; a child that dies (exits, or is killed by anything but the bounds)
comes back as `Reply.died`; both are the caller's to raise or to grade. math grading
(trainer/rewards/math_verify.py) and the user's reward functions of a custom task (trainer/tasks/custom.py)
both run here.
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import select
import subprocess
import sys
import threading
import time
import uuid
import weakref
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from trainer.rewards import process_tree

HELPER_START_S = 120
"""How long the helper process may take to import and warm up its function (sympy takes seconds)."""
REPLY_SLACK_S = 0.2
"""Part of the budget kept for the round trip and the kill: the child gets budget − slack of CPU time."""
WALL_FACTOR = 10
"""The child is also killed after this many times its budget in wall-clock time (a stalled child)."""
log = logging.getLogger(__name__)
_PROGRAM = "import sys; sys.path[:] = [p for p in sys.path if p]; from trainer.rewards.helper import serve; serve()"
"""The helper's command: the working directory is not put on its import path (a `torch.py` there shadows
nothing)."""
_LIVE: weakref.WeakSet[BoundedService] = weakref.WeakSet()


@dataclass(frozen=True)
class Limits:
    """Bounds on a helper's code besides each call's CPU time (docs/tasks.md states them for the user)."""

    memory_mb: int = 2048
    """Memory: each helper process's data segment (`RLIMIT_DATA`), and the anonymous resident memory of a call's
    whole process tree."""
    processes: int = 16
    """Processes a call may have alive at once besides the one answering it (what it started, with what earlier
    calls left running)."""
    output_kb: int = 64
    """What the code prints (stdout and stderr together) is kept up to this: its first and last halves."""


@dataclass(frozen=True)
class Reply:
    """What one call came back with: a value, a timeout, an error, a bound it crossed, or its process's death."""

    value: Any = None
    """The function's return value, through JSON."""
    timed_out: bool = False
    """The call used its budget of CPU (or wall-clock) time and its child was killed."""
    error: str | None = None
    """One line, `Type: message`, when the function raised."""
    traceback: str = ""
    """The function's traceback when it raised."""
    over: str | None = None
    """The bound the call crossed besides time, `memory` or `processes`; its process tree was killed."""
    died: str | None = None
    """How the call's process (or the helper) died under it: 'exited with status 0', 'was killed by SIGKILL'."""
    at: str = ""
    """What the call was doing when it ended so (the label the function last gave `progress`), else ''."""


class StartError(RuntimeError):
    """The helper could not start its function (the factory raised, or the process did not come up); `late`: it was
    not ready within its start bound."""

    def __init__(self, message: str, late: bool = False):
        super().__init__(message)
        self.late = late


class _Output:
    """A reader of the helper's stderr that keeps the first and last `limit // 2` bytes and counts the rest."""

    def __init__(self, fd: int, limit: int):
        self.fd, self.half, self.head, self.tail, self.total = fd, max(limit // 2, 1), b"", b"", 0
        self.busy = False  # between a read and its bytes' keeping
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:  # os.read, not a buffered reader: no lock left held by a daemon thread at exit
        for chunk in iter(lambda: _read_some(self.fd), b""):
            self.busy = True
            self.total += len(chunk)
            room = self.half - len(self.head)
            self.head += chunk[:room]
            self.tail = (self.tail + chunk[max(room, 0) :])[-self.half :]
            self.busy = False

    def settle(self, seconds: float = 0.5) -> None:
        """Wait (at most `seconds`) until what is in the pipe now has been read."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline and self.thread.is_alive():
            try:
                pending = select.select([self.fd], [], [], 0)[0]
            except (OSError, ValueError):
                return
            if not pending and not self.busy:
                return
            time.sleep(0.005)

    def text(self) -> str:
        dropped = self.total - len(self.head) - len(self.tail)
        cut = f"\n[... {dropped} bytes dropped ...]\n" if dropped > 0 else ""
        return (self.head + cut.encode() + self.tail).decode("utf-8", "replace")


class BoundedService:
    """The caller's side: a helper process serving `entry` (`module:factory`), one JSON line per request."""

    def __init__(
        self,
        entry: str,
        init: Any = None,
        start_s: float = HELPER_START_S,
        limits: Limits = Limits(),
        label: str | None = None,
    ):
        """`label` names the code in messages (default: `entry`), e.g. the user's function."""
        self.entry, self.init, self.start_s, self.limits = entry, init, start_s, limits
        self.label = label or entry
        self.lock = threading.Lock()
        self._process: subprocess.Popen | None = None
        self._output: _Output | None = None
        self._ready = False
        self._token = uuid.uuid4().hex
        self._owner = os.getpid()  # a forked copy of this process must not share the pipes: it starts its own
        _LIVE.add(self)

    def start(self) -> None:
        """Start the helper now without waiting for it (the first call then finds it warm)."""
        with self.lock:
            self._started()

    def check(self) -> None:
        """Start the helper and wait until its function is built: `StartError` (one line) if it cannot be."""
        with self.lock:
            self._running()

    def call(self, request: Any, budget_s: float) -> Reply:
        """`factory(init)(request)` in the child, within `budget_s` seconds of CPU time and the `Limits`. Raises
        `StartError` when the helper cannot start its function. A helper that dies under the call is restarted
        and the call comes back `died`; one that does not answer within its wall-clock bound, timed out."""
        with self.lock:
            process = self._running()
            try:
                process.stdin.write(json.dumps([request, max(budget_s - REPLY_SLACK_S, 0.01)]) + "\n")
                process.stdin.flush()
                reply = json.loads(_read_line(process, WALL_FACTOR * budget_s + 5))
            except Exception as error:  # noqa: BLE001 (the helper died, overran or garbled: start afresh)
                code = _exit_code(process) if isinstance(error, EOFError) else process.poll()
                self._stop()
                if code is None:
                    log.warning("%s: the helper failed (%s); the call counts as timed out", self.entry, error)
                    return Reply(timed_out=True)
                how = process_tree.describe(_wait_status(code))
                return Reply(died=f"the helper process {how}")
            if "timeout" in reply:
                return Reply(timed_out=True, at=reply.get("at", ""))
            if "over" in reply:
                return Reply(over=reply["over"], at=reply.get("at", ""))
            if "died" in reply:
                return Reply(died=reply["died"], at=reply.get("at", ""))
            if "error" in reply:
                return Reply(error=reply["error"], traceback=reply.get("traceback", ""))
            return Reply(value=reply["value"])

    def output(self) -> str:
        """What the helper's code printed so far, cut to `Limits.output_kb` (first and last halves)."""
        if self._output is None:
            return ""
        self._output.settle()
        return self._output.text()

    def close(self) -> None:
        """Stop the helper and kill every process its code started."""
        with self.lock:
            self._stop()

    def _started(self) -> subprocess.Popen:
        if self._owner != os.getpid():
            self._process, self._output, self._owner = None, None, os.getpid()
        if self._process is None or self._process.poll() is not None:
            root = str(Path(__file__).resolve().parents[2])
            env = {
                **os.environ,
                "PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")])),
                process_tree.TOKEN_ENV: self._token,
            }
            for threads in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
                env.setdefault(threads, "1")  # a pool's per-thread buffers would count against memory_mb
            self._process = subprocess.Popen(
                [sys.executable, "-c", _PROGRAM],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                env=env,
                start_new_session=True,
            )
            self._output = _Output(self._process.stderr.fileno(), self.limits.output_kb * 1024)
            self._process.stdin.write(json.dumps([self.entry, self.init, asdict(self.limits)]) + "\n")
            self._process.stdin.flush()
            self._ready = False
        return self._process

    def _running(self) -> subprocess.Popen:
        process = self._started()
        if not self._ready:
            try:
                hello = json.loads(_read_line(process, self.start_s))
            except Exception as error:  # noqa: BLE001
                code = _exit_code(process) if isinstance(error, EOFError) else process.poll()
                self._stop()
                how = (
                    f"its helper process {process_tree.describe(_wait_status(code))}"
                    if code is not None
                    else f"it was not ready within {self.start_s:g} s"
                )
                raise StartError(f"{self.label}: did not start ({how})", late=code is None) from None
            if "error" in hello:
                self._stop()
                raise StartError(hello["error"])
            self._ready = True
        return process

    def _stop(self) -> None:
        if self._process is not None and self._owner == os.getpid():
            self._process.kill()
            self._process.wait()
            process_tree.kill_all(lambda: process_tree.tagged(self._token), reap=False)
            if self._output is not None:
                self._output.thread.join(timeout=1)
            for stream in (self._process.stdin, self._process.stdout, self._process.stderr):
                try:
                    stream.close()
                except OSError:
                    pass
        self._process = None


def _read_some(fd: int) -> bytes:
    try:
        return os.read(fd, 1 << 16)
    except OSError:  # closed under the reader
        return b""


def _wait_status(returncode: int) -> int:
    """A Popen returncode as a wait status (negative: killed by that signal)."""
    return -returncode if returncode < 0 else returncode << 8


@atexit.register
def _close_all() -> None:
    for service in list(_LIVE):
        service.close()


def _read_line(process: subprocess.Popen, seconds: float) -> str:
    readable, _, _ = select.select([process.stdout], [], [], seconds)
    if not readable:
        raise TimeoutError(f"no answer within {seconds} s")
    line = process.stdout.readline()
    if not line:
        raise EOFError("the helper closed its pipe")
    return line.strip()


def _exit_code(process: subprocess.Popen) -> int | None:
    """The returncode of a helper whose pipe closed: it is exiting, so wait for it a moment (its pipe can close
    before the kernel reports it gone)."""
    try:
        return process.wait(timeout=5)
    except subprocess.TimeoutExpired:
        return None


def error_line(exc: BaseException) -> str:
    """`Type: message` on one line."""
    return " ".join(f"{type(exc).__name__}: {exc}".split())
