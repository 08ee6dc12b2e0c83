"""PF-PPO (objective.pf_ppo_reweight; arXiv 2409.06957, verl's compute_pf_ppo_reweight_data): the optimisation batch
replaced by as many draws with replacement, weighted by reward. The weights by hand, the draws (seeded, and their
frequencies), the loop (which rows train, the same rows for the same seed, with the KL in the reward's laid-out batch),
the settings, the job id and TRL's refusal. benchmarks/pf_ppo_vs_verl.py compares it with verl's own function."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from fake_loop import FakeBackend, FakeLM, TableTask, record_updates

from harness.config.errors import ConfigError
from harness.config.run_config import LATER_FIELDS, load_run_config
from harness.config.trl_args import trl_problems
from trainer import metric_names as M
from trainer.config import RolloutConfig, TrainConfig
from trainer.loop import Trainer, TrainerSettings
from trainer.objective import PF_PPO_WEIGHTS, ObjectiveSettings, compute_advantages, pf_ppo_resample, pf_ppo_weights

TOY_RUN = Path(__file__).resolve().parents[1] / "ablations" / "toy_run.yaml"
EPS = 1e-8


def _s(method: str, k: float | None = None, **over) -> ObjectiveSettings:
    return ObjectiveSettings.preset("grpo", pf_ppo_reweight=method, pf_ppo_weight_pow=k, **over)


def T(*xs: float) -> torch.Tensor:
    return torch.tensor(xs, dtype=torch.float64)


# ---- the weights by hand -----------------------------------------------------------------------------------------
def test_pow_weights_are_the_absolute_reward_to_the_k_plus_1e_8():
    w = pf_ppo_weights(T(1.0, 0.0, -2.0, 0.5), _s("pow", 2.0)).tolist()
    assert w == [1.0 + EPS, EPS, 4.0 + EPS, 0.25 + EPS]
    assert pf_ppo_weights(T(-2.0, 3.0), _s("pow", 0.5)).tolist() == pytest.approx([2**0.5, 3**0.5], abs=1e-7)


def test_max_min_keeps_the_batchs_extremes_and_max_random_favours_the_best_four_to_one():
    scores = T(0.2, 1.0, 0.2, 0.5, 0.0, 1.0)
    assert pf_ppo_weights(scores, _s("max_min")).tolist() == [EPS, 1 + EPS, EPS, EPS, 1 + EPS, 1 + EPS]
    assert pf_ppo_weights(scores, _s("max_random")).tolist() == [0.1 + EPS, 0.4 + EPS] + [0.1 + EPS] * 3 + [0.4 + EPS]
    flat = T(0.5, 0.5, 0.5)  # every reward the max and the min: all drawable alike
    assert pf_ppo_weights(flat, _s("max_min")).tolist() == [1 + EPS] * 3
    assert pf_ppo_weights(flat, _s("max_random")).tolist() == [0.4 + EPS] * 3
    assert pf_ppo_weights(T(0.0, 0.0), _s("pow", 2.0)).tolist() == [EPS, EPS]  # all zero: uniform, not undefined
    assert PF_PPO_WEIGHTS.names() == ("pow", "max_min", "max_random")


# ---- the draws ---------------------------------------------------------------------------------------------------
def test_the_draws_are_torchs_multinomial_with_replacement_from_the_given_generator():
    scores, s = T(1.0, 0.0, -2.0, 0.5, 0.25), _s("pow", 2.0)
    picks = pf_ppo_resample(scores, s, torch.Generator().manual_seed(5))
    assert picks.shape == (5,)
    again = pf_ppo_resample(scores, s, torch.Generator().manual_seed(5))
    direct = torch.multinomial(
        pf_ppo_weights(scores, s), 5, replacement=True, generator=torch.Generator().manual_seed(5)
    )
    assert picks.tolist() == again.tolist() == direct.tolist()
    with pytest.raises(ValueError, match="at least one response"):
        pf_ppo_resample(T(), s, torch.Generator())


def test_the_draw_frequencies_follow_the_weights():
    """40 000 draws over rewards [1, 0.5, −1, 2, 0] with k = 1 (40 batches of these five repeated 200 times): shares
    2/9, 1/9, 2/9, 4/9 and ~0 (weights over their sum 4.5), each within 5 standard errors (≤ 0.0125)."""
    scores = T(1.0, 0.5, -1.0, 2.0, 0.0)
    counts = torch.zeros(5)
    gen = torch.Generator().manual_seed(0)
    for _ in range(40):
        picks = pf_ppo_resample(scores.repeat(200), _s("pow", 1.0), gen)
        counts += torch.bincount(picks % 5, minlength=5)
    freq = (counts / counts.sum()).tolist()
    assert freq == pytest.approx([2 / 9, 1 / 9, 2 / 9, 4 / 9, 0.0], abs=0.0125)
    assert counts[4] == 0  # weight 1e-8 of 4.5: never in 40 000 draws (expected 1e-4)


# ---- the loop ----------------------------------------------------------------------------------------------------
def _loop(objective, seed=0, train=None):
    settings = TrainerSettings(
        objective,
        RolloutConfig(prompts_per_step=2, group_size=4, max_new_tokens=8, temperature=0.7),
        train or TrainConfig(steps=1, device="cpu", reference_kl=False),
        seed,
    )
    task = TableTask({"p0": [1.0, 0.0, 0.0, 1.0], "p1": [0.0, 1.0, 1.0, 1.0]})
    tr = Trainer(FakeLM(), task, FakeBackend(), 0, settings)
    seen = record_updates(tr, lambda t, adv: (_rows(t), adv.tolist()))
    return tr, seen


def _rows(t) -> list[int]:
    """Each row of the update's batch as its sample index j: FakeBackend answers sample j with tokens 10 + j (the
    group is told apart by the row's advantage)."""
    P = int(t["prompt_len"])
    return [int(ids[P]) - 10 for ids in t["ids"]]


