"""Outgrowing one machine: a sweep across a real multi-node Ray cluster (three nodes on this host, each its own
raylet and workers) that logs to a real MLflow tracking server over HTTP, and the same sweep when a node dies or the
server stops for a while."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

ray = pytest.importorskip("ray", reason="ray is not installed (pip install 'harness[ray]'): cluster tests skipped")

from mlflow.tracking import MlflowClient  # noqa: E402

pytestmark = pytest.mark.slow  # a Ray cluster and a tracking server

ROOT = Path(__file__).resolve().parents[1]
STEPS = 3
LONG = 30
"""Steps of the jobs a fault hits: long enough to be caught running on every node."""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_healthy(url: str, proc: subprocess.Popen, timeout_s: float = 90.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the tracking server exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.5)
    raise TimeoutError(f"no tracking server at {url} after {timeout_s:.0f} s")


class TrackingServer:
    """`mlflow server` on 127.0.0.1, in its own process group (stopped with everything it started)."""

    def __init__(self, root: Path):
        self.root, self.port = root, _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        cmd = [
            sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1", "--port", str(self.port),
            "--backend-store-uri", f"sqlite:///{self.root / 'server.db'}",
            "--artifacts-destination", str(self.root / "artifacts"), "--workers", "1",
        ]  # fmt: skip
        log = open(self.root / "server.log", "ab")  # the server's output, closed with its process
        self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        _wait_healthy(self.url, self.proc)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self.proc = None


@pytest.fixture
def tracking_server(tmp_path):
    server = TrackingServer(tmp_path)
    server.start()
    yield server
    server.stop()


@pytest.fixture
def cluster():
    """A head and two worker nodes, one CPU slot each: each job runs on a node of its own."""
    from ray.cluster_utils import Cluster

    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    workers = [c.add_node(num_cpus=1) for _ in range(2)]
    c.wait_for_nodes()
    c.workers = workers
    yield c
    c.shutdown()


def _sweep_file(tmp_path: Path, toy_cache: Path, steps: int = STEPS) -> Path:
    path = tmp_path / "cluster.yaml"
    path.write_text(
        f"""name: cluster
base: {ROOT / "ablations" / "toy_run.yaml"}
set:
  model.cache_dir: {toy_cache}
  model.toy.sft_steps: 250
  model.toy.eval_samples: 0
  model.toy.batch_size: 32
  model.toy.task.max_digits: 1
  task.toy_addition.max_digits: 1
  rollout.prompts_per_step: 4
  rollout.group_size: 4
  rollout.max_new_tokens: 48
  train.steps: {steps}
  train.threads: 1
grid:
  objective.preset: [grpo, dr_grpo]
