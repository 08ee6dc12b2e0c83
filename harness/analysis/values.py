"""One number per run and metric: what `--at` (or a claim's `at:`) asks for."""

from __future__ import annotations

import pandas as pd

from harness.config.at import At
from harness.config.errors import DataError
from harness.runs.sweep_data import SweepData


def run_values(data: SweepData, metric: str, at: At) -> pd.DataFrame:
    """One row per finished run that logged `metric` (`SweepData.values`): run_id, arm, seed, the varying
    settings, value; a DataError naming the run and metric where a value is ±inf."""
    found = data.values(metric, at)
    if found.not_finite:
        raise DataError(f"{found.not_finite} (--at: {at.describe()})")
    return found.frame
