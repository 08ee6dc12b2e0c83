"""`harness sweep` killed every way a user or the system kills it, and rerun; sweeps started at the same time.

Real `harness sweep` subprocesses (in their own session, so that the whole group can be killed) on real
tiny jobs. After each kill no worker outlives the sweep, and a rerun leaves every planned job with exactly
one FINISHED run, which the reader counts as one seed. Slow (minutes): one sweep per scenario.
"""

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from harness.config.plan import plan_sweep
from harness.engine.resume import job_runs
from harness.engine.sweep import ORPHAN_REASON
from harness.runs.writer import prepare_store

ROOT = Path(__file__).resolve().parents[1]
TOY_RUN = ROOT / "ablations" / "toy_run.yaml"
EXPERIMENT = "kill"
STEPS = 40  # ~20 s of training on an idle 2-core machine: still running when the test acts on a loaded one


@pytest.fixture(scope="module")
def toy_set(tiny_run_overrides) -> dict[str, str]:
    """The tiny-run overrides as a sweep file's `set:`, with the toy model built here once."""
    from harness.config.run_config import load_run_config
    from trainer.models.toy import ensure_toy_model

    cfg = load_run_config(TOY_RUN, tiny_run_overrides)
    ensure_toy_model(cfg.model.toy, cfg.model.cache_dir)
    return dict(item.split("=", 1) for item in [*tiny_run_overrides, f"train.steps={STEPS}"])


def _sweep_file(
    tmp_path: Path, name: str, toy_set: dict[str, str], grid: str = "[grpo, dr_grpo]", seeds: str = "[0]"
) -> Path:
    lines = [
        f"name: {name}",
        f"experiment: {EXPERIMENT}",
        f"base: {TOY_RUN}",
        "set:",
        *[f"  {k}: {v}" for k, v in toy_set.items()],
        "grid:",
        f"  objective.preset: {grid}",
        f"seeds: {seeds}",
    ]
    path = tmp_path / f"{name}.yaml"
    path.write_text("\n".join(lines) + "\n")
    return path


def _start(path: Path, uri: str, log: Path) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen(
        [sys.executable, "-m", "harness.cli", "sweep", str(path), "--workers", "2", "--tracking-uri", uri],
        cwd=ROOT,
        env=env,
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=log.open("w"),
    )


def _statuses(uri: str, sweep_id: str) -> dict[str, list[str]]:
    try:
        return job_runs(uri, EXPERIMENT, sweep_id)
    except Exception:  # noqa: BLE001 - a SQLite read racing the workers' writes counts as nothing yet
        return {}


def _wait_training(proc: subprocess.Popen, uri: str, sweep_id: str, since_ms: int, count: int = 2) -> None:
    """Until `count` jobs started since `since_ms` have RUNNING runs, then a second more, so that they are in
    their training loops (progress bars made) when the test acts. Metrics are not waited for: they are
    flushed every 10 steps, too late to catch a short job on an idle machine."""
    client, deadline = MlflowClient(uri), time.monotonic() + 600
    experiment_id = client.get_experiment_by_name(EXPERIMENT).experiment_id
    while True:
        assert proc.poll() is None and time.monotonic() < deadline, f"the sweep never had {count} jobs training"
        try:
            runs = client.search_runs(
                [experiment_id],
                f"tags.sweep_id = '{sweep_id}' AND "
                f"attributes.status = 'RUNNING' AND attributes.start_time >= {since_ms}",
            )
        except Exception:  # noqa: BLE001
            runs = []
        if sum(1 for r in runs if r.data.tags.get("job_id")) >= count:
            time.sleep(1.0)
            return
        time.sleep(0.25)


def _children(pid: int) -> list[tuple[int, bytes]]:
    out = []
    for entry in Path("/proc").iterdir():
        try:
            if int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1]) == pid:
                out.append((int(entry.name), (entry / "cmdline").read_bytes()))
        except (ValueError, OSError, IndexError):
            continue
    return out


def _workers(pid: int) -> list[int]:
    """The sweep's job processes: the children of its fork server (or its own children started by spawn)."""
    out = []
    for child, cmdline in _children(pid):
        if b"multiprocessing.forkserver" in cmdline:
            out += [grandchild for grandchild, _ in _children(child)]
        elif b"multiprocessing.spawn" in cmdline:
            out.append(child)
    return out