seeds: [0, 1, 2]
"""
    )
    return path


def _harness(*args: str, **kw) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "harness.cli", *args],
        cwd=kw.get("cwd"),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )


def _finish(proc: subprocess.Popen, timeout_s: float = 900) -> tuple[int, str]:
    try:
        out, _ = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        raise AssertionError(f"the sweep ran past {timeout_s} s:\n{out[-3000:]}") from None
    return proc.returncode, out


def _job_runs(uri: str) -> dict[str, list]:
    """Each job id's runs in the cluster sweep's experiment."""
    client = MlflowClient(uri)
    exp = client.get_experiment_by_name("cluster")
    runs = client.search_runs([exp.experiment_id], "tags.job_id != ''", max_results=1000)
    out: dict[str, list] = {}
    for run in runs:
        out.setdefault(run.data.tags["job_id"], []).append(run)
    return out


def _one_finished_run_each_with_every_point(uri: str, steps: int = STEPS) -> None:
    client = MlflowClient(uri)
    jobs = _job_runs(uri)
    assert len(jobs) == 6, sorted(jobs)
    for job_id, runs in jobs.items():
        finished = [r for r in runs if r.info.status == "FINISHED"]
        assert len(finished) == 1, (job_id, [(r.info.status, r.data.tags.get("failure_reason")) for r in runs])
        logged = [m.step for m in client.get_metric_history(finished[0].info.run_id, "train/reward_mean")]
        assert logged == list(range(1, steps + 1)), (job_id, logged)


def test_a_sweep_across_three_nodes_logs_to_a_tracking_server_and_a_rerun_trains_nothing(
    cluster, tracking_server, tmp_path, toy_cache
):
    path = _sweep_file(tmp_path, toy_cache)
    args = ("sweep", str(path), "--executor", "ray", "--address", cluster.address, "--workers", "3")
    code, out = _finish(_harness(*args, "--tracking-uri", tracking_server.url))
    assert code == 0, out[-3000:]
    assert "6 finished, 0 already done, 0 failed" in out, out[-2000:]
    _one_finished_run_each_with_every_point(tracking_server.url)
    code, out = _finish(_harness(*args, "--tracking-uri", tracking_server.url))  # the driver reads the server
    assert code == 0 and "0 finished, 6 already done, 0 failed" in out, out[-2000:]


def test_a_node_lost_mid_sweep_loses_no_job_and_finishes_none_twice(cluster, tracking_server, tmp_path, toy_cache):
    """A worker node's raylet is killed while it runs a job (each node holds one): that attempt ends FAILED, the job
    is retried on the surviving nodes (--retries), and every job ends with exactly one FINISHED run."""
    path = _sweep_file(tmp_path, toy_cache, steps=LONG)
    proc = _harness(
        "sweep", str(path), "--executor", "ray", "--address", cluster.address, "--workers", "3", "--retries", "2",
        "--tracking-uri", tracking_server.url,
    )  # fmt: skip
    victim = _worker_node_running_a_job(cluster, proc, tracking_server.url)
    cluster.remove_node(victim, allow_graceful=False)  # its raylet and workers die, with the job on it
    code, out = _finish(proc)
    assert code == 0, out[-3000:]
    _one_finished_run_each_with_every_point(tracking_server.url, LONG)
    failed = [r for runs in _job_runs(tracking_server.url).values() for r in runs if r.info.status == "FAILED"]
    assert failed, "the lost node's attempt left no FAILED run"
    assert all(r.data.tags.get("failure_reason") for r in failed), [r.data.tags for r in failed]


def _worker_node_running_a_job(cluster, proc: subprocess.Popen, uri: str, timeout_s: float = 600):
    """A worker node with a job on it: once three runs are RUNNING at once, each of the three one-slot nodes holds
    one (well into it: each has logged a step)."""
    client = MlflowClient(uri)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()[0][-3000:]
        exp = client.get_experiment_by_name("cluster")
        running = [] if exp is None else client.search_runs([exp.experiment_id], "attributes.status = 'RUNNING'")
        stepped = [r for r in running if "train/reward_mean" in r.data.metrics]
        if len([r for r in running if r.data.tags.get("job_id")]) >= 3 and stepped:
            return cluster.workers[0]
        time.sleep(0.5)
    raise AssertionError("three jobs never ran at once")


def test_a_tracking_server_stopped_mid_sweep_loses_no_metric_point(cluster, tracking_server, tmp_path, toy_cache):
    """The server goes away for 8 s while jobs log, then comes back on the same port and store: MLflow's client
    retries each write with bounded exponential back-off (MLFLOW_HTTP_REQUEST_MAX_RETRIES, 7 by default, factor 2),
    so every job ends with one FINISHED run and every metric point."""
    path = _sweep_file(tmp_path, toy_cache, steps=LONG)
    proc = _harness(
        "sweep", str(path), "--executor", "ray", "--address", cluster.address, "--workers", "3",
        "--tracking-uri", tracking_server.url,
    )  # fmt: skip
    _worker_node_running_a_job(cluster, proc, tracking_server.url)
    tracking_server.stop()
    time.sleep(8)
    tracking_server.start()
    code, out = _finish(proc)
    assert code == 0, out[-3000:]
    assert "6 finished, 0 already done, 0 failed" in out, out[-2000:]
    _one_finished_run_each_with_every_point(tracking_server.url, LONG)
