"""Math answers graded with math-verify: 1 if the completion's final answer equals the gold one.

Facts about math-verify (0.9) that this module exists to get right:

- The gold answer is wrapped in `\\boxed{...}` before parsing: raw LaTeX golds often
  parse wrongly (`3\\sqrt{13}` parses to 3) or not at all.
- `verify(gold, prediction)` is not symmetric: the gold goes first.
- Its own timeouts are `signal.alarm(seconds)`: whole seconds, main thread only, and one answer
  goes through up to three of them (two parses and a comparison), 5 s each by default. Texts
  such as `\\boxed{10^{10^{10^{10}}}}`, `\\frac` nested 300 deep or 100 kB of `1+1+…` took 7-15 s.

So every answer gets a hard budget (`budget_s`, 1 s by default), whatever its text:

1. Cheap checks first, in the caller: a text longer than `MAX_CHARS` or with brackets nested
   deeper than `MAX_DEPTH` grades wrong without being parsed (no right answer looks like that,
   and these are the shapes that make the parser slow). They are a fast path, not the bound.
2. The bound: math-verify runs (its own timeouts off) in a child process that is SIGKILLed once
   it has used the budget, less a margin for the round trip, of CPU time; the answer grades wrong
   and `Grade.timed_out` is set (the training loop counts these in `train/grade_timeouts`).
   A kill loses nothing but that child: children are forked from a helper process that has
   already imported and warmed up sympy (a zygote), so a fresh child is ready within
   milliseconds, forked right after the reply, off the caller's path. Signal-based timeouts could
   not give this: they cannot go below 1 s per step, nor stop code that holds the GIL in C
   (big-integer powers), nor run outside the main thread.
3. CPU time rather than wall-clock time: on an idle machine the two agree, so an answer takes
   ≤ `budget_s` (benchmarks/grader_adversarial.py), while on a busy machine a legitimate
   comparison that waits for a core is not cut short and graded wrong (a wall-clock budget lost
   MATH-500 answers at load 11 on 2 cores). A child that stalls without using CPU is killed after
   `_WALL_FACTOR` × its budget of wall-clock time.

The helper is started on first use (or by `start_grader`, e.g. when a task is built) and
restarted if it dies; grading works from any thread and costs a round trip of about a millisecond.

Nothing in a completion is ever executed. math-verify's plain-text fallback hands a regex match
to sympy's `parse_expr`, which `eval`s Python; the match is limited to digits and arithmetic
operators today, and `_safe_parse_expr` enforces that in the child, so that a text such as
`__import__('os').system(...)` cannot reach `eval` even if a later math-verify widens its regex.
"""

from __future__ import annotations

import json
import logging
import math
import os
import re
import select
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from trainer.rewards.grade import Grade

MAX_INFO_CHARS = 200
"""Longest extracted answer kept in `Grade.info` (it goes into metrics tables)."""
MAX_CHARS = 20_000
"""Longer texts grade wrong unparsed (a whole worked solution is a few thousand characters)."""
MAX_DEPTH = 40
"""Texts with `{`, `(` or `[` nested deeper grade wrong unparsed (real answers nest a few levels)."""
BUDGET_S = 1.0
"""Default budget per answer, everything included (CPU time: wall-clock time on an idle machine)."""
HELPER_START_S = 120
"""How long the helper process may take to start (it imports sympy)."""
_REPLY_SLACK_S = 0.2
"""Part of the budget kept for the round trip and the kill: the child gets budget − slack of CPU time."""
_WALL_FACTOR = 10
"""The child is also killed after this many times its budget in wall-clock time (a stalled child)."""
_POLL_S = 0.01
_CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
_ARITHMETIC = re.compile(r"[\d.\s+\-*/^()×÷]*")
log = logging.getLogger(__name__)


def grade_math(completion: str, gold: str, budget_s: float = BUDGET_S) -> Grade:
    """Reward 1.0 if the final answer of `completion` is mathematically equal to `gold`, else 0.0.

    math-verify reads the last `\\boxed{}` (several boxes are read together as a set) or, failing
    that, the last LaTeX or plain expression. `info["extracted"]` is the answer it found, as it
    normalises it (`0.5` reads `\\frac{1}{2}`; "" if none). The whole grading uses at most about
    `budget_s` seconds of CPU time (see the module docstring); an answer that needs more grades 0 with
    `timed_out` set. Grading works from any thread. Never raises on a
    completion (garbage, empty, too long, unparsable or timing out grades 0); raises ValueError for a
    `budget_s` that is not a finite number > 0.
    """
    if (
        isinstance(budget_s, bool)
        or not isinstance(budget_s, (int, float))
        or not math.isfinite(budget_s)
        or budget_s <= 0
    ):
        raise ValueError(f"budget_s must be a finite number of seconds > 0, got {budget_s!r}")
    completion = completion if isinstance(completion, str) else str(completion)
    if too_complex(completion):
        return Grade(reward=0.0, correct=False, info={"extracted": ""})
    correct, extracted, timed_out = _HELPER.grade(completion, gold, float(budget_s))
    return Grade(reward=1.0 if correct else 0.0, correct=correct, info={"extracted": extracted}, timed_out=timed_out)