def _alive(pid: int) -> bool:
    try:
        return (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _check_clean(path: Path, uri: str) -> tuple[int, int, dict[str, list[int]]]:
    """(job ids with two FINISHED runs, planned jobs without exactly one, the reader's seeds per arm)."""
    from harness.runs.reader import reader_for, sweeps
    from harness.runs.sweep_data import read_sweep

    plan = plan_sweep(path)
    runs = job_runs(uri, EXPERIMENT, plan.sweep_id)
    duplicated = sum(1 for statuses in runs.values() if statuses.count("FINISHED") > 1)
    lost = sum(1 for job in plan.jobs if runs.get(job.job_id, []).count("FINISHED") != 1)
    reader = reader_for(uri)
    (sweep,) = [s for s in sweeps(reader.runs()) if s.sweep_id == plan.sweep_id]
    data = read_sweep(reader, sweep)
    done = data.runs[data.runs["status"] == "FINISHED"]
    seeds = {arm: sorted(group["seed"].tolist()) for arm, group in done.groupby("arm")}
    return duplicated, lost, seeds


REASONS = {signal.SIGKILL: ORPHAN_REASON, signal.SIGTERM: "terminated", signal.SIGINT: "interrupted"}
# name: (signal, to the whole process group (as Ctrl-C in a terminal)?, the sweep's exit code). A SIGKILL of the
# whole group is not a scenario of its own: it kills the workers outright, and leaves the store as SIGKILL-main does.
SCENARIOS = {
    "SIGKILL-main": (signal.SIGKILL, False, -signal.SIGKILL),
    "SIGTERM-main": (signal.SIGTERM, False, 128 + signal.SIGTERM),
    "SIGINT-group": (signal.SIGINT, True, 130),
}


@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_killed_sweep_leaves_no_worker_and_reruns_without_duplicates(scenario, tmp_path, toy_set):
    sig, group, code = SCENARIOS[scenario]
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    path = _sweep_file(tmp_path, "kill_" + scenario.lower().replace("-", "_"), toy_set)
    sweep_id = plan_sweep(path).sweep_id
    prepare_store(uri, EXPERIMENT)  # so that polling it never races the sweep's first use
    log, rerun_log = tmp_path / "first.err", tmp_path / "rerun.err"
    proc, workers, rerun, second = _start(path, uri, log), [], None, None
    try:
        _wait_training(proc, uri, sweep_id, 0)
        workers = _workers(proc.pid)
        assert len(workers) == 2
        workers += [pid for pid, cmdline in _children(proc.pid) if b"multiprocessing.forkserver" in cmdline]
        (os.killpg if group else os.kill)(proc.pid, sig)
        exit_code = proc.wait(timeout=120)
        deadline = time.monotonic() + 15  # the fork server exits once its last worker has
        while (alive := [pid for pid in workers if _alive(pid)]) and time.monotonic() < deadline:
            time.sleep(0.1)

        rerun, since_ms = _start(path, uri, rerun_log), int(time.time() * 1000)
        if scenario == "SIGKILL-main":  # the same sweep started again while the rerun runs: refused, one line
            # one job is enough: a job that finished in the second before the kill is not rerun
            _wait_training(rerun, uri, sweep_id, since_ms, count=1)
            # STEPS keeps the rerun's jobs training for well longer than this invocation takes to start
            second = subprocess.run(
                [sys.executable, "-m", "harness.cli", "sweep", str(path), "--tracking-uri", uri],
                cwd=ROOT,
                env={**os.environ, "PYTHONPATH": str(ROOT)},
                capture_output=True,
                text=True,
                timeout=300,
            )
        assert rerun.wait(timeout=1200) == 0, rerun_log.read_text()
    finally:  # never leave this test's processes training
        for p in (proc, rerun):
            if p is not None and p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
        for pid in workers:
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
    duplicated, lost, seeds = _check_clean(path, uri)
    print(f"\n| {scenario} | {duplicated} | {lost} | {len(alive)} | {seeds} |")
    assert (duplicated, lost, alive) == (0, 0, [])
    assert seeds == {"preset=grpo": [0], "preset=dr_grpo": [0]}
    reasons = {
        run.data.tags.get("failure_reason")
        for run in MlflowClient(uri).search_runs(
            [MlflowClient(uri).get_experiment_by_name(EXPERIMENT).experiment_id],
            f"tags.sweep_id = '{sweep_id}' AND attributes.status = 'FAILED'",
        )
    }
    assert reasons == {REASONS[sig]}  # the killed invocation's jobs (and parent), each with why
    assert exit_code == code
    err = log.read_text()
    assert "leaked semaphore" not in err, err
    if sig == signal.SIGINT:
        assert "harness: interrupted" in err.splitlines(), err  # a line of its own, not after the status line
    if sig == signal.SIGTERM:
        assert "harness: terminated" in err.splitlines(), err
    if second is not None:
        assert second.returncode == 1
        assert second.stderr.strip().splitlines() == [
            f"harness: sweep {path.stem} is already running (pid {rerun.pid})"
        ], second.stderr
    last = rerun_log.read_text().splitlines()[-1]  # the status line, whole, as the last line of a log
    assert re.fullmatch(
        rf"sweep {path.stem}: (\d)/\1 done, 0 running, 0 failed, \d skipped \| .* elapsed, done", last
    ), last


def test_three_sweeps_starting_together_on_a_fresh_store_all_succeed(tmp_path, toy_set):
    """Each creates the store, or waits while another one migrates it; none crashes."""
    uri = f"sqlite:///{tmp_path / 'fresh' / 'mlflow.db'}"
    short = {**toy_set, "train.steps": "1"}
    paths = [_sweep_file(tmp_path, f"fresh{i}", short, grid="[grpo]", seeds=f"[{i}]") for i in range(3)]
    logs = [tmp_path / f"fresh{i}.err" for i in range(3)]
    procs = [_start(path, uri, log) for path, log in zip(paths, logs)]
    try:
        codes = [p.wait(timeout=900) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
    assert codes == [0, 0, 0], "\n".join(log.read_text()[-2000:] for log in logs)
