"""Calls that a model's output can make slow, each under a hard budget of CPU time.

A `BoundedService` runs one function, named `module:factory`, outside the caller: a helper process
imports the module and calls `factory(init)` once (imports, warm-up, the user's module), then forks a
child that answers requests; a request that uses its budget of CPU time (or `WALL_FACTOR` times it of
wall-clock time, for a child that stalls) gets its child SIGKILLed and comes back timed out. A fresh child
is forked from the warmed-up helper right after, within milliseconds, off the caller's path.

Why a process and not a signal or a thread: a signal cannot stop code that holds the GIL in C (a
big-integer power), cannot go below a second, and works in the main thread only; a thread cannot be
stopped at all. Why CPU time: on a busy machine a call that waits for a core is not cut short (a
wall-clock budget lost MATH-500 answers at load 11 on 2 cores); on an idle one the two agree.

What crosses the process boundary is JSON. An exception in the function comes back as `Reply.error`
(its one-line text) with the traceback; it is the caller's to raise or to grade. Whatever the function
prints goes to stderr: stdout carries the protocol. math grading (trainer/rewards/math_verify.py) and
the user's reward functions of a custom task (trainer/tasks/custom.py) both run here.
"""

from __future__ import annotations

import importlib
import json
import logging
import os
import select
import signal
import subprocess
import sys
import threading
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HELPER_START_S = 120
"""How long the helper process may take to import and warm up its function (sympy takes seconds)."""
REPLY_SLACK_S = 0.2
"""Part of the budget kept for the round trip and the kill: the child gets budget − slack of CPU time."""
WALL_FACTOR = 10
"""The child is also killed after this many times its budget in wall-clock time (a stalled child)."""
_POLL_S = 0.01
_CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Reply:
    """What one call came back with: a value, a timeout or an error."""

    value: Any = None
    """The function's return value, through JSON."""
    timed_out: bool = False
    """The call used its budget and its child was killed (or the helper died under it)."""
    error: str | None = None
    """One line, `Type: message`, when the function raised."""
    traceback: str = ""
    """The function's traceback when it raised."""


class StartError(RuntimeError):
    """The helper could not start its function (the factory raised, or the process did not come up)."""


