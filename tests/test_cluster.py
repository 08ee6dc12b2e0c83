"""Outgrowing one machine: a sweep across a real multi-node Ray cluster (three nodes on this host, each its own
raylet and workers) that logs to a real MLflow tracking server over HTTP; the same sweep when a node dies, then the
driver, then the server for a while; and a `harness tune` study across the nodes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ray = pytest.importorskip("ray", reason="ray is not installed (pip install 'harness[ray]'): cluster tests skipped")

from local_cluster import TrackingServer, local_cluster  # noqa: E402
from mlflow.tracking import MlflowClient  # noqa: E402

pytestmark = pytest.mark.slow  # a Ray cluster and a tracking server

ROOT = Path(__file__).resolve().parents[1]
LONG = 20
"""Steps of the jobs a fault hits: long enough to be caught running on every node."""
JOBS = 3


@pytest.fixture(scope="module")
def tracking_server(tmp_path_factory):
    """One server for the module (starting one costs ~8 s here); each test's sweep is an experiment of its own."""
    server = TrackingServer(tmp_path_factory.mktemp("tracking-server"))
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def cluster():
    """A head and two worker nodes, one CPU slot each: each job runs on a node of its own. One cluster for the
    module (starting one costs ~12 s here); a test that removes a node puts a fresh one in its place."""
    with local_cluster(3) as c:
        yield c


def _tiny_set(tiny_run_overrides: list[str], steps: int) -> str:
    """The `set:` block of the tests' sweep and tune files: the session's tiny run (tests/conftest.py), `steps` long."""
    items = dict(o.split("=", 1) for o in tiny_run_overrides) | {"train.steps": str(steps)}
    return "set:\n" + "".join(f"  {k}: {v}\n" for k, v in items.items())


def _sweep_file(tmp_path: Path, tiny_run_overrides: list[str], name: str, steps: int) -> Path:
    """JOBS jobs: one per node, all at once."""
    path = tmp_path / f"{name}.yaml"
    path.write_text(
        f"""name: {name}
base: {ROOT / "ablations" / "toy_run.yaml"}
{_tiny_set(tiny_run_overrides, steps)}grid:
  objective.preset: [grpo]
seeds: [0, 1, 2]
"""
    )
    return path


@pytest.fixture
def driver():
    """Starts `harness ARGS` (a driver) in a process group of its own; whatever of it still runs when the test ends,
    passed or failed, is killed, and with it its Ray tasks."""
    started: list[subprocess.Popen] = []

    def start(*args: str) -> subprocess.Popen:
        cmd = [sys.executable, "-m", "harness.cli", *args]
        proc = subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True
        )
        started.append(proc)
        return proc

    yield start
    for proc in started:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()


def _finish(proc: subprocess.Popen, timeout_s: float = 900) -> tuple[int, str]:
    try:
        out, _ = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        raise AssertionError(f"the sweep ran past {timeout_s} s:\n{out[-3000:]}") from None
    return proc.returncode, out


def _job_runs(uri: str, name: str) -> dict[str, list]:
    """Each job id's runs in the experiment of sweep `name`."""
    client = MlflowClient(uri)
    exp = client.get_experiment_by_name(name)
    runs = client.search_runs([exp.experiment_id], "tags.job_id != ''", max_results=1000)
    out: dict[str, list] = {}
    for run in runs:
        out.setdefault(run.data.tags["job_id"], []).append(run)
    return out


def _one_finished_run_each_with_every_point(uri: str, name: str, steps: int) -> None:
    client = MlflowClient(uri)
    jobs = _job_runs(uri, name)
    assert len(jobs) == JOBS, sorted(jobs)
    for job_id, runs in jobs.items():
        finished = [r for r in runs if r.info.status == "FINISHED"]
        assert len(finished) == 1, (job_id, [(r.info.status, r.data.tags.get("failure_reason")) for r in runs])
        logged = [m.step for m in client.get_metric_history(finished[0].info.run_id, "train/reward_mean")]
        assert logged == list(range(1, steps + 1)), (job_id, logged)


