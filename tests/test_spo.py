"""SPO (arXiv 2509.13232): A = whiten_B(R − v̂(x)), v̂ a per-prompt Beta tracker whose evidence fades with the policy's
drift, prompts drawn from a fixed pool with weight √(v̂(1 − v̂)) + ε. By hand (the tracker's rules, the estimator, the
sampler's weights), split into micro-batches, against the update without the tracker, and in the loop: the tracker's
initial samples, the baseline it hands, its update after the step, the prompts it weighs."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from fake_loop import FakeBackend, FakeLM, TableTask, assert_splits_agree, record_updates, split_update

from trainer import metric_names as M
from trainer.config import RolloutConfig, TrainConfig
from trainer.loop import Trainer, TrainerSettings
from trainer.objective import ADVANTAGES, ObjectiveSettings, compute_advantages
from trainer.objective.registry import ONE_RESPONSE_ADVANTAGES
from trainer.prompt_pool import SAMPLERS, PromptPool, value_priority_weights
from trainer.value_tracker import (
    LastResponse,
    ValueTracker,
    initial_counts,
    kl_adaptive_rho,
    mean_abs_drift,
)


def T(*rows: list[float]) -> torch.Tensor:
    return torch.tensor(rows, dtype=torch.float64)


# ---- the tracker's rules by hand -----------------------------------------------------------------------------------
def test_kl_adaptive_rho_by_hand():
    assert kl_adaptive_rho(0.0, 0.06, 0.875, 0.96) == 0.96  # 2^0 = 1, clipped: a first visit
    assert kl_adaptive_rho(0.01, 0.06, 0.875, 0.96) == pytest.approx(2 ** (-1 / 6))  # 0.8909, inside the clip
    assert kl_adaptive_rho(0.06, 0.06, 0.875, 0.96) == 0.875  # a drift of D_half halves: 0.5, clipped up
    assert kl_adaptive_rho(0.003, 0.06, 0.875, 0.96) == 0.96  # 2^-0.05 = 0.966, clipped down


def test_initial_counts_by_hand():
    alpha, beta = initial_counts(3, 8, 0.875)  # N = 1/(1 − 0.875) = 8
    assert (alpha, beta) == pytest.approx((8 * 3.5 / 9, 8 * 5.5 / 9))
    assert alpha / (alpha + beta) == pytest.approx(3.5 / 9) and alpha + beta == pytest.approx(8)
    assert initial_counts(0, 8, 0.875) == pytest.approx((8 * 0.5 / 9, 8 * 8.5 / 9))  # never right: v̂ = 1/18, not 0


def test_mean_abs_drift_by_hand():
    assert mean_abs_drift([-1.0, -2.0, -0.5], [-1.5, -1.0, -0.5]) == pytest.approx((0.5 + 1.0 + 0.0) / 3)
    assert mean_abs_drift([], []) == 0.0


def _tracker(rho=None) -> ValueTracker:
    return ValueTracker(0.875, 0.96, 0.06, 8, rho)


def test_the_tracker_by_hand_first_visit_then_a_drifted_one():
    tr = _tracker()
    tr.initialise("a", 3, 8)
    assert tr.values(["a", "b"]).tolist() == pytest.approx([3.5 / 9, 0.5])  # b untracked: the prior ½
    last = {"a": LastResponse((1,), (2, 3), (-0.5, -1.0)), "b": LastResponse((1,), (4,), (-2.0,))}
    metrics = tr.observe(["a", "b"], T([1.0, 0.0]), {}, last)  # first visits: ρ = ρ_max = 0.96
    a, b = tr.tracks["a"], tr.tracks["b"]
    assert (a.alpha, a.beta) == pytest.approx((0.96 * 28 / 9 + 1, 0.96 * 44 / 9))
    assert (b.alpha, b.beta) == pytest.approx((0.96 * 0.5, 0.96 * 0.5 + 1))
    assert metrics[M.SPO_VALUE_ABS_ERR] == pytest.approx((1 - 3.5 / 9 + 0.5) / 2)  # v̂ before the step against R
    assert metrics[M.SPO_VALUE_MEAN] == pytest.approx((3.5 / 9 + 0.5) / 2)
    assert metrics[M.SPO_TRACKED_FRAC] == 0.5 and metrics[M.SPO_RHO_MEAN] == pytest.approx(0.96)
    assert metrics[M.SPO_TRACKED_PROMPTS] == 2
    assert tr.previous(["a", "c"]) == {"a": last["a"]}  # the stored response the next drift is measured on
    alpha, beta = a.alpha, a.beta
    tr.observe(["a"], T([0.0]), {"a": 0.01}, {})  # D = 0.01: ρ = 2^(−1/6)
    rho = 2 ** (-1 / 6)
    assert (a.alpha, a.beta) == pytest.approx((rho * alpha, rho * beta + 1)) and a.visits == 2


def test_a_constant_rho_and_several_responses_to_one_prompt():
    tr = _tracker(rho=0.5)
    assert not tr.reads_drift
    tr.observe(["a", "a", "b"], T([1.0, 1.0, 0.0]), {"a": 9.0}, {})  # the drift is not read: ρ = 0.5
    assert (tr.tracks["a"].alpha, tr.tracks["a"].beta) == pytest.approx((0.25 + 2, 0.25))  # discounted once, summed
    with pytest.raises(ValueError, match=r"rewards in \[0, 1\]; a reward is 1.5"):
        tr.observe(["a"], T([1.5]), {}, {})


# ---- the estimator -------------------------------------------------------------------------------------------------
def test_the_estimator_by_hand():
    rewards, values = T([1], [0], [1], [0]), T([0.5], [0.25], [0.75], [0.5])
    # R − v̂ = 0.5, −0.25, 0.25, −0.5: mean 0, Bessel variance 0.625/3, so A = (R − v̂)·√(24/5)
    adv = ADVANTAGES["spo"](rewards, 0.0, values)
    assert adv.flatten().tolist() == pytest.approx([x * math.sqrt(24 / 5) for x in (0.5, -0.25, 0.25, -0.5)])
    shifted = ADVANTAGES["spo"](T([1, 1], [0, 1]), 1e-8, T([0.2, 0.2], [0.6, 0.6]))  # two responses per prompt
    c = torch.tensor([0.8, 0.8, -0.6, 0.4], dtype=torch.float64)
    assert shifted.flatten().tolist() == pytest.approx(((c - c.mean()) / (c.std() + 1e-8)).tolist())
    assert ADVANTAGES["spo"](T([1], [1]), 1e-8, T([0.5], [0.5])).tolist() == [[0], [0]]  # all R − v̂ equal: 0
    assert ADVANTAGES["spo"](T([1]), 1e-8, T([0.3])).tolist() == [[0]]  # one response: 0, not the std's NaN


def test_compute_advantages_hands_the_prompt_values_to_spo_only():
    s = ObjectiveSettings.preset("spo")
    assert s.needs_prompt_values and s.tracks_prompts and "spo" in ONE_RESPONSE_ADVANTAGES
    assert not ObjectiveSettings.preset("grpo").needs_prompt_values
    rewards, values = T([1], [0]), T([0.5], [0.5])
    scale = math.sqrt(0.5) + 1e-8  # R − v̂ = ±½: Bessel std √½, plus the preset's ε
    assert compute_advantages(rewards, s, prompt_values=values).flatten().tolist() == [0.5 / scale, -0.5 / scale]
    with pytest.raises(ValueError, match="needs each prompt's value from the trainer's value tracker"):
        compute_advantages(rewards, s)


# ---- the update: split into micro-batches, and unlike the one without the tracker ----------------------------------
REWARDS = T([1], [0], [0], [1], [1], [1], [0], [0])
VALUES = T([0.9], [0.1], [0.6], [0.2], [0.5], [0.95], [0.05], [0.4])


def _update(s: ObjectiveSettings, splits: int):
    values = VALUES if s.needs_prompt_values else None
    return split_update(s, compute_advantages(REWARDS, s, prompt_values=values).flatten(), splits)


def test_micro_batch_invariance():
    s = ObjectiveSettings.preset("spo")
    assert assert_splits_agree(lambda splits: _update(s, splits))[M.CLIP_FRAC] > 0


def test_changes_the_update_from_the_batch_whitened_reward():
    """Without the tracker (v̂ = ½ for every prompt) SPO is REINFORCE++'s batch_norm: the tracked baseline moves it."""
    _, _, mine = _update(ObjectiveSettings.preset("spo"), 1)
    _, _, theirs = _update(ObjectiveSettings.preset("spo", advantage="batch_norm", **_NO_TRACKER), 1)
    assert (mine - theirs).abs().max().item() > 1e-3
    flat = compute_advantages(REWARDS, ObjectiveSettings.preset("spo"), prompt_values=torch.full_like(REWARDS, 0.5))
    batch = compute_advantages(REWARDS, ObjectiveSettings.preset("spo", advantage="batch_norm", **_NO_TRACKER))
    assert torch.allclose(flat, batch)


