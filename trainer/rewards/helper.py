"""The helper process of a `BoundedService` (trainer/rewards/bounded.py) and the children it forks, one per call.

The helper imports its function once, then answers each request in a forked child, a session of its own, killed at
the request's budget of CPU time or past a bound of `Limits` (memory, processes) with every process started under
the helper, and replaced by a fresh fork. The helper is its code's child subreaper (trainer/rewards/process_tree.py).
"""

from __future__ import annotations

import importlib
import json
import os
import resource
import select
import sys
import time
import traceback
from typing import Any

from trainer.rewards import process_tree
from trainer.rewards.bounded import WALL_FACTOR, error_line

TREE_EVERY_S = 0.05
"""How often a running call's whole process tree is measured (its memory and processes); the child's own CPU
time is read every `_POLL_S`."""
_POLL_S = 0.01


_progress_out = None
_protocol_fd = -1


def progress(label: str) -> None:
    """Say what the call is doing now (e.g. which reward function it is in): a call that dies or crosses a bound
    is reported with the last label. A no-op outside a helper's child."""
    if _progress_out is not None:
        _progress_out.write(json.dumps({"at": label}) + "\n")
        _progress_out.flush()


class _Child:
    """A forked caller of the function, a session of its own: requests and replies as JSON lines over two pipes."""

    def __init__(self, function: Any) -> None:
        global _progress_out
        req_r, req_w = os.pipe()
        rep_r, rep_w = os.pipe()
        self.pid = os.fork()
        if self.pid == 0:  # the child: answer until the request pipe closes, and never return
            try:
                os.setsid()
                os.close(req_w)
                os.close(rep_r)
                os.close(0)  # the helper's protocol pipes are not the child's to read or write: the caller must
                os.close(_protocol_fd)  # see the helper's death at once, not when its children end
                with os.fdopen(req_r) as requests, os.fdopen(rep_w, "w") as replies:
                    _progress_out = replies
                    for line in requests:
                        replies.write(_answer(function, json.loads(line)) + "\n")
                        replies.flush()
            finally:
                os._exit(0)
        os.close(req_r)
        os.close(rep_w)
        self.requests, self.replies = os.fdopen(req_w, "w"), rep_r
        self.status: int | None = None
        self._pending = b""

    def call(self, request: Any, seconds: float, limits: dict[str, int]) -> str:
        """The child's reply line, or a line saying which bound it crossed (`timeout`, `over`) or how it died;
        a child past a bound is killed with every process it started."""
        self.requests.write(json.dumps(request) + "\n")
        self.requests.flush()
        start_cpu, start_wall, at = self.cpu_s(), time.monotonic(), ""
        next_tree = start_wall + TREE_EVERY_S
        while True:
            while b"\n" in self._pending:  # progress lines, then the reply
                line, self._pending = self._pending.split(b"\n", 1)
                text = line.decode()
                if not text.startswith('{"at": '):
                    return text
                at = json.loads(text)["at"]
            readable, _, _ = select.select([self.replies], [], [], _POLL_S)
            if readable:
                chunk = os.read(self.replies, 1 << 16)
                if not chunk:
                    return json.dumps({"died": f"the call's process {self.wait()}", "at": at})
                self._pending += chunk
                continue
            now = time.monotonic()
            over = None
            if self.cpu_s() - start_cpu >= seconds or now - start_wall >= WALL_FACTOR * seconds:
                over = "timeout"
            elif now >= next_tree:
                next_tree = now + TREE_EVERY_S
                tree = process_tree.descendants(os.getpid())
                use = process_tree.usage(tree)
                if use.processes - 1 > limits["processes"]:
                    over = "processes"
                elif use.memory_bytes > limits["memory_mb"] * 2**20:
                    over = "memory"
            if over is not None:
                self.kill()
                return json.dumps({"timeout": True, "at": at} if over == "timeout" else {"over": over, "at": at})

    def cpu_s(self) -> float:
        """The child's CPU time so far (user + system, from /proc)."""
        return process_tree.cpu_s(self.pid)

    def wait(self) -> str:
        """How the child ended, in words (it has: its reply pipe closed)."""
        if self.status is None:
            try:
                self.status = os.waitpid(self.pid, 0)[1]
            except ChildProcessError:
                return "ended"
        return process_tree.describe(self.status)

    def kill(self) -> None:
        """Kill the child and every process started under this helper, then reap them."""
        process_tree.kill_all(lambda: process_tree.descendants(os.getpid()))
        self.requests.close()
        if self.replies >= 0:
            os.close(self.replies)
            self.replies = -1


def _answer(function: Any, request: Any) -> str:
    try:
        return json.dumps({"value": function(request)}, allow_nan=False)
    except MemoryError:  # RLIMIT_DATA: the same bound as the tree's, reported alike
        return json.dumps({"over": "memory"})
    except Exception as exc:  # noqa: BLE001 (the caller decides what an error means)
        return json.dumps({"error": error_line(exc), "traceback": "".join(traceback.format_exception(exc))})


def serve() -> None:
    """The helper's loop: build the function once, then answer each request in a forked child, killed at the
    request's deadline (or a bound) and replaced by a fresh fork after the reply."""
    global _protocol_fd
    _protocol_fd = os.dup(1)
    protocol = os.fdopen(_protocol_fd, "w")
    os.dup2(2, 1)  # what the function's module prints goes to stderr, not into the protocol
    sys.stdout = sys.stderr
    process_tree.become_subreaper()  # orphans of the code's processes come back here to be killed
    entry, init, limits = json.loads(sys.stdin.readline())
    memory = limits["memory_mb"] * 2**20
    resource.setrlimit(resource.RLIMIT_DATA, (memory, memory))
    try:
        module, _, name = entry.partition(":")
        function = getattr(importlib.import_module(module), name)(init)
    except MemoryError:
        protocol.write(json.dumps({"error": f"{entry}: importing and building it used over {limits['memory_mb']} MB"}))
        protocol.write("\n")
        protocol.flush()
        return
    except Exception as exc:  # noqa: BLE001 (reported to the caller, who names the setting)
        protocol.write(json.dumps({"error": error_line(exc), "traceback": traceback.format_exc()}) + "\n")
        protocol.flush()
        return
    child = _Child(function)
    protocol.write(json.dumps({"ready": True}) + "\n")
    protocol.flush()
    try:
        for line in sys.stdin:
            request, seconds = json.loads(line)
            try:
                reply = child.call(request, seconds, limits)
            except OSError as exc:  # the pipes broke: a timed-out call, and a fresh child
                reply = json.dumps({"died": f"the call's process broke its pipe ({exc})"})
            fresh = not reply.startswith('{"value"') and not reply.startswith('{"error"')
            if fresh:
                child.kill()
            protocol.write(reply + "\n")
            protocol.flush()
            process_tree.reap_children()
            if fresh:
                child = _Child(function)
    finally:
        process_tree.kill_all(lambda: process_tree.descendants(os.getpid()))