class BoundedService:
    """The caller's side: a helper process serving `entry` (`module:factory`), one JSON line per request."""

    def __init__(self, entry: str, init: Any = None, start_s: float = HELPER_START_S):
        self.entry, self.init, self.start_s = entry, init, start_s
        self.lock = threading.Lock()
        self._process: subprocess.Popen | None = None
        self._ready = False
        self._owner = os.getpid()  # a forked copy of this process must not share the pipes: it starts its own

    def start(self) -> None:
        """Start the helper now without waiting for it (the first call then finds it warm)."""
        with self.lock:
            self._started()

    def call(self, request: Any, budget_s: float) -> Reply:
        """`factory(init)(request)` in the child, within `budget_s` seconds of CPU time. Raises `StartError` when the
        helper cannot start its function; a helper that dies or garbles a reply is restarted and the call times out."""
        with self.lock:
            process = self._running()
            try:
                process.stdin.write(json.dumps([request, max(budget_s - REPLY_SLACK_S, 0.01)]) + "\n")
                process.stdin.flush()
                reply = json.loads(_read_line(process, WALL_FACTOR * budget_s + 5))
            except Exception as error:  # noqa: BLE001 (the helper overran, died or garbled: start afresh)
                log.warning("%s: the helper failed (%s); the call counts as timed out", self.entry, error)
                self._stop()
                return Reply(timed_out=True)
            if "timeout" in reply:
                return Reply(timed_out=True)
            if "error" in reply:
                return Reply(error=reply["error"], traceback=reply.get("traceback", ""))
            return Reply(value=reply["value"])

    def close(self) -> None:
        with self.lock:
            self._stop()

    def _started(self) -> subprocess.Popen:
        if self._owner != os.getpid():
            self._process, self._owner = None, os.getpid()
        if self._process is None or self._process.poll() is not None:
            root = str(Path(__file__).resolve().parents[2])
            env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))}
            self._process = subprocess.Popen(
                [sys.executable, "-c", "from trainer.rewards.bounded import _serve; _serve()"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
                env=env,
            )
            self._process.stdin.write(json.dumps([self.entry, self.init]) + "\n")
            self._process.stdin.flush()
            self._ready = False
        return self._process

    def _running(self) -> subprocess.Popen:
        process = self._started()
        if not self._ready:
            try:
                hello = json.loads(_read_line(process, self.start_s))
            except Exception as error:  # noqa: BLE001
                self._stop()
                raise StartError(f"{self.entry}: the helper did not start ({error})") from None
            if "error" in hello:
                self._stop()
                raise StartError(hello["error"])
            self._ready = True
        return process

    def _stop(self) -> None:
        if self._process is not None:
            self._process.kill()
            self._process.wait()
            self._process = None


def _read_line(process: subprocess.Popen, seconds: float) -> str:
    readable, _, _ = select.select([process.stdout], [], [], seconds)
    line = process.stdout.readline() if readable else ""
    if not line:
        raise TimeoutError(f"no answer within {seconds} s")
    return line.strip()


def error_line(exc: BaseException) -> str:
    """`Type: message` on one line."""
    return " ".join(f"{type(exc).__name__}: {exc}".split())


# ---- the helper process (zygote) and its children ---------------------------------------------------
class _Child:
    """A forked caller of the function: requests and replies as JSON lines over two pipes."""

    def __init__(self, function: Any) -> None:
        req_r, req_w = os.pipe()
        rep_r, rep_w = os.pipe()
        self.pid = os.fork()
        if self.pid == 0:  # the child: answer until the request pipe closes, and never return
            try:
                os.close(req_w)
                os.close(rep_r)
                os.close(0)  # the helper's protocol pipes are not the child's to read or write
                with os.fdopen(req_r) as requests, os.fdopen(rep_w, "w") as replies:
                    for line in requests:
                        replies.write(_answer(function, json.loads(line)) + "\n")
                        replies.flush()
            finally:
                os._exit(0)
        os.close(req_r)
        os.close(rep_w)
        self.requests, self.replies = os.fdopen(req_w, "w"), os.fdopen(rep_r)

    def call(self, request: Any, seconds: float) -> str | None:
        """The child's reply line, or None if it used `seconds` of CPU time (or `WALL_FACTOR` times that of
        wall-clock time) without answering; it is then killed."""
        self.requests.write(json.dumps(request) + "\n")
        self.requests.flush()
        start_cpu, start_wall = self.cpu_s(), time.monotonic()
        while True:
            readable, _, _ = select.select([self.replies], [], [], _POLL_S)
            if readable:
                line = self.replies.readline()
                if not line:
                    raise OSError("the child died")
                return line.strip()
            if self.cpu_s() - start_cpu >= seconds or time.monotonic() - start_wall >= WALL_FACTOR * seconds:
                self.kill()
                return None

    def cpu_s(self) -> float:
        """The child's CPU time so far (user + system, from /proc)."""
        with open(f"/proc/{self.pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / _CLOCK_TICKS

    def kill(self) -> None:
        try:
            os.kill(self.pid, signal.SIGKILL)
            os.waitpid(self.pid, 0)
        except ChildProcessError:  # already reaped
            pass
        self.requests.close()
        self.replies.close()


def _answer(function: Any, request: Any) -> str:
    try:
        return json.dumps({"value": function(request)}, allow_nan=False)
    except Exception as exc:  # noqa: BLE001 (the caller decides what an error means)
        return json.dumps({"error": error_line(exc), "traceback": "".join(traceback.format_exception(exc))})


def _serve() -> None:
    """The helper's loop: build the function once, then answer each request in a forked child, killed at the
    request's deadline and replaced by a fresh fork after the reply."""
    protocol = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # what the function's module prints goes to stderr, not into the protocol
    sys.stdout = sys.stderr
    entry, init = json.loads(sys.stdin.readline())
    try:
        module, _, name = entry.partition(":")
        function = getattr(importlib.import_module(module), name)(init)
    except Exception as exc:  # noqa: BLE001 (reported to the caller, who names the setting)
        protocol.write(json.dumps({"error": error_line(exc), "traceback": traceback.format_exc()}) + "\n")
        protocol.flush()
        return
    child = _Child(function)
    protocol.write(json.dumps({"ready": True}) + "\n")
    protocol.flush()
    for line in sys.stdin:
        request, seconds = json.loads(line)
        try:
            reply = child.call(request, seconds)
        except OSError:  # the child died some other way: a timed-out call, and a fresh child
            reply = None
            child.kill()
        protocol.write((reply if reply is not None else json.dumps({"timeout": True})) + "\n")
        protocol.flush()
        if reply is None:
            child = _Child(function)