def too_complex(text: str) -> bool:
    """Whether `text` is longer than `MAX_CHARS` or nests brackets deeper than `MAX_DEPTH` (linear time)."""
    if len(text) > MAX_CHARS:
        return True
    depth = 0
    for c in text:
        if c in "{([":
            depth += 1
            if depth > MAX_DEPTH:
                return True
        elif c in "})]" and depth:
            depth -= 1
    return False


def start_grader() -> None:
    """Start the helper process now, without waiting for it (the first grade then finds it warm)."""
    with _HELPER.lock:
        _HELPER.started()


# ---- in the child: the grading itself -------------------------------------------------------------
def _grade(completion: str, gold: str) -> tuple[bool, str]:
    """(correct, extracted answer), with math-verify's own timeouts off (the child is killed instead)."""
    from math_verify import parse, verify

    try:
        gold_parsed = parse(gold if "\\boxed" in gold else f"\\boxed{{{gold}}}", parsing_timeout=None)
        predicted = parse(completion, parsing_timeout=None)
        extracted = _answer_text(predicted)
        if not gold_parsed or not predicted:
            return False, extracted
        return bool(verify(gold_parsed, predicted, timeout_seconds=None)), extracted
    except Exception:  # noqa: BLE001 (a model's output can make parsing raise anything: graded wrong)
        return False, ""


def _answer_text(parsed: list[Any]) -> str:
    """The matched answer string (math-verify appends it after the sympy object), else the object's text."""
    strings = [p for p in parsed if isinstance(p, str)]
    try:
        text = strings[0] if strings else (str(parsed[0]) if parsed else "")
    except Exception:  # noqa: BLE001 (printing a pathological sympy object can fail)
        text = ""
    return text[:MAX_INFO_CHARS]


def _safe_parse_expr(expr: str, *args: Any, **kwargs: Any) -> Any:
    """sympy's `parse_expr` (which `eval`s) for arithmetic on numbers only; anything else is refused."""
    from sympy.parsing.sympy_parser import parse_expr

    if not _ARITHMETIC.fullmatch(expr):
        raise ValueError("refused: not arithmetic on numbers")
    return parse_expr(expr, *args, **kwargs)


def _install_guards() -> None:
    import math_verify.parser

    math_verify.parser.parse_expr = _safe_parse_expr  # the name parse_expr_cached looks up at call time
    logging.getLogger("math_verify").setLevel(logging.ERROR)  # "timeout is disabled": we kill instead


