"""MLflow tracking for training runs: one `RunTracker` per run, metrics buffered into batches.

Plumbing only (no torch). Every call goes through an `MlflowClient` bound to an explicit
tracking URI, so several trackers (or stores) can live in one process and nothing depends on
MLflow's global active run. MLflow's `log_batch` is ~170x faster than one call per metric and takes
at most 1000 metrics / 100 params / 100 tags per call; several processes creating a fresh SQLite store
at once crash in its schema migration, so the store is created once (`prepare_store`) before jobs fan out.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import os
import queue
import sqlite3
import tempfile
import threading
import time
import traceback
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import yaml
from mlflow.entities import Metric, Param, RunStatus, RunTag
from mlflow.exceptions import MlflowException
from mlflow.protos.databricks_pb2 import RESOURCE_ALREADY_EXISTS, ErrorCode
from mlflow.tracking import MlflowClient
from mlflow.utils.validation import (
    MAX_METRICS_PER_BATCH,
    MAX_PARAM_VAL_LENGTH,
    MAX_PARAMS_TAGS_PER_BATCH,
)

from harness.config.yaml_io import flatten
from harness.runs.layout import (
    FAILURE_REASON_TAG,
    PRUNED,
    SEQUENTIAL_ARTIFACT,
    SEQUENTIAL_TAG,
    SQLITE_PREFIX,
    STATUS_TAG,
    STOP_REASON_TAG,
    sqlite_path,
    store_exists,
)
from harness.runs.locks import hold

TRUNCATION_MARKER = "...[truncated]"
_REASON_MAX_CHARS = 500
_log = logging.getLogger(__name__)


class RunClosedElsewhere(RuntimeError):
    """The run was already ended by another process (e.g. a rerun of the sweep failed it as orphaned):
    it keeps that ending, and this process's end is refused."""


class RunStopped(Exception):
    """Raised from inside a run to end it early on purpose (e.g. a pruned trial): the run ends KILLED with
    status tag PRUNED and the message as stop_reason, its metrics kept."""


def lock_file(uri: str, key: str) -> Path:
    """The file of lock `key` (a file-name-safe word) on the store at `uri`: beside a SQLite database
    (`<db>.<key>.lock`), else in the user's cache, named by a hash of (uri, key); the latter guards
    only this machine."""
    db = sqlite_path(uri)
    if db is not None:
        return db.with_name(f"{db.name}.{key}.lock")
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "harness" / "locks"
    return cache / (hashlib.sha256(f"{uri}\n{key}".encode()).hexdigest()[:24] + ".lock")


def prepare_store(uri: str, experiment_name: str) -> str:
    """Create the store (running MLflow's schema migrations) and the experiment; return its id.

    Idempotent and safe under concurrency: the first `MlflowClient` of a fresh SQLite file migrates
    it, and two processes migrating one file at once crash, so everything here runs under the
    store's file lock (`lock_file(uri, "store")`). Call it before any other client use of a store.
    Artifacts of a SQLite store go next to the database (`<db dir>/artifacts`) instead of MLflow's
    default `./mlruns` under the current directory.
    """
    db = sqlite_path(uri)
    artifact_location = None
    if db is not None:
        db.parent.mkdir(parents=True, exist_ok=True)
        artifact_location = (db.parent / "artifacts").resolve().as_uri()
    with hold(lock_file(uri, "store")):
        if db is not None and not store_exists(uri):
            _write_empty_store(db)
        client = MlflowClient(tracking_uri=uri)
        experiment = client.get_experiment_by_name(experiment_name)
        if experiment is None:
            try:
                return client.create_experiment(experiment_name, artifact_location=artifact_location)
            except MlflowException as exc:  # another machine created it in between (a shared server)
                if exc.error_code != ErrorCode.Name(RESOURCE_ALREADY_EXISTS):
                    raise
                experiment = client.get_experiment_by_name(experiment_name)
        if experiment.lifecycle_stage == "deleted":
            client.restore_experiment(experiment.experiment_id)
        return experiment.experiment_id


