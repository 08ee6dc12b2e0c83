"""`harness tune`: Optuna trials that are ordinary runs; pruning, resuming after a kill, parallel workers. (On Ray:
across the nodes of a cluster, tests/test_cluster.py.)"""

import os
import signal
import sqlite3
import subprocess
import sys
import time
from contextlib import closing
from pathlib import Path

import optuna
import pytest
from mlflow.tracking import MlflowClient
from optuna.trial import TrialState

from harness.cli import main
from harness.config.errors import ConfigError
from harness.config.tune import load_tune
from harness.engine.tune import run_tune, score

ROOT = Path(__file__).resolve().parents[1]
DONE = (TrialState.COMPLETE, TrialState.PRUNED)


def _tune_file(
    tmp_path: Path, trials: int = 4, pruner: str = "{name: median, startup_trials: 1, warmup_steps: 1}"
) -> Path:
    path = tmp_path / "tune.yaml"
    path.write_text(
        f"name: tiny_tune\nbase: {ROOT / 'ablations' / 'toy_run.yaml'}\nset: {{objective.preset: dr_grpo}}\n"
        "space:\n  train.lr: {type: log_float, low: 1.0e-4, high: 2.0e-3}\n"
        "  objective.clip_high: {type: float, low: 0.2, high: 0.3}\n"
        "objective: {metric: train/accuracy, at: last-2, direction: maximize}\n"
        f"pruner: {pruner}\ntrials: {trials}\n"
    )
    return path


def _stores(tmp_path: Path) -> tuple[str, str]:
    return f"sqlite:///{tmp_path / 'mlflow.db'}", f"sqlite:///{tmp_path / 'optuna.db'}"


def _trial_states(db: Path) -> list[str]:
    """The study's trial states, read from its SQLite file without writing to it: Optuna's own load_study would
    create the file's tables if the tune under test had not yet, racing its migration (the tune then exits 3)."""
    if not db.exists():
        return []
    try:
        with closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as con:
            rows = con.execute(
                "SELECT t.state FROM trials t JOIN studies s ON t.study_id = s.study_id "
                "WHERE s.study_name = 'tiny_tune' ORDER BY t.number"
            ).fetchall()
    except sqlite3.OperationalError:  # not created yet, or locked by a write: look again
        return []
    return [str(state) for (state,) in rows]


def _trial_runs(uri: str) -> list:
    client = MlflowClient(uri)
    exp = client.get_experiment_by_name("tiny_tune")
    return [r for r in client.search_runs([exp.experiment_id]) if "trial" in r.data.tags]


def test_score_and_spec_errors(tmp_path):
    assert score([0, 1, 2], [1.0, 3.0, 2.0], "final", "maximize") == 2.0
    assert score([0, 1, 2], [1.0, 3.0, 2.0], "last-2", "maximize") == 2.5
    assert score([0, 1, 2], [1.0, 3.0, 2.0], "best", "minimize") == 1.0
    assert score([0, 1, 2], [1.0, 3.0, 2.0], "best", "maximize") == 3.0
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        f"name: x\nbase: {ROOT / 'ablations' / 'toy_run.yaml'}\n"
        "space:\n  train.lr: {type: log_float, low: 0.0, high: 1.0}\n"
    )
    with pytest.raises(ConfigError, match=r"bad.yaml: space.train.lr: .*log_float needs low > 0"):
        load_tune(bad)
    bad.write_text(
        f"name: x\nbase: {ROOT / 'ablations' / 'toy_run.yaml'}\n"
        "space:\n  rollout.group_size: {type: int, low: 1, high: 8}\n"
    )
    with pytest.raises(ConfigError, match=r"space.rollout.group_size: 1 is not a valid value"):
        load_tune(bad)  # group_size must be >= 2: caught before any trial runs
    bad.write_text(
        f"name: x\nbase: {ROOT / 'ablations' / 'toy_run.yaml'}\nsampler: {{name: grid}}\ntrials: 5\n"
        "space:\n  objective.aggregation: {type: categorical, choices: [constant, token_mean]}\n"
    )
    with pytest.raises(ConfigError, match="trials: 5 exceeds the grid's 2 points"):
        load_tune(bad)


@pytest.mark.parametrize(
    ("kind", "low", "high", "step"),
    [
        ("float", 0.2, 0.32, 0.04),  # (0.32 - 0.2) / 0.04 is 2.9999999999999996 steps: high is still in
        ("float", 0.0, 1.0, 0.6),  # high is not on the grid: no point beyond it
        ("float", 1e-4, 1e-3, 1e-4),
        ("float", -1.0, 1.0, 0.25),
        ("float", 0.1, 0.1, 0.5),
        ("int", 1, 10, 3),
        ("int", 2, 1001, 1),
    ],
)
def test_a_grid_is_counted_as_long_as_it_lists_and_stays_within_its_range(kind, low, high, step):
    from harness.config.tune import Dimension

    dim = Dimension(type=kind, low=low, high=high, step=step)
    values = dim.grid()
    assert dim.grid_size() == len(values)
    assert values[0] == low and max(values) <= high + 1e-9 and high - max(values) < step


