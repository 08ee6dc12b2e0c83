"""The KL penalty in the reward (objective.kl_reward_coef): by hand, in the advantages, the update and the loop."""

import math
from pathlib import Path

import pytest
import torch
from fake_loop import FakeBackend, FakeLM, TableTask
from pydantic import ValidationError

from harness.config.run_config import LATER_FIELDS, RunConfig, load_run_config
from harness.config.trl_args import trl_problems
from trainer import metric_names as M
from trainer.config import RolloutConfig, TrainConfig
from trainer.loop import Trainer, TrainerSettings
from trainer.objective import ObjectiveSettings, compute_advantages, kl_reward_penalty
from trainer.objective.kl import token_logprobs

TOY_RUN = Path(__file__).resolve().parents[1] / "ablations" / "toy_run.yaml"
EXPRESSIBLE = ["objective.adv_eps=0.0001", "train.reference_kl=false"]  # as tests/test_trl_engine.py's

# Two responses of 3 and 2 tokens (the third column of the second is padding, whose log r = 9 must not count).
OLD = torch.tensor([[-1.0, -2.0, -0.5], [-0.3, -0.7, 0.0]], dtype=torch.float64)
REF = torch.tensor([[-1.5, -1.0, -0.5], [-0.3, -1.0, -9.0]], dtype=torch.float64)
MASK = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]], dtype=torch.float64)


def test_the_penalty_by_hand_k1_and_k3():
    # log r = old − ref: [0.5, −1, 0] and [0, 0.3]
    k1 = ObjectiveSettings.preset("grpo", kl_reward_coef=0.1)
    assert kl_reward_penalty(OLD, REF, MASK, k1).tolist() == pytest.approx([0.1 * -0.5, 0.1 * 0.3], abs=1e-12)
    # k3 = e^(−log r) − 1 + log r: e^-0.5 − 0.5 = 0.1065307, e − 2 = 0.7182818, 0; 0, e^-0.3 − 0.7 = 0.0408182
    k3 = ObjectiveSettings.preset("grpo", kl_reward_coef=0.1, kl_reward_estimator="k3")
    expected = [0.1 * (math.exp(-0.5) - 0.5 + math.e - 2), 0.1 * (math.exp(-0.3) - 0.7)]
    assert kl_reward_penalty(OLD, REF, MASK, k3).tolist() == pytest.approx(expected, abs=1e-12)
    assert expected == pytest.approx([0.0824813, 0.0040818], abs=1e-7)
    k2 = ObjectiveSettings.preset("grpo", kl_reward_coef=2.0, kl_reward_estimator="k2")  # ½ (log r)², β = 2
    assert kl_reward_penalty(OLD, REF, MASK, k2).tolist() == pytest.approx([0.25 + 1.0, 0.09], abs=1e-12)


def test_the_penalty_carries_no_gradient():
    old = OLD.clone().requires_grad_(True)
    penalty = kl_reward_penalty(old, REF, MASK, ObjectiveSettings.preset("grpo", kl_reward_coef=0.1))
    assert not penalty.requires_grad


def test_a_flat_group_gets_advantages_from_the_penalty():
    """Rewards [1, 1] with the penalties above: GRPO's advantages are 0 without the KL, ±0.04/(0.08/√2 + ε) with
    it (the mean of [1.05, 0.97] is 1.01; the std of two values is |a − b|/√2; ε = adv_eps, 1e-6)."""
    s = ObjectiveSettings.preset("grpo", kl_reward_coef=0.1)
    rewards = torch.ones(1, 2, dtype=torch.float64)
    assert compute_advantages(rewards, s).abs().max().item() == 0
    penalised = rewards - kl_reward_penalty(OLD, REF, MASK, s).view(1, 2)  # [1.05, 0.97]
    adv = compute_advantages(penalised, s).flatten().tolist()
    a = 0.04 / (0.08 / math.sqrt(2) + 1e-6)
    assert adv == pytest.approx([a, -a], abs=1e-9)