@functools.lru_cache(maxsize=1)
def _empty_sqlite_store() -> bytes:
    """An empty MLflow SQLite store at this MLflow's schema, as bytes: made once per process.

    MLflow makes a fresh store by running its Alembic migrations one by one (~1 s of CPU); a process that makes
    several stores (a test session, a study's trials) copies this one instead. MLflow checks the schema of every
    store it opens, so a copy is opened like any other store.
    """
    from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore  # ~1 s: only where a store is made

    with tempfile.TemporaryDirectory(prefix="harness-store-") as tmp:
        db = Path(tmp) / "mlflow.db"
        SqlAlchemyStore(f"{SQLITE_PREFIX}{db}", (Path(tmp) / "artifacts").as_uri()).engine.dispose()
        return db.read_bytes()


def _write_empty_store(db: Path) -> None:
    """Create the SQLite store `db` (absent or 0 bytes) as a copy of `_empty_sqlite_store`, whole or not at all.
    MLflow's Default experiment (id 0) gets its artifacts beside the database, as harness's experiments do, rather
    than under the folder the copy was made in."""
    with tempfile.NamedTemporaryFile(dir=db.parent, prefix=f".{db.name}.", delete=False) as tmp:
        tmp.write(_empty_sqlite_store())
    try:
        with sqlite3.connect(tmp.name) as con:
            location = (db.parent / "artifacts" / "0").resolve().as_uri()
            con.execute("UPDATE experiments SET artifact_location = ? WHERE experiment_id = 0", (location,))
        con.close()
        os.replace(tmp.name, db)
    finally:
        Path(tmp.name).unlink(missing_ok=True)


def store_client(uri: str) -> MlflowClient:
    """A client for reading a store that may be new: made under the store's lock, since the first client of
    a fresh SQLite file migrates it (use `prepare_store` to create one)."""
    with hold(lock_file(uri, "store")):
        return MlflowClient(tracking_uri=uri)


def log_sequential(uri: str, parent_run_id: str, record: dict) -> None:
    """A sequential sweep's record (design, rounds, each claim's path) on its parent run, replacing the last."""
    client = store_client(uri)
    client.log_dict(parent_run_id, record, SEQUENTIAL_ARTIFACT)
    client.set_tag(parent_run_id, SEQUENTIAL_TAG, "1")


def flatten_params(config: Mapping[str, Any], prefix: str = "") -> dict[str, str]:
    """Nested mapping -> {"dotted.key": str(value)}, values cut to MLflow's param limit."""
    return {k: _truncate(str(v), MAX_PARAM_VAL_LENGTH) for k, v in flatten(config, prefix).items()}


def _truncate(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - len(TRUNCATION_MARKER)] + TRUNCATION_MARKER


def _chunks(items: list, size: int) -> Iterator[list]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def _as_dict(config: Any) -> dict[str, Any]:
    """JSON-like plain data from a mapping or a pydantic model (duck-typed, no pydantic import),
    so that `config.yaml` always reads back with `yaml.safe_load` (no tuples, paths, enums)."""
    data = config.model_dump(mode="json") if hasattr(config, "model_dump") else dict(config)
    return json.loads(json.dumps(data, default=str))


def failure_reason(exc: BaseException) -> str:
    """`<ExceptionType>: <message>` on one line, truncated, for the `failure_reason` tag."""
    message = " ".join(str(exc).split())
    text = f"{type(exc).__name__}: {message}" if message else type(exc).__name__
    return _truncate(text, _REASON_MAX_CHARS)


