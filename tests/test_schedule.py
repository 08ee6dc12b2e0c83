"""Longest jobs first and an ETA from expected costs (`harness.engine.cost`), against numbers worked by hand: the
prior and the measured rates, LPT's order and makespan, the status line's ETA on a fake clock, and the order the
local executor launches jobs in. No training, no timed assertion."""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path

import pytest

from harness.config.job import Job
from harness.config.run_config import load_run_config
from harness.engine import sweep
from harness.engine.cost import CostModel, Measured, cost_model, longest_first, makespan, order_jobs, work
from harness.engine.executor import JobOutcome
from harness.engine.local import LocalExecutor

TOY_RUN = Path(__file__).resolve().parents[1] / "ablations" / "toy_run.yaml"
W = 120 * 16 * 8 * 128
"""toy_run.yaml's work: 120 steps × 16 prompts × 8 responses × 128 tokens."""


def _job(arm: str, seed: int = 0, steps: int = 120) -> Job:
    return Job(config=load_run_config(TOY_RUN, [f"seed={seed}", f"train.steps={steps}"]), arm=arm)


def test_the_prior_is_steps_times_responses_times_budget():
    assert work(_job("a").config) == W == 1_966_080
    cfg = load_run_config(TOY_RUN, ["rollout.group_size=4", "rollout.max_new_tokens=64", "train.steps=10"])
    assert work(cfg) == 10 * 16 * 4 * 64
    assert work(load_run_config(TOY_RUN, ["train.steps=0", "eval.every=1"])) == 16 * 8 * 128  # counts as one step


def test_without_history_there_are_no_seconds_and_jobs_are_keyed_by_work():
    model = cost_model([_job("a"), _job("b", steps=240)], [])
    assert model == CostModel({})
    assert model.seconds(_job("a").config) is None
    assert model.key(_job("b", steps=240).config) == 2 * W


def test_a_measured_arm_uses_its_rate_and_an_unmeasured_one_the_mean_of_the_measured_rates():
    a, b, c = _job("a"), _job("b", steps=240), _job("c", steps=60)  # work W, 2W, W/2
    measured = [Measured(a.arm_id, 100.0), Measured(a.arm_id, 140.0)]
    model = cost_model([a, b, c], [*measured, Measured("not-in-the-sweep", 1e6)])
    assert model.rates == {a.arm_id: pytest.approx(120 / W)}
    assert model.seconds(_job("a", seed=7).config) == pytest.approx(120)  # any seed of the arm
    assert model.seconds(b.config) == pytest.approx(240)  # a's rate: its length effect unknown
    model = cost_model([a, b, c], [*measured, Measured(b.arm_id, 180.0)])  # b: 90 s per W
    assert model.seconds(b.config) == pytest.approx(180)
    assert model.seconds(c.config) == pytest.approx((120 + 90) / 2 / 2)  # mean rate 105 s per W, work W/2


def test_longest_first_by_hand_on_two_workers():
    durations = [1, 2, 1, 2]
    assert longest_first(durations) == [1, 3, 0, 2]  # ties keep their order
    assert makespan(durations, 2) == 4  # 1 | 2; then 1 on the first free (t=1) ends at 2; 2 at t=2 ends at 4
    assert makespan([durations[i] for i in longest_first(durations)], 2) == 3  # 2 | 2, then 1 | 1
    assert makespan([3], 2, running=[2]) == 3
    assert makespan([1, 1], 2, running=[5, 0.5, 0.5]) == 5  # three running hold three workers
    assert makespan([], 2) == 0
    with pytest.raises(ValueError):
        makespan([1], 0)


def test_jobs_start_longest_first_and_stay_the_same_jobs():
    s0, l0, s1, l1 = _job("s", 0), _job("l", 0, 240), _job("s", 1), _job("l", 1, 240)
    jobs = [s0, l0, s1, l1]
    assert order_jobs(jobs, cost_model(jobs, [])) == [l0, l1, s0, s1]
    # measured: s takes 300 s a run (300 s per W), l 200 s (100 s per W, of its 2W): s now goes first
    ordered = order_jobs(jobs, cost_model(jobs, [Measured(s0.arm_id, 300.0), Measured(l0.arm_id, 200.0)]))
    assert ordered == [s0, s1, l0, l1]
    assert [(j.job_id, j.seed) for j in ordered] == [(j.job_id, j.seed) for j in (s0, s1, l0, l1)]


class _Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _event(view, clock, t, kind, job):
    clock.now = t
    status = "FINISHED" if kind in ("started", "finished") else "FAILED"
    view.on_event(kind, job, None if kind == "started" else JobOutcome(job.job_id, status, None, None, 1, 0.0))


def _eta(view) -> str:
    return str(view.__rich__()).split(" elapsed, ")[1]