_NO_TRACKER = dict(spo_rho_min=None, spo_rho_max=None, spo_d_half=None, spo_init_samples=None)


# ---- the pool and the sampler --------------------------------------------------------------------------------------
def test_value_priority_weights_by_hand():
    values = {"a": 0.5, "b": 0.0, "c": 0.9}
    w = value_priority_weights(["a", "b", "c"], values.__getitem__, 0.05)
    assert w.tolist() == pytest.approx([0.5 + 0.05, 0.05, 0.3 + 0.05])
    assert SAMPLERS["uniform"](["a", "b"], None, 0.05).tolist() == [1, 1]
    with pytest.raises(ValueError, match="value_priority reads a per-prompt tracker"):
        value_priority_weights(["a"], None, 0.05)


def test_the_pool_is_drawn_once_deduplicated_and_sampled_without_replacement():
    class Repeating(TableTask):
        def sample_groups(self, rng, num_groups, group_size):
            return [super(Repeating, self).sample_groups(rng, 3, group_size)[k % 3] for k in range(num_groups)]

    pool = PromptPool.draw(Repeating({}), 7, 1, seed=0)
    assert pool.ids == ["p0", "p1", "p2"]
    picks = pool.sample(np.random.default_rng(0), 3, np.array([1.0, 1.0, 1.0]))
    assert sorted(g.problem_id for g in picks) == ["p0", "p1", "p2"]
    only = pool.sample(np.random.default_rng(0), 2, np.array([0.0, 1.0, 0.0]))  # one prompt of weight > 0: replaced
    assert [g.problem_id for g in only] == ["p1", "p1"]
    assert len(pool.sample(np.random.default_rng(0), 5, np.ones(3))) == 5  # more than the pool: with replacement
    with pytest.raises(ValueError, match="prompt weights"):
        pool.sample(np.random.default_rng(0), 1, np.zeros(3))