def test_a_node_lost_then_the_driver_killed_then_the_server_stopped_loses_no_job_and_no_metric_point(
    cluster, tracking_server, tmp_path, tiny_run_overrides, driver
):
    """Three faults, one after another, on a sweep with one job on each node. A worker node's raylet is killed while
    it runs a job: that attempt ends FAILED and the job is retried on the surviving nodes (--retries). Then the driver
    is killed (SIGKILL) while the retry runs, and the sweep is rerun; while the rerun's jobs log, the tracking server
    goes away for 8 s and comes back on the same port and store: MLflow's client retries each write with bounded
    exponential back-off (MLFLOW_HTTP_REQUEST_MAX_RETRIES, 7 by default, factor 2). Every job ends with exactly one
    FINISHED run with every metric point, the dashboard's and report's account counts each job once, and a third
    invocation reads the server and trains nothing."""
    path, name = _sweep_file(tmp_path, tiny_run_overrides, "faults", LONG), "faults"
    args = (
        "sweep", str(path), "--executor", "ray", "--address", cluster.address, "--workers", "3", "--retries", "2",
        "--tracking-uri", tracking_server.url,
    )  # fmt: skip
    nodes = {n.node_id for n in cluster.list_all_nodes()}
    proc = driver(*args)
    victim = _worker_node_running_a_job(cluster, proc, tracking_server.url, name)
    cluster.remove_node(victim, allow_graceful=False)  # its raylet and workers die, with the job on it
    try:
        _a_retry_running(proc, tracking_server.url, name)
        os.killpg(proc.pid, signal.SIGKILL)  # the driver: Ray ends its tasks, their runs stay RUNNING
        proc.communicate()
    finally:  # three nodes again, for the rerun and the module's other test
        cluster.workers[cluster.workers.index(victim)] = cluster.add_node(num_cpus=1)
        cluster.wait_for_nodes()
    since_ms = int(time.time() * 1000)
    rerun = driver(*args)
    _a_job_logging_since(rerun, tracking_server.url, name, since_ms)
    tracking_server.stop()
    time.sleep(8)
    tracking_server.start()
    code, out = _finish(rerun)
    assert code == 0, out[-3000:]
    _one_finished_run_each_with_every_point(tracking_server.url, name, LONG)
    runs = [r for job_runs in _job_runs(tracking_server.url, name).values() for r in job_runs]
    reasons = [r.data.tags.get("failure_reason", "") for r in runs if r.info.status == "FAILED"]
    assert any(x.startswith("worker died") for x in reasons), reasons  # the lost node's attempt
    assert any(x.startswith("orphaned") for x in reasons), reasons  # what the killed driver left RUNNING
    assert nodes <= {r.data.tags.get("ray_node") for r in runs}, nodes  # the first attempts: one on each node

    from harness.runs.reader import reader_for, sweeps
    from harness.runs.sweep_data import read_sweep

    reader = reader_for(tracking_server.url)
    data = read_sweep(reader, next(w for w in sweeps(reader.runs()) if w.name == name))
    assert (data.jobs.total, data.jobs.finished, data.jobs.failed) == (JOBS, JOBS, 0), data.jobs.line()
    assert len(data.current) == JOBS and set(data.current["state"]) == {"done"}
    code, out = _finish(driver(*args))
    assert code == 0 and f"0 finished, {JOBS} already done, 0 failed" in out, out[-2000:]


def _a_job_logging_since(proc: subprocess.Popen, uri: str, name: str, since_ms: int, timeout_s: float = 600) -> None:
    """Wait until a job run started since `since_ms` is RUNNING and has logged a step."""
    client = MlflowClient(uri)
    experiment_id = client.get_experiment_by_name(name).experiment_id
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()[0][-3000:]
        running = client.search_runs(
            [experiment_id], f"attributes.status = 'RUNNING' AND attributes.start_time >= {since_ms}"
        )
        if any(r.data.tags.get("job_id") and "train/reward_mean" in r.data.metrics for r in running):
            return
        time.sleep(0.5)
    raise AssertionError("no job of the rerun ever logged a step")


def _a_retry_running(proc: subprocess.Popen, uri: str, name: str, timeout_s: float = 300) -> None:
    """Wait until a job has a FAILED attempt and a later one RUNNING."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()[0][-3000:]
        for runs in _job_runs(uri, name).values():
            statuses = [r.info.status for r in sorted(runs, key=lambda r: r.info.start_time)]
            if "FAILED" in statuses and statuses[-1] == "RUNNING":
                return
        time.sleep(0.5)
    raise AssertionError("no retry of the lost node's job ever started")


def _worker_node_running_a_job(cluster, proc: subprocess.Popen, uri: str, name: str, timeout_s: float = 600):
    """A worker node with a job on it: once three runs are RUNNING at once, each of the three one-slot nodes holds
    one (well into it: each has logged a step)."""
    client = MlflowClient(uri)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()[0][-3000:]
        exp = client.get_experiment_by_name(name)
        running = [] if exp is None else client.search_runs([exp.experiment_id], "attributes.status = 'RUNNING'")
        stepped = [r for r in running if "train/reward_mean" in r.data.metrics]
        if len([r for r in running if r.data.tags.get("job_id")]) >= 3 and stepped:
            return cluster.workers[0]
        time.sleep(0.5)
    raise AssertionError("three jobs never ran at once")


TUNE_STEPS = 20
"""Steps of each trial of the cluster study: long enough to be caught running."""
LR_HIGH, LR_LOW, LR_TOP = 1e-3, 1e-5, 2e-3


def _tune_file(tmp_path: Path, tiny_run_overrides: list[str]) -> Path:
    """A study whose objective is the learning rate itself (`policy/lr`, logged each step), so the median
    pruner's every decision is known in advance: a trial whose rate is below the finished trials' median at a step
    is pruned at that step."""
    path = tmp_path / "cluster_tune.yaml"
    path.write_text(
        f"""name: cluster_tune
