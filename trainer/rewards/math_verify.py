"""Math answers graded with math-verify: 1 if the completion's final answer equals the gold one.

Three facts about math-verify (0.9) that this module exists to get right:

- The gold answer is wrapped in `\\boxed{...}` before parsing: raw LaTeX golds often
  parse wrongly (`3\\sqrt{13}` parses to 3) or not at all.
- `verify(gold, prediction)` is not symmetric: the gold goes first.
- Its timeouts are `signal.alarm(seconds)`. A float there raises inside math-verify,
  which swallows the error and grades everything wrong, so only integers are accepted.
  Signals only work in the main thread: elsewhere math-verify refuses to run, and with
  its timeouts switched off a completion like `\\boxed{9^{9^{9^{9}}}}` never finishes
  and holds the GIL, freezing the whole process. So a call from any other thread is
  graded by a helper process in its main thread (started on first use, killed and
  restarted if it ever overruns), which costs a round trip of about a millisecond.
"""

from __future__ import annotations

import json
import logging
import operator
import os
import select
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

from math_verify import parse, verify
from math_verify.errors import TimeoutException

from trainer.tasks.base import Grade

MAX_INFO_CHARS = 200
"""Longest extracted answer kept in `Grade.info` (it goes into metrics tables)."""
HELPER_START_S = 120
"""How long the helper process may take to start (it imports sympy)."""
log = logging.getLogger(__name__)


def grade_math(completion: str, gold: str, timeout_s: int = 5) -> Grade:
    """Reward 1.0 if the final answer of `completion` is mathematically equal to `gold`, else 0.0.

    math-verify reads the last `\\boxed{}` (several boxes are read together as a set) or, failing
    that, the last LaTeX or plain expression. `info["extracted"]` is the answer it found, as it
    normalises it (`0.5` reads `\\frac{1}{2}`; "" if none). `timeout_s` bounds each parse and
    comparison. Never raises on a completion (garbage, empty, unparsable or timing out grades 0);
    raises ValueError for a `timeout_s` that is not an integer >= 1.
    """
    if isinstance(timeout_s, bool):
        raise ValueError("timeout_s must be an integer number of seconds, got a bool")
    try:
        timeout_s = operator.index(timeout_s)  # ints (numpy's too), not floats or strings
    except TypeError:
        raise ValueError(f"timeout_s must be an integer number of seconds, got {timeout_s!r}") from None
    if timeout_s < 1:
        raise ValueError(f"timeout_s must be >= 1, got {timeout_s}")
    completion = completion if isinstance(completion, str) else str(completion)
    if threading.current_thread() is threading.main_thread():
        correct, extracted = _grade(completion, gold, timeout_s)
    else:
        correct, extracted = _HELPER.grade(completion, gold, timeout_s)
    return Grade(reward=1.0 if correct else 0.0, correct=correct, info={"extracted": extracted})


def _grade(completion: str, gold: str, timeout_s: int) -> tuple[bool, str]:
    """(correct, extracted answer), in a main thread."""
    try:
        gold_parsed = parse(gold if "\\boxed" in gold else f"\\boxed{{{gold}}}", parsing_timeout=timeout_s)
        predicted = parse(completion, parsing_timeout=timeout_s)
        extracted = _answer_text(predicted)
        if not gold_parsed or not predicted:
            return False, extracted
        return bool(verify(gold_parsed, predicted, timeout_seconds=timeout_s)), extracted
    except (Exception, TimeoutException):
        return False, ""


def _answer_text(parsed: list[Any]) -> str:
    """The matched answer string (math-verify appends it after the sympy object), else the object's text."""
    strings = [p for p in parsed if isinstance(p, str)]
    try:
        text = strings[0] if strings else (str(parsed[0]) if parsed else "")
    except Exception:  # printing a pathological sympy object can fail
        text = ""
    return text[:MAX_INFO_CHARS]


class _Helper:
    """A child process that grades in its own main thread, one request at a time, over JSON lines."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._process: subprocess.Popen | None = None

    def grade(self, completion: str, gold: str, timeout_s: int) -> tuple[bool, str]:
        with self._lock:
            try:
                process = self._running()
                process.stdin.write(json.dumps([completion, gold, timeout_s]) + "\n")
                process.stdin.flush()
                # math-verify's own timeouts apply to two parses and a comparison; allow them and a margin
                reply = self._read_line(process, 3 * timeout_s + 2)
                correct, extracted = json.loads(reply)
                return bool(correct), str(extracted)
            except Exception as error:  # overran, died or garbled: grade 0 and start afresh next time
                log.warning("grade_math helper failed (%s); the completion grades 0", error)
                self._stop()
                return False, ""

    def _running(self) -> subprocess.Popen:
        if self._process is None or self._process.poll() is not None:
            root = str(Path(__file__).resolve().parents[2])
            env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))}
            self._process = subprocess.Popen(
                [sys.executable, "-c", "from trainer.rewards.math_verify import _serve; _serve()"],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
            if self._read_line(self._process, HELPER_START_S) != "ready":
                raise RuntimeError("helper did not start")
        return self._process

    @staticmethod
    def _read_line(process: subprocess.Popen, seconds: float) -> str:
        readable, _, _ = select.select([process.stdout], [], [], seconds)
        line = process.stdout.readline() if readable else ""
        if not line:
            raise TimeoutError(f"no answer within {seconds} s")
        return line.strip()

    def _stop(self) -> None:
        if self._process is not None:
            self._process.kill()
            self._process.wait()
            self._process = None


_HELPER = _Helper()


def _serve() -> None:
    """The helper's loop: one JSON request per input line, one JSON reply per output line."""
    print("ready", flush=True)
    for line in sys.stdin:
        completion, gold, timeout_s = json.loads(line)
        print(json.dumps(_grade(completion, gold, timeout_s)), flush=True)