# ---- the loop ------------------------------------------------------------------------------------------------------
def _loop(rewards: dict[str, list[float]], objective: ObjectiveSettings, pool=None, sampling="uniform", prompts=2):
    rollout = RolloutConfig(
        prompts_per_step=prompts,
        group_size=1,
        max_new_tokens=8,
        temperature=0.7,
        prompt_pool=pool,
        prompt_sampling=sampling,
    )
    settings = TrainerSettings(objective, rollout, TrainConfig(steps=2, device="cpu", reference_kl=False, lr=0.05), 0)
    tr = Trainer(FakeLM(), TableTask(rewards), FakeBackend(), 0, settings)
    return tr, record_updates(tr)


def test_the_loop_initialises_the_tracker_then_hands_its_baseline_and_updates_it():
    rewards = {"p0": [1.0], "p1": [0.0], "p2": [1.0]}
    s = ObjectiveSettings.preset("spo", spo_init_samples=4)
    tr, seen = _loop(rewards, s, pool=3)
    assert tr.pool is not None and tr.pool.ids == ["p0", "p1", "p2"]
    metrics = tr.step(1)
    init_calls = [p for call in tr.backend.calls[:-1] for p in call]  # in chunks of a step's responses
    assert sorted(init_calls) == sorted(["0:0"] * 4 + ["1:0"] * 4 + ["2:0"] * 4)  # n0 = 4 each, before the step
    assert tr.tokens_generated == 12 + 2  # the initial samples' tokens (one each) count as generated
    # p0 and p2 always right (s = 4 of 4), p1 never: v̂ = 4.5/5 and 0.5/5
    drawn = [int(p.split(":")[0]) for p in tr.backend.calls[-1]]
    v_hat = {0: 0.9, 1: 0.1, 2: 0.9}
    centred = torch.tensor([rewards[f"p{k}"][0] - v_hat[k] for k in drawn], dtype=torch.float64)
    expected = (centred - centred.mean()) / (centred.std() + 1e-8)
    assert seen[0] == pytest.approx(expected.tolist(), abs=1e-6)
    assert metrics[M.SPO_TRACKED_FRAC] == 1.0 and metrics[M.SPO_RHO_MEAN] == pytest.approx(0.96)  # first visits
    assert metrics[M.SPO_VALUE_MEAN] == pytest.approx(np.mean([v_hat[k] for k in drawn]))
    for k in drawn:  # ρ_max·α + R, ρ_max·β + 1 − R; its newest response stored with its log-probabilities
        r = rewards[f"p{k}"][0]
        a0, b0 = initial_counts(4 if r else 0, 4, 0.875)
        track = tr.tracker.tracks[f"p{k}"]
        assert (track.alpha, track.beta) == pytest.approx((0.96 * a0 + r, 0.96 * b0 + 1 - r))
        assert track.response_ids == (10,) and len(track.logprobs) == 1 and track.logprobs[0] < 0
    calls = len(tr.backend.calls)
    metrics = tr.step(2)  # the policy moved: a prompt seen again gets ρ from its drift, within the clip
    assert 0.875 <= metrics[M.SPO_RHO_MEAN] <= 0.96
    assert len(tr.backend.calls) == calls + 1  # the step's sampling only: no second initialisation


