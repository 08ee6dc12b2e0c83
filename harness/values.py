"""One number per run and metric: what `--at` asks for (final, last-K, step N, best)."""

from __future__ import annotations

import re
from dataclasses import dataclass

import pandas as pd

from harness.config_io import ConfigError
from harness.sweep_data import SweepData, non_finite

_AT = re.compile(r"^(final|best|last-(?P<k>[1-9]\d*)|step[ =:]?(?P<n>\d+))$")


@dataclass(frozen=True)
class At:
    """Which point of each run's curve is its value."""

    kind: str
    """final (last logged value), last (mean of the last k logged values), step (value at step n), best (max)."""
    k: int = 0
    n: int = 0

    @classmethod
    def parse(cls, text: str) -> At:
        m = _AT.match(text.strip().lower())
        if not m:
            raise ConfigError(f"--at: {text!r} is not one of final, last-K (e.g. last-10), step N, best")
        if m.group("k"):
            return cls("last", k=int(m.group("k")))
        if m.group("n") is not None:
            return cls("step", n=int(m.group("n")))
        return cls(m.group(1))

    def describe(self) -> str:
        return {"final": "the last logged value of each run",
                "last": f"the mean of each run's last {self.k} logged values",
                "step": f"each run's value at step {self.n}",
                "best": "each run's best (largest) value over training — optimistic, a selection on the test curve"}[
            self.kind]


def run_values(data: SweepData, metric: str, at: At) -> pd.DataFrame:
    """One row per finished run that logged `metric`: run_id, arm, seed, the varying settings, value
    (ConfigError naming the run and metric where a value is ±inf)."""
    m = data.metrics[data.metrics["key"] == metric]
    done = data.runs[data.runs["state"] == "done"]
    m = m[m["run_id"].isin(done["run_id"])].sort_values("step")
    grouped = m.groupby("run_id", observed=True)["value"]
    if at.kind == "final":
        vals = grouped.last()
    elif at.kind == "last":
        vals = m.groupby("run_id", observed=True).tail(at.k).groupby("run_id", observed=True)["value"].mean()
    elif at.kind == "best":
        vals = grouped.max()
    else:
        vals = m[m["step"] == at.n].groupby("run_id", observed=True)["value"].last()
    cols = ["run_id", "arm", "seed", *data.varying]
    out = done[cols].join(vals.rename("value"), on="run_id").dropna(subset=["value"]).reset_index(drop=True)
    bad = non_finite(out, metric, data.runs)
    if bad:
        raise ConfigError(f"{bad} (--at: {at.describe()})")
    return out
