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
2. The bound: math-verify runs (its own timeouts off) in a `BoundedService` (trainer/rewards/bounded.py):
   a child forked from a helper that has already imported and warmed up sympy, SIGKILLed once it has
   used the budget of CPU time; the answer grades wrong and `Grade.timed_out` is set (the training loop
   counts these in `train/grade_timeouts`). An answer takes ≤ `budget_s` on an idle machine
   (benchmarks/grader_adversarial.py); the helper is started on first use (or by `start_grader`, when a
   task is built), and a call costs a round trip of about a millisecond.

Nothing in a completion is ever executed. math-verify's plain-text fallback hands a regex match
to sympy's `parse_expr`, which `eval`s Python; the match is limited to digits and arithmetic
operators today, and `_safe_parse_expr` enforces that in the child, so that a text such as
`__import__('os').system(...)` cannot reach `eval` even if a later math-verify widens its regex.
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Callable
from typing import Any

from trainer.rewards.bounded import BoundedService, StartError
from trainer.rewards.grade import Grade

MAX_INFO_CHARS = 200
"""Longest extracted answer kept in `Grade.info` (it goes into metrics tables)."""
MAX_CHARS = 20_000
"""Longer texts grade wrong unparsed (a whole worked solution is a few thousand characters)."""
MAX_DEPTH = 40
"""Texts with `{`, `(` or `[` nested deeper grade wrong unparsed (real answers nest a few levels)."""
BUDGET_S = 1.0
"""Default budget per answer, everything included (CPU time: wall-clock time on an idle machine)."""
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
    try:
        reply = _HELPER.call([completion, gold], float(budget_s))
    except StartError as error:  # a broken math-verify install: every answer grades wrong, loudly
        log.warning("grade_math: %s; the completion grades 0", error)
        return Grade(reward=0.0, correct=False, info={"extracted": ""}, timed_out=True)
    correct, extracted = reply.value if reply.value is not None else (False, "")
    correct = bool(correct) and reply.error is None
    spent = reply.timed_out or reply.over is not None or reply.died is not None  # a bound, or grading died: wrong
    return Grade(reward=1.0 if correct else 0.0, correct=correct, info={"extracted": str(extracted)}, timed_out=spent)


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
    _HELPER.start()


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


_HELPER = BoundedService("trainer.rewards.math_verify:_grader")


def _install_guards() -> None:
    import math_verify.parser

    math_verify.parser.parse_expr = _safe_parse_expr  # the name parse_expr_cached looks up at call time
    logging.getLogger("math_verify").setLevel(logging.ERROR)  # "timeout is disabled": we kill instead


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


def _grader(init: None) -> Callable[[list[str]], tuple[bool, str]]:
    """The helper's function (`BoundedService`'s factory): guards installed and math-verify warmed up once,
    before any child is forked; each request is `[completion, gold]`."""
    _install_guards()
    for text, gold in _WARM_UP:
        _grade(f"\\boxed{{{text}}}", gold)  # sympy's and the parser's lazy parts load once, before any fork
    return lambda request: _grade(*request)