def test_a_grid_too_large_is_refused_without_being_listed():
    from harness.config.tune import MAX_GRID_POINTS, Dimension

    for low, high, step in [(1e-4, 1e-3, 1e-300), (-1e308, 1e308, 1.0), (0.0, 1.0, 1 / MAX_GRID_POINTS)]:
        with pytest.raises(ValueError, match=f"more than {MAX_GRID_POINTS} grid points"):
            Dimension(type="float", low=low, high=high, step=step).grid_size()  # the second overflows to inf steps
    assert Dimension(type="float", low=0.0, high=1.0, step=1 / (MAX_GRID_POINTS - 1)).grid_size() == MAX_GRID_POINTS


class PruneTrialOne(optuna.pruners.BasePruner):
    """The study's pruner, and trial 1 pruned at its second report (so that a pruned trial is sure to happen).
    Module level: the study's pruner goes to the worker processes by pickle."""

    def __init__(self, inner: optuna.pruners.BasePruner):
        self.inner = inner

    def prune(self, study, trial) -> bool:
        return (trial.number == 1 and len(trial.intermediate_values) == 2) or self.inner.prune(study, trial)


def test_four_trial_study_with_pruning_is_four_tracked_runs(tmp_path, tiny_run_overrides, monkeypatch):
    """The median pruner is on; besides, trial 1 is told to prune at step 2. Every trial, complete or pruned,
    is one MLflow run whose state matches."""
    from harness.engine import tune

    study_pruner = tune.pruner
    monkeypatch.setattr(tune, "pruner", lambda spec: PruneTrialOne(study_pruner(spec)))
    uri, url = _stores(tmp_path)
    result = run_tune(_tune_file(tmp_path), overrides=tiny_run_overrides, tracking_uri=uri, storage_url=url)
    assert result.finished == 4
    study = optuna.load_study(study_name="tiny_tune", storage=url)
    states = {t.number: t.state for t in study.trials}
    assert sorted(states) == [0, 1, 2, 3] and states[1] == TrialState.PRUNED
    assert states[0] == TrialState.COMPLETE  # the median pruner's one startup trial is never pruned
    assert set(states.values()) <= set(DONE)
    runs = {r.data.tags["trial"]: r for r in _trial_runs(uri)}
    assert sorted(runs) == ["0", "1", "2", "3"]
    for t in study.trials:
        run = runs[str(t.number)]
        assert t.user_attrs["mlflow_run_id"] == run.info.run_id and run.data.tags["study"] == "tiny_tune"
        assert float(run.data.params["train.lr"]) == pytest.approx(t.params["train.lr"])
        assert run.info.run_name == f"tiny_tune-trial{t.number}"
    for n, state in states.items():
        pruned = state == TrialState.PRUNED
        assert runs[str(n)].info.status == ("KILLED" if pruned else "FINISHED")
        assert runs[str(n)].data.tags["status"] == ("PRUNED" if pruned else "FINISHED")
    assert study.trials[0].value == pytest.approx(
        (
            runs["0"].data.metrics["train/accuracy"]
            + MlflowClient(uri).get_metric_history(runs["0"].info.run_id, "train/accuracy")[-2].value
        )
        / 2
    )
    client = MlflowClient(uri)
    parent = client.get_run(runs["0"].data.tags["mlflow.parentRunId"])
    assert parent.info.status == "FINISHED" and parent.data.tags["sweep_parent"] == "1"
    assert {r.data.tags["sweep_id"] for r in _trial_runs(uri)} == {parent.data.tags["sweep_id"]}
    # the dashboard and `harness report` read the study like a sweep: one arm per trial
    from harness.runs.reader import reader_for, sweeps
    from harness.runs.sweep_data import read_sweep

    data = read_sweep(reader_for(uri), sweeps(reader_for(uri).runs())[0])
    n_pruned = sum(state == TrialState.PRUNED for state in states.values())
    assert data.sweep.name == "tiny_tune"
    assert data.runs["state"].value_counts().to_dict() == {
        k: v for k, v in (("done", 4 - n_pruned), ("pruned", n_pruned)) if v
    }
    assert len(data.arms) == 4 and all(a.startswith("trial ") for a in data.arms)


