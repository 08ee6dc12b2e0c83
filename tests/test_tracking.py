"""RunTracker against real SQLite MLflow stores in temporary directories."""

from __future__ import annotations

import math
import multiprocessing as mp
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
import yaml
from mlflow.tracking import MlflowClient

from harness.runs.layout import default_tracking_uri
from harness.runs.writer import TRUNCATION_MARKER, RunTracker, flatten_params, prepare_store


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """One store for the module: creating a SQLite store runs every migration (seconds)."""
    root = tmp_path_factory.mktemp("results")
    uri = f"sqlite:///{root}/mlflow.db"
    return uri, prepare_store(uri, "test")


def _read_artifact(client: MlflowClient, run_id: str, path: str, dst: Path) -> Path:
    return Path(client.download_artifacts(run_id, path, str(dst)))


def test_default_uri_precedence(tmp_path, monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    default = default_tracking_uri(tmp_path / "res")
    assert default == f"sqlite:///{(tmp_path / 'res' / 'mlflow.db').resolve()}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://env:5000")
    assert default_tracking_uri(tmp_path / "res") == "http://env:5000"
    assert default_tracking_uri(tmp_path / "res", explicit="http://cli:5000") == "http://cli:5000"


def test_relative_results_dir_gives_absolute_uri(tmp_path, monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.chdir(tmp_path)
    assert default_tracking_uri("results") == f"sqlite:///{tmp_path.resolve()}/results/mlflow.db"


def test_prepare_store_is_idempotent(tmp_path):
    uri = f"sqlite:///{tmp_path}/deep/er/mlflow.db"
    first = prepare_store(uri, "exp")
    assert prepare_store(uri, "exp") == first
    assert (tmp_path / "deep" / "er" / "mlflow.db").exists()
    experiment = MlflowClient(uri).get_experiment(first)
    assert experiment.artifact_location == (tmp_path / "deep" / "er" / "artifacts").as_uri()
    assert prepare_store(uri, "other") != first


def test_a_fresh_store_is_a_copy_of_the_process_s_migrated_one_and_opens_like_one(tmp_path, monkeypatch):
    """The first fresh SQLite store of a process runs MLflow's migrations; the next ones (a missing file, or an
    empty one) are copies and run none, at the same schema, with MLflow's Default experiment beside the database."""
    import sqlite3

    import mlflow.store.db.utils
    import sqlalchemy

    def version(db: Path) -> list:
        with sqlite3.connect(db) as con:
            return con.execute("SELECT version_num FROM alembic_version").fetchall()

    prepare_store(f"sqlite:///{tmp_path}/first/mlflow.db", "exp")  # the process's template exists from here on
    migrated = tmp_path / "migrated.db"
    mlflow.store.db.utils._initialize_tables(sqlalchemy.create_engine(f"sqlite:///{migrated}"))

    def refuse(engine):
        raise AssertionError("a fresh store ran MLflow's migrations")

    monkeypatch.setattr(mlflow.store.db.utils, "_initialize_tables", refuse)
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "mlflow.db").touch()
    for db in (tmp_path / "missing" / "mlflow.db", tmp_path / "empty" / "mlflow.db"):
        uri = f"sqlite:///{db}"
        experiment_id = prepare_store(uri, "exp")
        assert version(db) == version(migrated)
        client = MlflowClient(uri)
        run = client.create_run(experiment_id)
        client.log_metric(run.info.run_id, "m", 1.0, step=1)
        assert [m.value for m in client.get_metric_history(run.info.run_id, "m")] == [1.0]
        assert client.get_experiment("0").artifact_location == (db.parent / "artifacts" / "0").as_uri()
        assert sorted(p.name for p in db.parent.iterdir()) == ["mlflow.db", "mlflow.db.store.lock"]  # no temp file


def test_flatten_params_dotted_and_truncated():
    flat = flatten_params({"a": {"b": 1, "c": {"d": [1, 2]}, "e": {}}, "f": None, "g": "x" * 7000})
    assert flat["a.b"] == "1"
    assert flat["a.c.d"] == "[1, 2]"
    assert flat["a.e"] == "{}"
    assert flat["f"] == "None"
    assert len(flat["g"]) == 6000 and flat["g"].endswith(TRUNCATION_MARKER)


