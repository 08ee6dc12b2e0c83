"""Longest jobs first from expected costs (`harness.engine.cost`), against numbers worked by hand: the prior and the
measured rates, LPT's order and makespan. No training, no timed assertion."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.config.job import Job
from harness.config.run_config import load_run_config
from harness.engine.cost import CostModel, Measured, cost_model, longest_first, makespan, order_jobs, work

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