def test_a_drifted_prompt_is_discounted_by_its_measured_drift():
    tr, _ = _loop({"p0": [1.0]}, ObjectiveSettings.preset("spo", spo_init_samples=0), prompts=1)
    tr.step(1)
    stored = tr.tracker.tracks["p0"]
    then = list(stored.logprobs)
    alpha, beta = stored.alpha, stored.beta
    with torch.no_grad():  # move the policy by hand: the stored response's log-probability changes
        tr.policy.out.bias += torch.linspace(0, 1, 32)
    now = tr._score([list(stored.prompt_ids)], [list(stored.response_ids)])[0]
    tr._sample = lambda step, round_: (_one_more(tr), 0.0, 1)  # skip the sampling: the same response again
    tr.update = lambda *args: {}  # and no update, so that "now" is the policy the drift is measured against
    tr.step(2)
    rho = kl_adaptive_rho(mean_abs_drift(then, now), 0.06, 0.875, 0.96)
    assert (stored.alpha, stored.beta) == pytest.approx((rho * alpha + 1, rho * beta))
    assert rho < 0.96  # the drift was measured, not taken as 0


def _one_more(tr):
    out = tr.backend.generate(["0:0"], tr.params, 0)
    from trainer.loop import Samples

    groups = tr.task.sample_groups(None, 1, 1)
    grades = [tr._grade(groups[0], 0, out.texts[0], False)]
    return Samples(
        groups,
        [[3, 3]],
        [out.response_ids[0, :1].tolist()],
        out.truncated,
        out.lengths,
        grades,
        list(out.texts),
        [1],
        [[0.0]],
    )