# ---- the helper process (zygote) and its children ---------------------------------------------------
class _Helper:
    """The caller's side: one JSON line per request to the helper process, one JSON line back."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self._process: subprocess.Popen | None = None
        self._ready = False
        self._owner = os.getpid()  # a forked copy of this process must not share the pipes: it starts its own

    def grade(self, completion: str, gold: str, budget_s: float) -> tuple[bool, str, bool]:
        with self.lock:
            try:
                process = self._running()
                process.stdin.write(json.dumps([completion, gold, max(budget_s - _REPLY_SLACK_S, 0.01)]) + "\n")
                process.stdin.flush()
                correct, extracted, timed_out = json.loads(_read_line(process, _WALL_FACTOR * budget_s + 5))
                return bool(correct), str(extracted), bool(timed_out)
            except Exception as error:  # noqa: BLE001 (the helper overran, died or garbled: start afresh)
                log.warning("grade_math helper failed (%s); the completion grades 0", error)
                self._stop()
                return False, "", True

    def started(self) -> subprocess.Popen:
        if self._owner != os.getpid():
            self._process, self._owner = None, os.getpid()
        if self._process is None or self._process.poll() is not None:
            root = str(Path(__file__).resolve().parents[2])
            env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))}
            self._process = subprocess.Popen(
                [sys.executable, "-c", "from trainer.rewards.math_verify import _serve; _serve()"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
                env=env,
            )
            self._ready = False
        return self._process

    def _running(self) -> subprocess.Popen:
        process = self.started()
        if not self._ready:
            if _read_line(process, HELPER_START_S) != "ready":
                raise RuntimeError("helper did not start")
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


_HELPER = _Helper()


class _Child:
    """A forked grader: requests and replies as JSON lines over two pipes."""

    def __init__(self) -> None:
        req_r, req_w = os.pipe()
        rep_r, rep_w = os.pipe()
        self.pid = os.fork()
        if self.pid == 0:  # the child: grade until the request pipe closes, and never return
            try:
                os.close(req_w)
                os.close(rep_r)
                os.close(0)  # the helper's protocol pipes are not the child's to read or write
                os.dup2(2, 1)
                with os.fdopen(req_r) as requests, os.fdopen(rep_w, "w") as replies:
                    for line in requests:
                        completion, gold = json.loads(line)
                        replies.write(json.dumps(_grade(completion, gold)) + "\n")
                        replies.flush()
            finally:
                os._exit(0)
        os.close(req_r)
        os.close(rep_w)
        self.requests, self.replies = os.fdopen(req_w, "w"), os.fdopen(rep_r)

    def grade(self, completion: str, gold: str, seconds: float) -> tuple[bool, str] | None:
        """The child's verdict, or None if it used `seconds` of CPU time (or `_WALL_FACTOR` times that
        of wall-clock time) without answering; it is then killed."""
        self.requests.write(json.dumps([completion, gold]) + "\n")
        self.requests.flush()
        start_cpu, start_wall = self.cpu_s(), time.monotonic()
        while True:
            readable, _, _ = select.select([self.replies], [], [], _POLL_S)
            if readable:
                line = self.replies.readline()
                if not line:
                    raise OSError("the grading child died")
                correct, extracted = json.loads(line)
                return bool(correct), str(extracted)
            if self.cpu_s() - start_cpu >= seconds or time.monotonic() - start_wall >= _WALL_FACTOR * seconds:
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


_WARM_UP = [  # answers of every kind the comparison handles: each first use of a kind costs up to seconds
    ("x^2+1", "5"),
    ("(x+1)^2", "x^2+2x+1"),
    ("3\\sqrt{13}", "\\sqrt{117}"),
    ("[1,2]", "(1, 2]"),
    ("\\{1,2\\}", "\\{1, 2\\}"),
    ("\\pi", "3.14159"),
    ("x=5", "5"),
    ("30^\\circ", "30"),
    ("50\\%", "0.5"),
    ("\\begin{pmatrix}1\\\\2\\end{pmatrix}", "\\begin{pmatrix}1\\\\2\\end{pmatrix}"),
    ("\\text{(A)}", "A"),
    ("1,2,3", "1,2,3"),
    ("(0, \\infty)", "x>0"),
    ("\\frac{\\sqrt{3}}{2}", "\\frac{\\sqrt3}{2}"),
    ("2^{10}", "1024"),
    ("\\log_2 8", "3"),
    ("\\sin x", "\\cos x"),
    ("a+b", "b+a"),
    ("y = 2x + 1", "y=2x+1"),
    ("x < 3", "x \\le 3"),
    ("10!", "3628800"),
    ("\\binom{5}{2}", "10"),
    ("0.333333", "\\frac{1}{3}"),
    ("\\frac{1}{2}", "0.5"),
    ("1+2*3", "7"),
    ("-\\frac{7}{4}", "-1.75"),
    ("\\dfrac{\\pi}{3}", "60^\\circ"),
    ("2i+1", "1+2i"),
]


def _serve() -> None:
    """The helper's loop: import and warm up math-verify once, then grade each request in a forked
    child, killed at the request's deadline and replaced by a fresh fork after the reply."""
    _install_guards()
    for text, gold in _WARM_UP:
        _grade(f"\\boxed{{{text}}}", gold)  # sympy's and the parser's lazy parts load once, before any fork
    child = _Child()
    print("ready", flush=True)
    for line in sys.stdin:
        completion, gold, seconds = json.loads(line)
        try:
            verdict = child.grade(completion, gold, seconds)
        except OSError:  # the child died some other way: a wrong grade, and a fresh child
            verdict = None
            child.kill()
        correct, extracted = verdict if verdict is not None else (False, "")
        print(json.dumps([correct, extracted, verdict is None]), flush=True)
        if verdict is None:
            child = _Child()