def test_full_run(store, tmp_path):
    uri, experiment_id = store
    config = {
        "seed": 3,
        "objective": {"clip_low": 0.2, "clip_high": 0.28, "name": "dapo"},
        "sweep": {f"knob_{i}": i for i in range(150)},  # > 100 params: several batches
        "long": "y" * 7000,
    }
    rows = pd.DataFrame(
        {
            "step": [0, 0, 1, 1],
            "prompt_id": ["p0", "p0", "p1", "p1"],
            "sample_index": [0, 1, 0, 1],
            "reward": [1.0, 0.0, 0.5, 1.0],
            "correct": [True, False, False, True],
            "length": [12, 40, 33, 9],
            "truncated": [False, True, False, False],
            "advantage": [0.7, -0.7, -0.7, 0.7],
        }
    )
    names = [f"m/{i}" for i in range(35)]
    tags = {"sweep_id": "s1", "arm": "abc", "config_hash": "def", "seed": 3}
    with RunTracker(uri, experiment_id, run_name="r", tags=tags, config=config, flush_every=7) as run:
        for step in range(50):  # 50 steps x 35 metrics = 1750: more than one 1000-metric batch
            run.log_metrics(step, {name: step + i / 100 for i, name in enumerate(names)})
            run.log_metrics(step, {"train/length_correct_mean": None})  # undefined: skipped
        run.set_tags({"note": "hello"})
        assert run.log_table("rollouts", rows) == "rollouts.parquet"

    client = MlflowClient(uri)
    got = client.get_run(run.run_id)
    assert got.info.status == "FINISHED"
    assert got.info.run_name == "r"
    assert {k: got.data.tags[k] for k in tags} == {k: str(v) for k, v in tags.items()}
    assert got.data.tags["status"] == "FINISHED" and got.data.tags["note"] == "hello"
    assert "failure_reason" not in got.data.tags
    assert len([k for k in got.data.params if k.startswith("sweep.")]) == 150
    assert got.data.params["objective.clip_high"] == "0.28"
    assert got.data.params["long"].endswith(TRUNCATION_MARKER)
    for i in (0, 17, 34):
        history = client.get_metric_history(run.run_id, names[i])
        assert sorted(m.step for m in history) == list(range(50))
        assert all(m.value == pytest.approx(m.step + i / 100) for m in history)
    assert client.get_metric_history(run.run_id, "train/length_correct_mean") == []

    back = pd.read_parquet(_read_artifact(client, run.run_id, "rollouts.parquet", tmp_path))
    pd.testing.assert_frame_equal(back, rows)
    logged = yaml.safe_load(_read_artifact(client, run.run_id, "config.yaml", tmp_path).read_text())
    assert logged == config


def test_pydantic_config_is_logged(store, tmp_path):
    from pydantic import BaseModel

    class Cfg(BaseModel):
        lr: float = 1e-6
        path: Path = Path("/x")

    uri, experiment_id = store
    with RunTracker(uri, experiment_id, config=Cfg()) as run:
        pass
    client = MlflowClient(uri)
    assert client.get_run(run.run_id).data.params == {"lr": "1e-06", "path": "/x"}
    logged = yaml.safe_load(_read_artifact(client, run.run_id, "config.yaml", tmp_path).read_text())
    assert logged == {"lr": 1e-6, "path": "/x"}


def test_config_yaml_keeps_key_order_and_plain_types(store, tmp_path):
    uri, experiment_id = store
    config = {"zeta": (1, 2), "alpha": {"path": Path("/p")}}
    with RunTracker(uri, experiment_id, config=config) as run:
        pass
    text = _read_artifact(MlflowClient(uri), run.run_id, "config.yaml", tmp_path).read_text()
    assert text.index("zeta") < text.index("alpha")
    assert yaml.safe_load(text) == {"zeta": [1, 2], "alpha": {"path": "/p"}}


def test_exception_ends_run_failed_and_propagates(store):
    uri, experiment_id = store
    with pytest.raises(RuntimeError, match="boom"):
        with RunTracker(uri, experiment_id, flush_every=100) as run:
            run.log_metrics(0, {"policy/loss": 1.0})
            run.log_metrics(1, {"policy/loss": 2.0})
            raise RuntimeError("boom\nsecond line " + "z" * 1000)
    client = MlflowClient(uri)
    got = client.get_run(run.run_id)
    assert got.info.status == "FAILED"
    assert got.data.tags["status"] == "FAILED"
    reason = got.data.tags["failure_reason"]
    assert reason.startswith("RuntimeError: boom second line zzz") and "\n" not in reason
    assert len(reason) == 500 and reason.endswith(TRUNCATION_MARKER)
    # buffered metrics were flushed before ending the run
    assert [m.step for m in client.get_metric_history(run.run_id, "policy/loss")] == [0, 1]
    artifacts = [f.path for f in client.list_artifacts(run.run_id)]
    assert "failure.txt" in artifacts