def test_settings_refuse_a_negative_coefficient_and_an_estimator_without_it():
    with pytest.raises(ValidationError, match="kl_reward_coef"):
        ObjectiveSettings.preset("grpo", kl_reward_coef=-0.1)
    with pytest.raises(ValidationError, match="kl_reward_coef"):
        ObjectiveSettings.preset("grpo", kl_reward_coef=math.inf)
    with pytest.raises(ValidationError, match=r"kl_reward_estimator \(k3\) needs kl_reward_coef > 0"):
        ObjectiveSettings.preset("grpo", kl_reward_estimator="k3")
    with pytest.raises(ValidationError, match="unknown KL estimator 'k4'"):
        ObjectiveSettings.preset("grpo", kl_reward_coef=0.1, kl_reward_estimator="k4")
    assert ObjectiveSettings.preset("grpo", kl_reward_coef=0.1).needs_reference
    assert not ObjectiveSettings.preset("grpo").needs_reference


def test_the_new_fields_enter_a_job_id_only_when_set():
    assert LATER_FIELDS["objective.kl_reward_coef"] == 0.0 and LATER_FIELDS["objective.kl_reward_estimator"] == "k1"
    for name in ("grpo", "dr_grpo", "dapo", "gspo", "mc_grpo", "nsr"):
        objective = load_run_config(TOY_RUN, [f"objective.preset={name}"]).identity()["objective"]
        assert not {"kl_reward_coef", "kl_reward_estimator"} & set(objective), name
    objective = load_run_config(
        TOY_RUN, ["objective.kl_reward_coef=0.01", "objective.kl_reward_estimator=k3"]
    ).identity()["objective"]
    assert objective["kl_reward_coef"] == 0.01 and objective["kl_reward_estimator"] == "k3"


def test_trl_refuses_the_kl_in_the_reward_in_one_line():
    with pytest.raises(
        ValidationError, match=r"trl cannot express .*objective.kl_reward_coef: 0.01 \(TRL's GRPOTrainer"
    ):
        RunConfig.model_validate({"objective": {"preset": "grpo", "kl_reward_coef": 0.01}, "train": {"engine": "trl"}})
    cfg = load_run_config(TOY_RUN, [*EXPRESSIBLE, "objective.kl_reward_coef=0.01"])
    assert trl_problems(cfg.objective, cfg.rollout, cfg.train) == [
        "objective.kl_reward_coef: 0.01 (TRL's GRPOTrainer has no KL in the reward)"
    ]
    # settings_of reads a TRL run back with kl_reward_coef 0 and kl_reward_estimator k1: every field is compared in
    # tests/test_trl_engine.py::test_settings_read_back_from_grpo_config_are_the_run_config


# ---- the loop ----------------------------------------------------------------------------------------------------
FLAT = {"p0": [1.0] * 5, "p1": [0.0] * 5}
"""Every group flat: without the KL in the reward, every advantage is 0."""


def _trainer(objective: ObjectiveSettings, **train):
    settings = TrainerSettings(
        objective,
        RolloutConfig(prompts_per_step=2, group_size=4, max_new_tokens=8),
        TrainConfig(**{"steps": 1, "device": "cpu", "reference_kl": False, **train}),
        0,
    )
    tr = Trainer(FakeLM(), TableTask(FLAT), FakeBackend(), 0, settings)
    if tr.ref is not None:  # a reference the policy has moved away from: a different log-prob for every token
        with torch.no_grad():
            tr.ref.out.bias.copy_(torch.linspace(-1.0, 1.0, 32))
    seen, forwards = [], []
    update, logprobs = tr.update, tr._logprobs

    def spy(step, t, advantages, mask, *precomputed):
        now = logprobs(tr.policy, t)  # π_old of the update's batch, computed afresh (not counted)
        seen.append((t, advantages.tolist(), precomputed, now))
        return update(step, t, advantages, mask, *precomputed)

    def count(model, t):
        forwards.append(model is tr.ref)
        return logprobs(model, t)

    tr.update, tr._logprobs = spy, count
    return tr, seen, forwards


