"""The dashboard reads a sweep the same way from SQL and through an MLflow server, equal to MLflow's own API."""

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request

import pandas as pd
import pytest
from mlflow.tracking import MlflowClient

from harness.config.at import At
from harness.runs import store_adapter
from harness.runs.reader import MlflowReader, SqlReader, reader_for, sweeps
from harness.runs.sweep_data import read_sweep

KEY = ["run_id", "key", "step"]


def _sorted(frame: pd.DataFrame) -> pd.DataFrame:
    return frame.astype({"run_id": str, "key": str}).sort_values(KEY).reset_index(drop=True)


def _same(a: pd.DataFrame, b: pd.DataFrame) -> None:
    a, b = _sorted(a), _sorted(b)
    assert len(a) == len(b) and (a[KEY].to_numpy() == b[KEY].to_numpy()).all()
    assert ((a["value"] == b["value"]) | (a["value"].isna() & b["value"].isna())).all()


def test_sql_reader_equals_mlflow_metric_history(dashboard_store):
    reader = reader_for(dashboard_store)
    assert isinstance(reader, SqlReader)
    (sweep,) = sweeps(reader.runs())
    ids = sweep.runs["run_id"].tolist()
    client = MlflowClient(dashboard_store)
    expected = pd.DataFrame(
        [
            {"run_id": r, "key": k, "step": m.step, "value": m.value}
            for r in ids
            for k in client.get_run(r).data.metrics
            for m in client.get_metric_history(r, k)
        ]
    )
    _same(reader.metrics(ids), expected)
    params = reader.params(ids)
    assert {(r, k): v for r, k, v in params.itertuples(index=False)} == {
        (r, k): v for r in ids for k, v in client.get_run(r).data.params.items()
    }


def test_sweep_data_arms_states_and_plan(dashboard_store):
    reader = reader_for(dashboard_store)
    data = read_sweep(reader, sweeps(reader.runs())[0])
    assert data.arms == ["aggregation=seq_mean_token_mean", "aggregation=constant"]  # plan order
    # the timed-out job was made slow with more steps: a second varying setting, if its params got logged
    # before the kill (they do when the worker started its run within the 4 s)
    assert data.varying in (["objective.aggregation"], ["objective.aggregation", "train.lr"])
    assert not data.cumulative
    assert len(data.planned) == 5
    states = data.runs.groupby("state").size().to_dict()
    assert states == {"done": 4, "failed": 1, "running": 1}
    failed = data.runs[data.runs["state"] == "failed"].iloc[0]
    assert failed["failure_reason"].startswith("TrainingDiverged: diverged at step 1")
    by_arm = data.by_arm("train/accuracy")
    assert list(by_arm["aggregation=constant"].columns) == ["seed 0", "seed 1"]
    assert list(by_arm["aggregation=constant"].index) == [1, 2, 3]
    tokens = data.wide("train/accuracy", "tokens")
    assert tokens.index.is_monotonic_increasing or len(tokens.columns) > 1
    final = data.values("train/accuracy", At("last", k=2))
    assert set(final.frame["arm"]) == set(data.arms) and final.not_finite == ""
    every = data.values("train/accuracy", At("last", k=2), finished_only=False).frame
    assert set(every["run_id"]) - set(final.frame["run_id"])  # the running run's value too


def test_empty_or_missing_store(tmp_path):
    reader = reader_for(f"sqlite:///{tmp_path / 'missing.db'}")
    assert reader.runs().empty and sweeps(reader.runs()) == []
    assert reader.metrics([]).empty and list(reader.metrics([]).columns) == KEY + ["value"]


@pytest.fixture
def mlflow_server(dashboard_store, tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "mlflow",
            "server",
            "--backend-store-uri",
            dashboard_store,
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--workers",
            "1",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
        cwd=tmp_path,
    )  # the server's own ./mlruns goes there, not into the checkout
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                if urllib.request.urlopen(f"{url}/health", timeout=2).status == 200:
                    break
            except OSError as e:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("mlflow server did not start") from e
                time.sleep(0.5)
        yield url
    finally:  # the server starts job consumers of its own: stop the whole process group
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)


def test_server_reader_matches_sql_reader(dashboard_store, mlflow_server, monkeypatch):
    """Through an MLflow server: search_runs and the bulk history route, one request per key per 100 runs; fewer
    runs a request where the route would truncate, and get_metric_history per run where the server lacks it."""
    sql, rest = SqlReader(dashboard_store), reader_for(mlflow_server)
    assert isinstance(rest, MlflowReader)
    runs_sql, runs_rest = sql.runs(), rest.runs()
    assert set(runs_sql["run_id"]) == set(runs_rest["run_id"])
    ids = sorted(runs_sql["run_id"])
    _same(rest.metrics(ids), sql.metrics(ids))
    assert len(rest.params(ids)) == len(sql.params(ids))
    a = read_sweep(sql, sweeps(runs_sql)[0])
    b = read_sweep(rest, sweeps(runs_rest)[0])
    assert a.arms == b.arms and a.varying == b.varying
    assert a.runs.set_index("run_id")["state"].to_dict() == b.runs.set_index("run_id")["state"].to_dict()
    monkeypatch.setattr(store_adapter, "BULK_POINTS", 3)  # a run has up to 3 points a key: halves, then single runs
    _same(rest.metrics(ids), sql.metrics(ids))
    monkeypatch.setattr(store_adapter, "BULK_ROUTE", "/ajax-api/2.0/mlflow/metrics/no-such-route")
    with pytest.warns(store_adapter.StoreAdapterWarning, match="no-such-route route"):
        _same(rest.metrics(ids), sql.metrics(ids))