def test_nan_and_inf_are_stored(store):
    uri, experiment_id = store
    with RunTracker(uri, experiment_id) as run:
        run.log_metrics(0, {"policy/loss": 0.5, "policy/grad_norm": 1.0})
        run.log_metrics(1, {"policy/loss": math.nan, "policy/grad_norm": math.inf})
    client = MlflowClient(uri)
    loss = sorted(client.get_metric_history(run.run_id, "policy/loss"), key=lambda m: m.step)
    grad = sorted(client.get_metric_history(run.run_id, "policy/grad_norm"), key=lambda m: m.step)
    assert loss[0].value == 0.5 and math.isnan(loss[1].value)
    assert grad[1].value == sys.float_info.max  # MLflow's SQL store clamps inf to the largest float


def test_flush_every_sends_before_the_end(store):
    uri, experiment_id = store
    client = MlflowClient(uri)
    with RunTracker(uri, experiment_id, flush_every=3, flush_seconds=1e9) as run:
        run.log_metrics(0, {"a": 0.0})
        run.log_metrics(1, {"a": 1.0})
        assert client.get_metric_history(run.run_id, "a") == []
        run.log_metrics(2, {"a": 2.0})  # the third step hands the buffer to the sender thread
        deadline = time.monotonic() + 60  # a hang guard: the sender thread writes as soon as it is handed the buffer
        while len(client.get_metric_history(run.run_id, "a")) < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(client.get_metric_history(run.run_id, "a")) == 3


def test_two_trackers_on_two_stores_in_one_process(store, tmp_path):
    uris = [store[0], f"sqlite:///{tmp_path}/b/mlflow.db"]
    ids = [prepare_store(uri, "two-stores") for uri in uris]
    with RunTracker(uris[0], ids[0]) as run_a, RunTracker(uris[1], ids[1]) as run_b:
        run_a.log_metrics(0, {"x": 1.0})
        run_b.log_metrics(0, {"x": 2.0})
    assert MlflowClient(uris[0]).get_metric_history(run_a.run_id, "x")[0].value == 1.0
    assert MlflowClient(uris[1]).get_metric_history(run_b.run_id, "x")[0].value == 2.0
    assert [r.info.run_id for r in MlflowClient(uris[1]).search_runs([ids[1]])] == [run_b.run_id]


def _worker(uri: str, experiment_id: str, seed: int, steps: int) -> None:
    with RunTracker(uri, experiment_id, run_name=f"seed{seed}", tags={"seed": seed}, flush_every=1) as run:
        run.log_config({"seed": seed})
        for step in range(steps):
            run.log_metrics(step, {f"m{i}": float(step * seed) for i in range(35)})


@pytest.mark.slow
def test_two_processes_share_one_prepared_store(store):
    uri = store[0]
    experiment_id = prepare_store(uri, "concurrent")
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=_worker, args=(uri, experiment_id, seed, 40)) for seed in (1, 2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=120)
    assert [p.exitcode for p in procs] == [0, 0]
    runs = MlflowClient(uri).search_runs([experiment_id])
    assert sorted(r.info.run_name for r in runs) == ["seed1", "seed2"]
    assert all(r.info.status == "FINISHED" and r.data.tags["status"] == "FINISHED" for r in runs)
    client = MlflowClient(uri)
    assert all(len(client.get_metric_history(r.info.run_id, "m34")) == 40 for r in runs)


def _prepare_together(uri: str, barrier) -> None:
    barrier.wait(timeout=120)  # every process, mlflow imported, reaches the fresh store at once
    prepare_store(uri, "fresh")


@pytest.mark.slow
def test_concurrent_first_use_of_a_fresh_store_all_succeed(tmp_path):
    """Several processes creating one new SQLite store at the same instant: one migrates, the others wait."""
    uri = f"sqlite:///{tmp_path}/new/mlflow.db"
    ctx = mp.get_context("spawn")
    barrier = ctx.Barrier(4)
    procs = [ctx.Process(target=_prepare_together, args=(uri, barrier)) for _ in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=180)
    assert [p.exitcode for p in procs] == [0] * 4
    assert [e.name for e in MlflowClient(uri).search_experiments()].count("fresh") == 1


def test_a_run_closed_by_another_process_is_not_set_back_to_finished(store):
    """A rerun of a sweep ends FAILED the runs of a killed invocation; a straggler worker must not reopen one."""
    from harness.engine.resume import end_failed
    from harness.runs.writer import RunClosedElsewhere

    uri, experiment_id = store
    client = MlflowClient(uri)
    with pytest.raises(RunClosedElsewhere, match="FAILED"):
        with RunTracker(uri, experiment_id) as run:
            run.log_metrics(0, {"a": 1.0})
            end_failed(client, run.run_id, "orphaned: the sweep process died")
    got = client.get_run(run.run_id)
    assert got.info.status == "FAILED" and got.data.tags["status"] == "FAILED"
    assert got.data.tags["failure_reason"] == "orphaned: the sweep process died"