REWARDS = torch.tensor([[1.0, 0.0, 0.0, 1.0], [0.0, 1.0, 1.0, 1.0]], dtype=torch.float64)


def test_pow_on_binary_rewards_trains_only_the_right_responses_with_their_grpo_advantages():
    """|R|^1 on 0/1 rewards: the wrong responses weigh 1e-8, so the 8 draws are among the 5 right ones, each carrying
    the advantage GRPO gave it over its whole group."""
    s = _s("pow", 1.0, max_len=8)
    tr, seen = _loop(s)
    metrics = tr.step(1)
    (samples, adv), grpo = seen[0], compute_advantages(REWARDS, s).flatten().float().tolist()
    assert len(adv) == 8 and all(a > 0 for a in adv)
    p0, p1 = grpo[0], grpo[5]  # the advantage of p0's right responses (samples 0, 3), of p1's (1, 2, 3)
    for j, a in zip(samples, adv):
        assert (abs(a - p0) < 1e-6 and j in (0, 3)) or (abs(a - p1) < 1e-6 and j in (1, 2, 3)), (j, a)
    assert metrics[M.PF_PPO_REWARD_MEAN] == 1.0 and 0 < metrics[M.PF_PPO_DISTINCT_FRAC] <= 5 / 8
    assert metrics[M.REWARD_MEAN] == 5 / 8  # train/reward_mean stays the sampled responses'


def test_the_same_seed_draws_the_same_batch_and_another_seed_another():
    s = _s("max_random", max_len=8)
    draws = []
    for seed in (0, 0, 1, 2, 3):
        tr, seen = _loop(s, seed=seed)
        tr.step(1)
        draws.append(seen[0])
    assert draws[0] == draws[1]
    assert any(d != draws[0] for d in draws[2:])


def test_with_the_kl_in_the_reward_the_update_takes_the_resampled_rows():
    """The KL in the reward lays out the whole batch before the advantages; PF-PPO's batch is another (8 draws, not
    rows 0-7 in order), so the update builds its own: each row's advantage is its own response's."""
    s = _s("pow", 1.0, max_len=8, kl_reward_coef=0.1)
    tr, seen = _loop(s)
    tr.step(1)
    samples, adv = seen[0]
    assert len(samples) == 8 and all(a > 0 for a in adv)  # only right responses (a wrong one would have A < 0)
    assert set(samples) <= {0, 1, 2, 3}


def test_off_trains_every_response_once():
    tr, seen = _loop(ObjectiveSettings.preset("grpo", max_len=8))
    metrics = tr.step(1)
    assert sorted(seen[0][0]) == [0, 0, 1, 1, 2, 2, 3, 3] and M.PF_PPO_DISTINCT_FRAC not in metrics
    assert {M.PF_PPO_DISTINCT_FRAC, M.PF_PPO_REWARD_MEAN} <= M.ALL


# ---- settings, job ids, TRL --------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("over", "message"),
    [
        ({"pf_ppo_reweight": "pow"}, "pf_ppo_weight_pow is set exactly when pf_ppo_reweight is 'pow'"),
        ({"pf_ppo_reweight": "max_min", "pf_ppo_weight_pow": 2.0}, "pf_ppo_weight_pow is set exactly when"),
        ({"pf_ppo_weight_pow": 2.0}, "pf_ppo_weight_pow is set exactly when pf_ppo_reweight is 'pow'"),
        ({"pf_ppo_reweight": "best_of_n"}, "unknown PF-PPO reweight method 'best_of_n'; known: pow, max_min"),
        ({"pf_ppo_reweight": "pow", "pf_ppo_weight_pow": 0.0}, "greater than 0"),
    ],
)
def test_bad_settings_are_one_line_errors(over, message):
    with pytest.raises(ValueError, match=message):
        ObjectiveSettings.preset("grpo", **over)


def test_a_run_config_takes_it_a_plain_jobs_id_does_not_change_and_trl_refuses_it():
    cfg = load_run_config(TOY_RUN, ["objective.pf_ppo_reweight=pow", "objective.pf_ppo_weight_pow=2"])
    assert (cfg.objective.pf_ppo_reweight, cfg.objective.pf_ppo_weight_pow) == ("pow", 2.0)
    plain = load_run_config(TOY_RUN, [])
    assert not {"pf_ppo_reweight", "pf_ppo_weight_pow"} & set(plain.identity()["objective"])
    assert cfg.config_hash != plain.config_hash
    assert LATER_FIELDS["objective.pf_ppo_reweight"] is None and LATER_FIELDS["objective.pf_ppo_weight_pow"] is None
    problems = trl_problems(cfg.objective, cfg.rollout, cfg.train)
    assert "objective.pf_ppo_reweight: pow (TRL trains every response it samples once: no PF-PPO)" in problems
    with pytest.raises(ConfigError, match="objective: pf_ppo_weight_pow is set exactly"):
        load_run_config(TOY_RUN, ["objective.pf_ppo_reweight=pow"])
