"""Where on a run's curve its one value is read: final, last-K, step N, best or auc (the vocabulary of
`harness report --at` and of a claim's `at:`)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from harness.spec.yaml_io import ConfigError

_AT = re.compile(r"^(final|best|auc|last-(?P<k>[1-9]\d*)|step[ =:]?(?P<n>\d+))$")
CHOICES = "final, last-K (e.g. last-10), step N, auc, best"


@dataclass(frozen=True)
class At:
    """Which point of each run's curve is its value."""

    kind: str
    """final (last logged value), last (mean of the last k logged values), step (value at step n), best (max),
    auc (the area under the curve over the logged steps divided by their span: the curve's mean over training)."""
    k: int = 0
    n: int = 0

    @classmethod
    def parse(cls, text: str, key: str = "--at") -> At:
        m = _AT.match(str(text).strip().lower())
        if not m:
            raise ConfigError(f"{key}: {text!r} is not one of {CHOICES}")
        if m.group("k"):
            return cls("last", k=int(m.group("k")))
        if m.group("n") is not None:
            return cls("step", n=int(m.group("n")))
        return cls(m.group(1))

    def describe(self) -> str:
        return {"final": "the last logged value of each run",
                "last": f"the mean of each run's last {self.k} logged values",
                "step": f"each run's value at step {self.n}",
                "auc": "each run's area under the curve divided by its step span (its mean over training)",
                "best": "each run's best (largest) value over training — optimistic, a selection on the test curve"}[
            self.kind]