def test_the_eta_is_the_makespan_of_the_expected_times_left():
    """Two long jobs (work 2W) and two short (W) on 2 workers, nothing measured before: `ETA -` until L1 ends after
    100 s; then the short arm is expected at the long one's rate (50 s each), later at its own."""
    clock = _Clock()
    l1, l2, s1, s2 = _job("l", 1, 240), _job("l", 2, 240), _job("s", 1), _job("s", 2)
    view = sweep._Progress("t", [l1, l2, s1, s2], [], workers=2, clock=clock)
    _event(view, clock, 0, "started", l1), _event(view, clock, 0, "started", l2)
    assert view.eta_s() is None and _eta(view) == "ETA -"
    _event(view, clock, 100, "finished", l1)  # l: 100 s per 2W; s expected 50 s
    _event(view, clock, 100, "started", s1)
    assert view.eta_s() == pytest.approx(50)  # l2 at 0 left, s1 50 left; s2 (50) on l2's worker
    assert _eta(view) == "ETA 0:00:50 (1 of 2 arms measured)"
    _event(view, clock, 130, "finished", l2)  # l: 115 s per 2W; s expected 57.5 s
    _event(view, clock, 130, "started", s2)
    assert view.eta_s() == pytest.approx(57.5)  # s1 27.5 left, s2 57.5
    _event(view, clock, 160, "finished", s1)  # s: its own 60 s
    assert view.eta_s() == pytest.approx(30) and _eta(view) == "ETA 0:00:30"
    _event(view, clock, 170, "retrying", s2)  # a failed attempt: back in the queue, not measured
    _event(view, clock, 170, "started", s2)
    assert view.eta_s() == pytest.approx(60)
    _event(view, clock, 200, "finished", s2)  # its successful attempt: 30 s
    assert [m.seconds for m in view.measured] == [100, 130, 60, 30]
    assert view.eta_s() is None and _eta(view) == "done"


def test_runs_measured_before_the_sweep_started_give_an_eta_at_once():
    l1, l2, s1, s2, done = _job("l", 1, 240), _job("l", 2, 240), _job("s", 1), _job("s", 2), _job("l", 0, 240)
    view = sweep._Progress(
        "t", [l1, l2, s1, s2], [done], workers=2, measured=[Measured(done.arm_id, 120.0)], clock=_Clock()
    )
    assert view.eta_s() == pytest.approx(180)  # 120 | 120, then 60 | 60 (s at l's rate)
    assert _eta(view) == "ETA 0:03:00 (1 of 2 arms measured)"
    view.on_event("started", l1, None)
    view.on_event("failed", l1, None)  # a failure is not a measurement, and its job is not left
    assert view.eta_s() == pytest.approx(120)  # 120 | 60, then 60


class _Launcher:
    """Records the names it launches in; every attempt ends at the next wait, FINISHED."""

    poll_s = 0.0

    def __init__(self, slots: int):
        self.slots, self.names = slots, []

    def launch(self, call, name):
        self.names.append(name)
        return len(self.names) - 1

    def wait(self, handles, timeout):
        return [(handle, f"run-{handle}", None) for handle in handles]

    def kill(self, handles):
        raise AssertionError("nothing is killed")


def test_the_local_executor_launches_the_jobs_longest_first(monkeypatch):
    launcher = _Launcher(slots=2)

    @contextmanager
    def fake(self):
        yield launcher

    monkeypatch.setattr(LocalExecutor, "launcher", fake)
    jobs = [_job("s", 0), _job("l", 0, 240), _job("s", 1), _job("l", 1, 240)]
    ordered = order_jobs(jobs, cost_model(jobs, []))
    # the URI is never reached: a store is opened only to record a failure
    outcomes = LocalExecutor(workers=2).run(
        ordered, tracking_uri="http://127.0.0.1:9", sweep_id="s", parent_run_id=None
    )
    assert launcher.names == [f"harness-job-{j.job_id}" for j in (jobs[1], jobs[3], jobs[0], jobs[2])]
    assert [o.job_id for o in outcomes] == [j.job_id for j in ordered] and {o.status for o in outcomes} == {"FINISHED"}


class _Recorder:
    """An executor that runs nothing: records the jobs it is given, in order, and reports them FINISHED."""

    workers = 2

    def __init__(self):
        self.given: list[Job] = []

    def warm(self):
        pass

    def run(self, jobs, *, tracking_uri, sweep_id, parent_run_id, on_event=None):
        self.given = list(jobs)
        return [JobOutcome(j.job_id, "FINISHED", None, None, 1, 0.0) for j in jobs]


def test_a_resumed_sweep_hands_its_executor_the_jobs_longest_first_by_the_runs_in_the_store(tmp_path, monkeypatch):
    """The one test here with a store (a fresh SQLite one: MLflow's migrations take seconds): s's finished seed 0 took
    300 s (300 s per W), a run of l's seed 9 took 200 s (100 s per W, of 2W): s's seed 1 goes before l's jobs,
    though the prior alone (work) would start l first."""
    from fake_sweep import plan_of
    from mlflow.entities import RunStatus
    from mlflow.tracking import MlflowClient

    from harness.runs.writer import prepare_store

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    s0, l0, s1, l1, l9 = _job("s", 0), _job("l", 0, 240), _job("s", 1), _job("l", 1, 240), _job("l", 9, 240)
    client, experiment = MlflowClient(uri), prepare_store(uri, "toy")
    for job, seconds in ((s0, 300), (l9, 200)):
        tags = {"sweep_id": "sw", "arm": job.arm_id, "job_id": job.job_id}
        run = client.create_run(experiment, start_time=1_000_000, tags=tags)
        client.set_terminated(run.info.run_id, RunStatus.to_string(RunStatus.FINISHED), 1_000_000 + 1000 * seconds)
    monkeypatch.setattr(sweep, "_build_models", lambda *_: None)  # no toy model to build: nothing trains
    executor = _Recorder()
    plan = plan_of("t", "sw", "toy", {}, [s0, l0, s1, l1])
    result = sweep.run_sweep(plan, executor=executor, tracking_uri=uri, console=False)
    assert result.skipped == [s0] and executor.given == [s1, l0, l1] and len(result.finished) == 3