base: {ROOT / "ablations" / "toy_run.yaml"}
{_tiny_set(tiny_run_overrides, TUNE_STEPS)}space:
  train.lr: {{type: log_float, low: 1.0e-6, high: 1.0e-2}}
objective: {{metric: policy/lr, at: final, direction: maximize}}
pruner: {{name: median, startup_trials: 1, warmup_steps: 0}}
trials: 4
"""
    )
    return path


def _trial_runs(uri: str) -> dict[int, list]:
    client = MlflowClient(uri)
    exp = client.get_experiment_by_name("cluster_tune")
    out: dict[int, list] = {}
    for run in client.search_runs([exp.experiment_id], "tags.trial != ''", max_results=1000):
        out.setdefault(int(run.data.tags["trial"]), []).append(run)
    return out


def test_a_tune_study_across_three_nodes_prunes_and_resumes_after_its_driver_is_killed(
    cluster, tracking_server, tmp_path, tiny_run_overrides, driver
):
    """`harness tune` on the cluster, with a SQLite Optuna storage every node reaches (one host here) and the
    tracking server: trial 0 (rate LR_HIGH) finishes first; trials 1-3 then run at once, one on each node, and the
    median pruner, reading trial 0's reports from the shared storage, prunes the two below it at their first step.
    The driver is killed while trial 3 runs, which ends its task on the cluster; the rerun fails it (orphaned) and
    runs a fourth finished trial."""
    import optuna
    from optuna.trial import TrialState

    path, url = _tune_file(tmp_path, tiny_run_overrides), f"sqlite:///{tmp_path / 'optuna.db'}"
    args = (
        "tune", str(path), "--executor", "ray", "--address", cluster.address, "--tracking-uri", tracking_server.url,
        "--storage", url,
    )  # fmt: skip
    study = optuna.create_study(study_name="cluster_tune", storage=url, direction="maximize")
    study.enqueue_trial({"train.lr": LR_HIGH})  # the next trials asked for take these rates, in order
    code, out = _finish(driver(*args, "--trials", "1"))
    assert code == 0, out[-3000:]
    for lr in (LR_LOW, LR_LOW, LR_TOP):
        study.enqueue_trial({"train.lr": lr})
    proc = driver(*args, "--workers", "3")
    deadline = time.monotonic() + 600
    while not (  # trial 3 is training, and trials 1 and 2 are pruned
        len(study.trials) == 4
        and study.trials[3].state == TrialState.RUNNING
        and study.trials[3].intermediate_values
        and {study.trials[n].state for n in (1, 2)} == {TrialState.PRUNED}
    ):
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()[0][-3000:]
        time.sleep(0.2)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.communicate()
    # Ray notices the driver gone and ends its tasks: trial 3 stops reporting, short of its last step. How soon depends
    # on the machine's load, so this waits for 4 s without a new report (a hang guard at 120 s), not a fixed time
    reported, quiet_since, deadline = -1, time.monotonic(), time.monotonic() + 120
    while time.monotonic() - quiet_since < 4:
        assert time.monotonic() < deadline, f"trial 3 still reports: {study.trials[3].intermediate_values}"
        if (now := len(study.trials[3].intermediate_values)) != reported:
            reported, quiet_since = now, time.monotonic()
        time.sleep(0.5)
    assert reported < TUNE_STEPS, study.trials[3].intermediate_values
    code, out = _finish(driver(*args, "--workers", "3"))
    assert code == 0, out[-3000:]

    trials = optuna.load_study(study_name="cluster_tune", storage=url).trials
    assert trials[0].state == TrialState.COMPLETE and trials[0].value == pytest.approx(LR_HIGH)
    assert [t.state for t in trials[1:4]] == [TrialState.PRUNED, TrialState.PRUNED, TrialState.FAIL]
    assert [sorted(t.intermediate_values) for t in trials[1:3]] == [[1], [1]]  # pruned at their first report
    done = [t.number for t in trials if t.state in (TrialState.COMPLETE, TrialState.PRUNED)]
    assert len(done) == 4 and done[-1] == 4, [(t.number, t.state) for t in trials]
    runs = _trial_runs(tracking_server.url)
    assert {n: [r.info.status for r in runs[n]] for n in (1, 2, 3)} == {1: ["KILLED"], 2: ["KILLED"], 3: ["FAILED"]}
    assert runs[3][0].data.tags["failure_reason"].startswith("orphaned"), runs[3][0].data.tags
    assert {n: len(runs[n]) for n in done} == {n: 1 for n in done}  # one run per finished trial
    assert {t.user_attrs["mlflow_run_id"] for t in trials if t.number in done} == {runs[n][0].info.run_id for n in done}
    nodes = {runs[n][0].data.tags["ray_node"] for n in (1, 2, 3)}  # the three that ran at once
    assert nodes == {n.node_id for n in cluster.list_all_nodes()}, nodes