def test_value_priority_draws_with_the_trackers_weights():
    rewards = {f"p{k}": [float(k % 2)] for k in range(6)}
    s = ObjectiveSettings.preset("spo", spo_init_samples=2)
    tr, _ = _loop(rewards, s, pool=6, sampling="value_priority")
    tr._initialise_tracker(1)
    weights = value_priority_weights(tr.pool.ids, tr.tracker.value, 0.05)
    assert weights.tolist() == pytest.approx([math.sqrt(0.5 / 3 * 2.5 / 3) + 0.05] * 6)  # s = 0 or 2 of 2: v̂ 1/6, 5/6
    state = tr.rng.bit_generator.state
    expected = tr.pool.sample(np.random.default_rng(0), 2, weights)
    tr.rng.bit_generator.state = np.random.default_rng(0).bit_generator.state
    assert tr._draw_groups(2, 1) == expected
    tr.rng.bit_generator.state = state


def test_without_a_pool_each_step_draws_fresh_problems_from_the_task():
    s = ObjectiveSettings.preset("spo", spo_init_samples=0)
    tr, _ = _loop({"p0": [1.0], "p1": [0.0]}, s)
    assert tr.pool is None
    metrics = tr.step(1)
    assert tr.backend.calls[0] == ["0:0", "1:0"]  # no initial samples: straight to the step's
    assert metrics[M.SPO_TRACKED_FRAC] == 0.0 and metrics[M.SPO_VALUE_MEAN] == 0.5  # the prior ½
    assert all(name in M.ALL for name in (M.SPO_VALUE_ABS_ERR, M.SPO_VALUE_MEAN, M.SPO_TRACKED_FRAC, M.SPO_RHO_MEAN))


def test_other_advantages_keep_no_tracker():
    tr, _ = _loop({"p0": [1.0], "p1": [0.0]}, ObjectiveSettings.preset("remax", max_len=8))
    assert tr.tracker is None and tr.pool is None


# ---- the run config and TRL ----------------------------------------------------------------------------------------
def test_the_recipe_validates_and_trl_refuses_it():
    from harness.config.errors import ConfigError
    from harness.config.run_config import LATER_FIELDS, load_run_config
    from harness.config.trl_args import trl_problems
    from tests.test_trl_engine import TOY_RUN

    recipe = [
        "objective.preset=spo",
        "rollout.group_size=1",
        "rollout.prompts_per_step=128",
        "rollout.prompt_pool=1024",
        "rollout.prompt_sampling=value_priority",
    ]
    cfg = load_run_config(TOY_RUN, recipe)
    o = cfg.objective
    assert (o.spo_rho_min, o.spo_rho_max, o.spo_d_half, o.spo_init_samples, o.spo_rho) == (0.875, 0.96, 0.06, 8, None)
    assert (o.adv_eps, o.aggregation, o.clip_high, o.dual_clip) == (1e-8, "token_mean", 0.28, 10.0)
    problems = trl_problems(cfg.objective, cfg.rollout, cfg.train)
    assert any(p.startswith("objective.advantage: spo") for p in problems)
    assert any(p.startswith("rollout.prompt_pool: 1024") for p in problems)
    plain = load_run_config(TOY_RUN, []).identity()  # the new fields enter a job id only when set
    assert not {"spo_rho_min", "spo_rho"} & set(plain["objective"]) and "prompt_pool" not in plain["rollout"]
    assert LATER_FIELDS["rollout.prompt_sampling"] == "uniform"
    with pytest.raises(ConfigError, match="objective.spo_init_samples: 8 samples each prompt of a fixed pool"):
        load_run_config(TOY_RUN, ["objective.preset=spo"])
    with pytest.raises(ConfigError, match="rollout.prompt_sampling: value_priority weighs prompts"):
        load_run_config(TOY_RUN, ["rollout.prompt_pool=8", "rollout.prompt_sampling=value_priority"])