class RunTracker:
    """One MLflow run of the training loop, used as a context manager.

    Leaving the `with` block normally flushes and ends the run FINISHED, unless another process has
    ended it meanwhile (then it stays as that process left it: `RunClosedElsewhere`); an exception flushes
    what is buffered, ends it FAILED with a `failure_reason` tag (traceback in `failure.txt`)
    and propagates.
    Metrics are buffered and sent with `log_batch` every `flush_every` steps or `flush_seconds`
    seconds, whichever comes first, so that a live dashboard lags little and logging stays cheap.
    """

    def __init__(
        self,
        tracking_uri: str,
        experiment_id: str,
        run_name: str | None = None,
        tags: Mapping[str, Any] | None = None,
        config: Any = None,
        flush_every: int = 10,
        flush_seconds: float = 30.0,
    ):
        self.client = MlflowClient(tracking_uri=tracking_uri)
        self.experiment_id = experiment_id
        self.run_name = run_name
        self.tags = {k: str(v) for k, v in (tags or {}).items()}
        self.config = config
        self.flush_every = max(1, flush_every)
        self.flush_seconds = flush_seconds
        self.run_id: str | None = None
        self._buffer: list[Metric] = []
        self._outbox: queue.Queue[list[Metric] | None] = queue.Queue()
        self._sender: threading.Thread | None = None
        self._send_error: BaseException | None = None
        self._steps_since_flush = 0
        self._last_step: int | None = None
        self._last_flush = time.monotonic()
        self._ended = False

    # -- lifecycle -------------------------------------------------------------------------
    def __enter__(self) -> RunTracker:
        run = self.client.create_run(
            self.experiment_id, run_name=self.run_name, tags={**self.tags, STATUS_TAG: "RUNNING"}
        )
        self.run_id = run.info.run_id
        if self.config is not None:
            try:
                self.log_config(self.config)
            except BaseException as exc:  # __exit__ will not run: end the run here
                self._end_failed(failure_reason(exc), "".join(traceback.format_exception(exc)))
                raise
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        if self._ended:
            return False
        if exc is None:
            try:
                self.flush()
                self._refuse_if_closed()
                self.set_tags({STATUS_TAG: "FINISHED"})
                self._end(RunStatus.FINISHED)
            except RunClosedElsewhere:
                raise
            except Exception as err:  # e.g. the store went away during the final flush
                self._end_failed(failure_reason(err), "".join(traceback.format_exception(err)))
                raise
        elif isinstance(exc, RunStopped):
            self.flush()
            self._refuse_if_closed()
            self.set_tags({STATUS_TAG: PRUNED, STOP_REASON_TAG: str(exc)})
            self._end(RunStatus.KILLED)
        else:
            self._end_failed(failure_reason(exc), "".join(traceback.format_exception(exc)))
        return False  # never swallow the exception

    def _refuse_if_closed(self) -> None:
        """Raise `RunClosedElsewhere` (and stop) if the store no longer has this run RUNNING."""
        run = self.client.get_run(self.run_id)
        if run.info.status != "RUNNING":
            self._ended = True
            if self._sender is not None:
                self._outbox.put(None)
            reason = run.data.tags.get(FAILURE_REASON_TAG)
            raise RunClosedElsewhere(
                f"run {self.run_id} was ended {run.info.status} by another process"
                + (f" ({reason})" if reason else "")
                + "; it is left as it is"
            )

    def _end_failed(self, reason: str, details: str | None) -> None:
        # Best effort: the store itself may be what failed, and the original error matters more.
        steps = [
            self.flush,
            self._refuse_if_closed,
            lambda: self.set_tags({STATUS_TAG: "FAILED", FAILURE_REASON_TAG: reason}),
        ]
        if details:
            steps.append(lambda: self.client.log_text(self.run_id, details, "failure.txt"))
        steps.append(lambda: self._end(RunStatus.FAILED))
        for step in steps:
            try:
                step()
            except RunClosedElsewhere as exc:  # keep the other process's ending and reason
                _log.warning("%s", exc)
                break
            except Exception as exc:  # noqa: BLE001
                _log.warning("run %s: could not record the failure (%s)", self.run_id, exc)
        self._ended = True

    def _end(self, status: int) -> None:
        self._ended = True
        if self._sender is not None:
            self._outbox.put(None)
        self.client.set_terminated(self.run_id, status=RunStatus.to_string(status))

    def _check_open(self) -> None:
        if self.run_id is None or self._ended:
            raise RuntimeError("RunTracker is not open: use it as `with RunTracker(...) as run:`")

    # -- logging ---------------------------------------------------------------------------
    def log_config(self, config: Any) -> None:
        """Log the resolved config as dotted params (≤100 per batch) and as `config.yaml`."""
        self._check_open()
        data = _as_dict(config)
        params = [Param(k, v) for k, v in flatten_params(data).items()]
        for chunk in _chunks(params, MAX_PARAMS_TAGS_PER_BATCH):
            self.client.log_batch(self.run_id, params=chunk)
        text = yaml.safe_dump(data, sort_keys=False)  # keep the config's own key order
        self.client.log_text(self.run_id, text, "config.yaml")

    def set_tags(self, tags: Mapping[str, Any]) -> None:
        """Set run tags now (not buffered), values stringified, ≤100 per `log_batch`."""
        self._check_open()
        items = [RunTag(k, str(v)) for k, v in tags.items()]
        for chunk in _chunks(items, MAX_PARAMS_TAGS_PER_BATCH):
            self.client.log_batch(self.run_id, tags=chunk)

    def log_metrics(self, step: int, metrics: Mapping[str, float | None]) -> None:
        """Buffer one step's metrics. None means "undefined this step" and is skipped;
        NaN is kept so that a diverging run shows up as such (MLflow's SQL store keeps NaN and
        clamps ±inf to ±float max)."""
        self._check_open()
        now_ms = int(time.time() * 1000)
        self._buffer.extend(
            Metric(key, float(value), now_ms, step) for key, value in metrics.items() if value is not None
        )
        if step != self._last_step:  # several calls for one step (train, eval) count once
            self._steps_since_flush += 1
            self._last_step = step
        if self._steps_since_flush >= self.flush_every or time.monotonic() - self._last_flush >= self.flush_seconds:
            self._send_in_background()

    def _send_in_background(self) -> None:
        """Hand the buffer to a sender thread: writing to the store (~30 ms a call on SQLite) then
        overlaps with training instead of stalling it. One thread keeps the batches in order."""
        if self._send_error is not None:
            raise self._send_error
        if self._sender is None:
            self._sender = threading.Thread(target=self._send_loop, name="mlflow-metrics", daemon=True)
            self._sender.start()
        if self._buffer:
            self._outbox.put(self._buffer)
            self._buffer = []
        self._steps_since_flush = 0
        self._last_flush = time.monotonic()

    def _send_loop(self) -> None:
        while (batch := self._outbox.get()) is not None:
            sent = 0
            try:
                while self._send_error is None and sent < len(batch):
                    chunk = batch[sent : sent + MAX_METRICS_PER_BATCH]
                    self.client.log_batch(self.run_id, metrics=chunk)
                    sent += len(chunk)
            except BaseException as exc:  # noqa: BLE001 - reported to the training thread
                self._send_error = exc
            finally:
                if sent < len(batch):  # unsent metrics wait for the synchronous retry in flush()
                    self._buffer[:0] = batch[sent:]
                self._outbox.task_done()
        self._outbox.task_done()

    def flush(self) -> None:
        """Wait for background sends, then send what is buffered, in `log_batch` calls of ≤1000."""
        self._check_open()
        if self._sender is not None:
            self._outbox.join()
        self._send_error = None
        while self._buffer:
            chunk = self._buffer[:MAX_METRICS_PER_BATCH]
            self.client.log_batch(self.run_id, metrics=chunk)
            del self._buffer[: len(chunk)]  # dropped only once stored, so a retry resends it
        self._steps_since_flush = 0
        self._last_flush = time.monotonic()

    def log_table(self, name: str, frame: Any, artifact_path: str | None = None) -> str:
        """Store a pandas DataFrame as the parquet artifact `<name>.parquet` (e.g. the per-rollout
        rows: step, prompt id, sample index, reward, correct, length, truncated, advantage).
        Returns the artifact's run-relative path."""
        self._check_open()
        filename = name if name.endswith(".parquet") else f"{name}.parquet"
        with tempfile.TemporaryDirectory() as tmp:
            local = Path(tmp) / filename
            frame.to_parquet(local, index=False)
            self.client.log_artifact(self.run_id, str(local), artifact_path=artifact_path)
        return f"{artifact_path}/{filename}" if artifact_path else filename
