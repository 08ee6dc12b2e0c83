"""One number per run and metric: what `--at` (or a claim's `at:`) asks for."""

from __future__ import annotations

import numpy as np
import pandas as pd

from harness.runs.sweep_data import SweepData, non_finite
from harness.spec.at import At
from harness.spec.yaml_io import ConfigError


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
    elif at.kind == "auc":
        vals = m.groupby("run_id", observed=True)[["step", "value"]].apply(_auc)
    else:
        vals = m[m["step"] == at.n].groupby("run_id", observed=True)["value"].last()
    cols = ["run_id", "arm", "seed", *data.varying]
    out = done[cols].join(vals.rename("value"), on="run_id").dropna(subset=["value"]).reset_index(drop=True)
    bad = non_finite(out, metric, data.runs)
    if bad:
        raise ConfigError(f"{bad} (--at: {at.describe()})")
    return out


def _auc(curve: pd.DataFrame) -> float:
    """Trapezoid area over the logged steps divided by their span; a single point is its own value."""
    x, y = curve["step"].to_numpy(float), curve["value"].to_numpy(float)
    if len(x) < 2 or x[-1] == x[0]:
        return float(y.mean()) if len(y) else float("nan")
    return float(np.trapezoid(y, x) / (x[-1] - x[0]))