def _by_hand(tr, beta):
    """P_i = β Σ_t k1 of each sample j (tokens [10 + j] × (j + 1) after the prompt [3, 3]), from the models."""
    out = []
    for j in range(4):
        ids = torch.tensor([[3, 3] + [10 + j] * (j + 1)])
        with torch.no_grad():
            old = token_logprobs(tr.policy(ids).logits[:, 1:-1], ids[:, 2:])
            ref = token_logprobs(tr.ref(ids).logits[:, 1:-1], ids[:, 2:])
        out.append(beta * (old - ref).sum().item())
    return out


def test_the_loop_penalises_the_reward_before_the_advantage_and_computes_each_forward_once():
    tr, seen, forwards = _trainer(ObjectiveSettings.preset("grpo", max_len=8, kl_reward_coef=0.5), reference_kl=True)
    penalty = _by_hand(tr, 0.5)
    metrics = tr.step(1)
    ((t, adv, precomputed, _),) = seen
    assert forwards == [False, True]  # π_old and π_ref once, before the advantages; the update reads the same ref
    assert precomputed[1] is not None
    expected = compute_advantages(-torch.tensor([penalty, penalty], dtype=torch.float64), tr.obj).flatten()
    assert adv == pytest.approx(expected.tolist(), abs=1e-5)
    assert min(map(abs, adv)) > 0.01  # flat rewards, yet every response has an advantage
    assert metrics[M.KL_REWARD_PENALTY] == pytest.approx(sum(penalty) / 4, abs=1e-6)
    assert metrics[M.REWARD_MEAN] == 0.5 and metrics[M.ACCURACY] == 0.5  # the task's own, unpenalised
    assert M.KL_REWARD_PENALTY in M.ALL and M.KL in metrics  # the loss's KL metric reads the reference passed in


def test_coefficient_zero_adds_no_forward_and_changes_the_update():
    params = {}
    for beta in (0.0, 0.5):
        tr, seen, forwards = _trainer(ObjectiveSettings.preset("grpo", max_len=8, kl_reward_coef=beta))
        metrics = tr.step(1)
        ((_, adv, precomputed, _),) = seen
        if beta == 0:
            assert forwards == [] and precomputed == (None, None) and M.KL_REWARD_PENALTY not in metrics
            assert max(map(abs, adv)) == 0
        params[beta] = torch.cat([p.detach().flatten() for p in tr.policy.parameters()])
    assert (params[0.5] - params[0.0]).abs().max().item() > 1e-4


def test_the_loop_with_several_optimiser_steps_and_the_mc_pivot_reuses_the_kept_rows_log_probs():
    """MC-GRPO trains G of G + 1 responses: the penalty covers all of them (the median is of the penalised rewards)
    and the update gets the trained rows' π_old and π_ref, cut to their batch's width."""
    s = ObjectiveSettings.preset("grpo", max_len=8, kl_reward_coef=0.5, advantage="group_median_mad", median_pivot=True)
    tr, seen, forwards = _trainer(s, mini_batches=2, epochs=2)
    metrics = tr.step(1)
    ((t, adv, (old, ref), now),) = seen
    assert forwards == [False, True] and len(adv) == 8  # 2 groups of G = 4 of the 5 sampled
    assert old.shape == ref.shape == now.shape == t["resp_mask"].shape
    m = t["resp_mask"].bool()  # past a response's end a micro-batch holds padding's log-probs, masked in the loss
    assert (old - now)[m].abs().max().item() < 1e-6  # the kept rows' π_old, cut to the trained rows and their width
    assert math.isfinite(metrics[M.LOSS]) and M.KL_REWARD_PENALTY in metrics
