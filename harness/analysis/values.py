"""One number per run and metric: what `--at` (or a claim's `at:`) asks for."""

from __future__ import annotations

import pandas as pd

from harness.config.at import At
from harness.config.errors import DataError
from harness.runs.sweep_data import SweepData, non_finite


def run_values(data: SweepData, metric: str, at: At) -> pd.DataFrame:
    """One row per finished run that logged `metric`: run_id, arm, seed, the varying settings, value
    (DataError naming the run and metric where a value is ±inf)."""
    m = data.metrics[data.metrics["key"] == metric]
    done = data.runs[data.runs["state"] == "done"]
    m = m[m["run_id"].isin(done["run_id"])].sort_values("step")
    cols = ["run_id", "arm", "seed", *data.varying]
    if m.empty:  # no finished run logged it (groupby-apply on nothing gives a frame, not a series)
        return done[cols].iloc[:0].assign(value=pd.Series(dtype=float)).reset_index(drop=True)
    vals = m.groupby("run_id", observed=True)[["step", "value"]].apply(
        lambda curve: at.value(curve["step"].tolist(), curve["value"].tolist())
    )
    out = done[cols].join(vals.rename("value"), on="run_id").dropna(subset=["value"]).reset_index(drop=True)
    bad = non_finite(out, metric, data.runs)
    if bad:
        raise DataError(f"{bad} (--at: {at.describe()})")
    return out
