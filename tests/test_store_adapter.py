"""The store adapter against the installed MLflow: its direct SQL reads what MLflow's public API reads, and a store
whose schema it does not know is read through the public API instead, after one warning."""

import shutil
import sqlite3
import warnings

import numpy as np
import pandas as pd
import pytest
from mlflow.entities import Metric, Param, RunTag
from mlflow.tracking import MlflowClient

from harness.runs.reader import MlflowReader, SqlReader, reader_for
from harness.runs.store_adapter import SqlStore, StoreAdapterWarning

POINTS = ["run_id", "key", "step", "value"]


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> str:
    """A SQLite store written through MLflow's public API: two experiments, runs with params, tags and metrics
    (full-precision values, NaN, ±inf, two values at one step, a huge and a negative step), a run without
    metrics, a deleted run, a running one."""
    uri = f"sqlite:///{tmp_path_factory.mktemp('contract') / 'mlflow.db'}"
    client, rng, t0 = MlflowClient(uri), np.random.default_rng(1), 1_700_000_000_000
    a, b = client.create_experiment("contract-a"), client.create_experiment("contract-b")

    def run(experiment, name, metrics=(), params=None, tags=None, end=True):
        run_id = client.create_run(experiment, run_name=name, start_time=t0).info.run_id
        client.log_batch(
            run_id,
            metrics=[Metric(k, v, t0 + t, s) for k, v, t, s in metrics],
            params=[Param(k, v) for k, v in (params or {}).items()],
            tags=[RunTag(k, v) for k, v in (tags or {}).items()],
        )
        if end:
            client.set_terminated(run_id, "FINISHED", end_time=t0 + 10_000)
        return run_id

    loss = [("loss", float(v), 100 * s, s) for s, v in enumerate(rng.standard_normal(5) * 1e3)]
    run(
        a,
        "r1",
        [*loss, ("loss", 0.1 + 0.2, 450, 3), ("acc", float("nan"), 10, 0), ("acc", 0.5, 20, 1)],
        {"lr": "0.001", "seed": "0"},
        {"sweep_id": "s1", "arm": "x"},
    )
    run(a, "r2", [("acc", float("inf"), 5, -1), ("acc", float("-inf"), 6, 2**40), ("acc", 1e-300, 7, 3)], {"seed": "1"})
    run(a, "r3", params={"seed": "2"}, tags={"sweep_id": "s1"})
    run(a, "running", [("loss", 1.0, 1, 0)], end=False)
    client.delete_run(run(a, "gone", [("loss", 2.0, 1, 0)], {"seed": "3"}))
    run(b, "r5", [("loss", float(rng.random()), 3, 7)], {"lr": "0.1"}, {"note": "other experiment"})
    return uri


def _copy(uri: str, tmp_path) -> str:
    path = tmp_path / "copy.db"
    shutil.copy(uri[len("sqlite:///") :], path)
    return str(path)


def _read(reader) -> dict:
    """Everything a reader returns for every active run, in a form to compare."""
    runs = reader.runs()
    ids = sorted(runs["run_id"])
    points = reader.metrics(ids).astype({"run_id": str, "key": str})
    table = runs.set_index("run_id").sort_index().sort_index(axis=1).astype(object)
    return {
        "runs": table.where(table.notna()),
        "params": reader.params(ids).sort_values(["run_id", "key"], ignore_index=True),
        "metrics": points.sort_values(POINTS, ignore_index=True)[POINTS],
        "last_logged": reader.last_logged(ids).astype(float).sort_index(),
    }


def _assert_same(got: dict, want: dict) -> None:
    pd.testing.assert_frame_equal(got["runs"], want["runs"], check_dtype=False)
    pd.testing.assert_frame_equal(got["params"], want["params"], check_dtype=False)
    g, w = got["metrics"], want["metrics"]
    assert len(g) == len(w) and (g[POINTS[:3]].to_numpy() == w[POINTS[:3]].to_numpy()).all()
    assert np.array_equal(g["value"].to_numpy(float), w["value"].to_numpy(float), equal_nan=True)
    pd.testing.assert_series_equal(got["last_logged"], want["last_logged"], check_names=False)


@pytest.mark.parametrize("scheme", ["sqlite", "sqlite+pysqlite"])  # sqlite3 directly, and through SQLAlchemy
def test_adapter_reads_what_the_public_api_reads(store, scheme):
    adapter = reader_for(store.replace("sqlite", scheme, 1))
    assert isinstance(adapter, SqlReader)
    with warnings.catch_warnings():
        warnings.simplefilter("error", StoreAdapterWarning)
        got = _read(adapter)
    assert adapter.sql.gaps == []  # checked, and read directly
    want = _read(MlflowReader(store))
    _assert_same(got, want)
    m = want["metrics"]
    assert len(m) == 13 and set(want["runs"]["run_name"]) == {"r1", "r2", "r3", "running", "r5"}
    assert np.isnan(m["value"]).sum() == 1 and np.isinf(m["value"]).sum() == 2
    assert m["step"].max() == 2**40 and m["step"].min() == -1


def test_a_schema_it_does_not_know_is_read_through_the_public_api(store, tmp_path, monkeypatch):
    """MLflow renames metrics.step and moves the points to another table, keeping a view named metrics: MLflow
    still reads the store, the adapter finds no metrics table with the columns it reads and steps aside."""
    copy = _copy(store, tmp_path)
    with sqlite3.connect(copy) as con:
        con.executescript(
            "ALTER TABLE metrics RENAME COLUMN step TO step_index;"
            " ALTER TABLE metrics RENAME TO metric_points;"
            " CREATE VIEW metrics AS SELECT key, value, timestamp, run_uuid, step_index AS step, is_nan"
            " FROM metric_points;"
        )
    reader = reader_for(f"sqlite:///{copy}")
    for direct in ("_query", "_points"):  # after the check, not one direct read
        monkeypatch.setattr(SqlStore, direct, lambda *a: pytest.fail("read the unknown schema directly"))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = _read(reader)
    said = [str(w.message) for w in caught if issubclass(w.category, StoreAdapterWarning)]
    assert len(said) == 1 and "\n" not in said[0] and "no table metrics" in said[0] and "public API" in said[0]
    assert reader.sql.gaps == ["table metrics"]
    _assert_same(got, _read(MlflowReader(store)))


@pytest.mark.parametrize("scheme", ["sqlite", "sqlite+pysqlite"])
def test_schema_check_names_each_missing_column(store, tmp_path, scheme):
    copy = _copy(store, tmp_path)
    with sqlite3.connect(copy) as con:
        con.execute("ALTER TABLE tags RENAME COLUMN value TO tag_value")
        con.execute("ALTER TABLE latest_metrics DROP COLUMN timestamp")
    sql = SqlStore(f"{scheme}:///{copy}")
    with pytest.warns(StoreAdapterWarning, match=r"no tags\.value, latest_metrics\.timestamp\)"):
        assert not sql.usable()
    assert sql.gaps == ["tags.value", "latest_metrics.timestamp"]
    assert SqlStore(store.replace("sqlite", scheme, 1)).usable()
