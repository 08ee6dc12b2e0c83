"""Where on a run's curve its one value is read: final, last-K, first-K, step N, best or auc (the vocabulary of
`harness report --at` and of a claim's `at:`)."""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Annotated

from pydantic import BeforeValidator, PlainSerializer

from harness.config.errors import ConfigError

_AT = re.compile(r"^(final|best|auc|(?P<end>last|first)-(?P<k>[1-9]\d*)|step[ =:]?(?P<n>\d+))$")
CHOICES = "final, last-K (e.g. last-10), first-K, step N, auc, best"
DEFAULT_AT = "last-10"
"""A run's value unless asked otherwise (a claim's `at`, `harness report --at`, a study's objective)."""


def value_key(metric: str, at: At) -> str:
    """One run's value of `metric` read at `at`, named: 'accuracy @ last-10' (an evidence file's keys)."""
    return f"{metric} @ {at}"


@dataclass(frozen=True)
class At:
    """Which point of each run's curve is its value."""

    kind: str
    """final (last logged value), last (mean of the last k logged values), first (mean of the first k), step (value
    at step n), best (max),
    auc (the area under the curve over the logged steps divided by their span: the curve's mean over training)."""
    k: int = 0
    n: int = 0

    @classmethod
    def parse(cls, text: str, key: str = "--at") -> At:
        m = _AT.match(str(text).strip().lower())
        if not m:
            raise ConfigError(f"{key}: {text!r} is not one of {CHOICES}")
        if m.group("k"):
            return cls(m.group("end"), k=int(m.group("k")))
        if m.group("n") is not None:
            return cls("step", n=int(m.group("n")))
        return cls(m.group(1))

    def value(self, steps: Sequence[float], values: Sequence[float], *, larger_is_better: bool = True) -> float:
        """A run's one value from its curve (`values` at `steps`, in step order; NaN points are skipped, as
        never logged); NaN where there is none (an empty curve, no point at step N). `best` is the largest value,
        or the smallest where `larger_is_better` is False. Plain Python: the config layer imports no numpy."""
        points = [(float(s), float(v)) for s, v in zip(steps, values) if not math.isnan(v)]
        if not points:
            return math.nan
        ys = [v for _, v in points]
        if self.kind == "final":
            return ys[-1]
        if self.kind in ("last", "first"):
            part = ys[-self.k :] if self.kind == "last" else ys[: self.k]
            return math.fsum(part) / len(part)
        if self.kind == "best":
            return max(ys) if larger_is_better else min(ys)
        if self.kind == "step":
            at_n = [v for s, v in points if s == self.n]
            return at_n[-1] if at_n else math.nan
        xs = [s for s, _ in points]  # auc: the trapezoid area over the logged steps divided by their span
        if len(xs) < 2 or xs[-1] == xs[0]:
            return math.fsum(ys) / len(ys)
        area = math.fsum((xs[i + 1] - xs[i]) * (ys[i + 1] + ys[i]) / 2 for i in range(len(xs) - 1))
        return area / (xs[-1] - xs[0])

    def __str__(self) -> str:
        """The text it is parsed from, e.g. 'last-10' or 'step 100'."""
        return {"last": f"last-{self.k}", "first": f"first-{self.k}", "step": f"step {self.n}"}.get(
            self.kind, self.kind
        )

    def describe(self) -> str:
        return {
            "final": "the last logged value of each run",
            "last": f"the mean of each run's last {self.k} logged values",
            "first": f"the mean of each run's first {self.k} logged values",
            "step": f"each run's value at step {self.n}",
            "auc": "each run's area under the curve divided by its step span (its mean over training)",
            "best": "each run's best (largest) value over training — optimistic, a selection on the test curve",
        }[self.kind]


def _parsed(text: object) -> At:
    if isinstance(text, At):
        return text
    try:
        return At.parse(str(text), key="at")
    except ConfigError as exc:
        raise ValueError(str(exc).removeprefix("at: ")) from None


AtField = Annotated[At, BeforeValidator(_parsed), PlainSerializer(str, return_type=str)]
"""A settings field that reads 'last-10' (etc.) as an `At`, once, at validation, and writes it back as text."""