def test_killed_study_resumes_without_repeating_finished_trials(tmp_path, tiny_run_overrides):
    uri, url = _stores(tmp_path)
    path = _tune_file(tmp_path, trials=3, pruner="{name: none}")  # trials long enough to be caught running
    cmd = [
        sys.executable,
        "-m",
        "harness.cli",
        "tune",
        str(path),
        "--tracking-uri",
        uri,
        "--storage",
        url,
        *[x for o in tiny_run_overrides for x in ("--set", o)],
        "--set",
        "train.steps=12",
    ]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 300
        while True:  # kill it while its second trial runs
            time.sleep(0.2)
            states = _trial_states(tmp_path / "optuna.db")
            if states[:2] == ["COMPLETE", "RUNNING"] and any(
                r.data.tags["trial"] == "1" and r.info.status == "RUNNING" for r in _trial_runs(uri)
            ):
                break  # the second trial's run exists: killing now leaves it for the resume to close
            assert proc.poll() is None and time.monotonic() < deadline, states
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    first = optuna.load_study(study_name="tiny_tune", storage=url).trials[0]
    assert (
        main(
            [
                "tune",
                str(path),
                "--tracking-uri",
                uri,
                "--storage",
                url,
                *[x for o in tiny_run_overrides for x in ("--set", o)],
                "--set",
                "train.steps=12",
            ]
        )
        == 0
    )
    study = optuna.load_study(study_name="tiny_tune", storage=url)
    assert study.trials[0].value == first.value and study.trials[0].params == first.params  # not redone
    assert study.trials[1].state == TrialState.FAIL  # the killed one
    assert len(study.get_trials(states=DONE)) == 3
    runs = _trial_runs(uri)
    by_trial = {}
    for r in runs:
        by_trial.setdefault(r.data.tags["trial"], []).append(r)
    assert [r.info.status for r in by_trial["1"]] == ["FAILED"] and "orphaned" in by_trial["1"][0].data.tags[
        "failure_reason"
    ]
    done = [t.number for t in study.get_trials(states=DONE)]
    # one run per finished trial: FINISHED, or KILLED when the pruner stopped it
    assert {n: len(by_trial[str(n)]) for n in done} == {n: 1 for n in done}
    for t in study.get_trials(states=DONE):
        assert by_trial[str(t.number)][0].info.status == ("FINISHED" if t.state == TrialState.COMPLETE else "KILLED")


def test_two_workers_share_the_storage_without_lost_or_duplicated_trials(tmp_path, tiny_run_overrides):
    uri, url = _stores(tmp_path)
    result = run_tune(
        _tune_file(tmp_path, trials=4), overrides=tiny_run_overrides, tracking_uri=uri, storage_url=url, workers=2
    )
    study = optuna.load_study(study_name="tiny_tune", storage=url)
    done = sorted(t.number for t in study.get_trials(states=DONE))
    assert result.finished == 4 and len(done) == 4
    surplus = [t for t in study.trials if t.state == TrialState.FAIL]
    assert all(t.user_attrs.get("surplus") for t in surplus)  # a slot taken twice is given back, never run
    runs = _trial_runs(uri)
    assert sorted(int(r.data.tags["trial"]) for r in runs) == done  # one run per finished trial, no other
    assert {t.user_attrs["mlflow_run_id"] for t in study.get_trials(states=DONE)} == {r.info.run_id for r in runs}


def test_trial_killed_by_timeout_is_retried_then_failed_with_its_reason(tmp_path, tiny_run_overrides, monkeypatch):
    """`--timeout` and `--retries` reach the trials: each attempt of a trial that trains too long is killed, its
    MLflow run ended FAILED with the reason; once its retries are spent the trial is FAILED in the study too."""
    from harness.engine import tune

    monkeypatch.setattr(tune, "MAX_FAILURES", 1)  # stop the study after its first failed trial
    uri, url = _stores(tmp_path)
    path = _tune_file(tmp_path, trials=1, pruner="{name: none}")
    sets = [x for o in [*tiny_run_overrides, "train.steps=100000"] for x in ("--set", o)]
    # 10 s: a trial forked from the warm fork server has its MLflow run within seconds, even on a busy machine (at
    # load 5 on 2 cores, each attempt's run had its parameters well before 10 s)
    args = ["tune", str(path), "--tracking-uri", uri, "--storage", url, "--timeout", "10", "--retries", "1", *sets]
    assert main(args) == 1  # the study could not finish its one trial
    (trial,) = optuna.load_study(study_name="tiny_tune", storage=url).trials
    assert trial.state == TrialState.FAIL and trial.user_attrs["failure_reason"] == "timeout after 10 s"
    runs = _trial_runs(uri)
    assert len(runs) == 2  # one per attempt, both of trial 0
    for run in runs:
        assert run.data.tags["trial"] == "0" and run.info.status == "FAILED"
        assert run.data.tags["status"] == "FAILED" and run.data.tags["failure_reason"] == "timeout after 10 s"
        assert run.data.params["train.steps"] == "100000"  # the worker's own run, killed while training
    assert trial.user_attrs["mlflow_run_id"] in {r.info.run_id for r in runs}
    client = MlflowClient(uri)
    parent = client.get_run(runs[0].data.tags["mlflow.parentRunId"])
    assert parent.info.status == "FAILED" and parent.data.tags["failure_reason"] == "0 of 1 trials finished"
