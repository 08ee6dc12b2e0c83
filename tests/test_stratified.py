"""Stratified GRPO's stratified advantage normalisation (SAN, arXiv 2510.06214): hand-computed numbers, micro-batch
invariance, the change from GRPO on the same tensors, the loop reading each sample's stratum from its grade's info or
its group's meta (a fake model, task and backend: no toy build), and one-line errors for a stratum the task does not
report."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from fake_loop import FakeBackend, FakeLM
from pydantic import ValidationError

from harness.config.run_config import RunConfig
from trainer import metric_names as M
from trainer.config import RolloutConfig, TrainConfig
from trainer.loop import Samples, Trainer, TrainerSettings, stratum_labels
from trainer.objective import (
    ADVANTAGES,
    AGGREGATIONS,
    Normaliser,
    ObjectiveSettings,
    compute_advantages,
    merge_metrics,
    policy_loss,
    token_logprobs,
)
from trainer.rewards.grade import Grade
from trainer.tasks.base import Group
from trainer.tasks.toy_addition import ToyAdditionTask
from trainer.tasks.toy_addition_config import ToyAdditionConfig

F64 = torch.float64
STRAT = {"advantage": "stratified", "stratum_key": "hidden_digit"}
R3 = 1 / math.sqrt(3)
R2 = 1 / math.sqrt(2)


def _t(*rows):
    return torch.tensor(rows, dtype=F64)


def _san(rewards, strata, eps=0.0, blend=1.0):
    return ADVANTAGES["stratified"](rewards, eps, blend, torch.tensor(strata))


# ---- the estimator, by hand ------------------------------------------------------------------------------------------
def test_each_stratum_is_normalised_by_its_own_mean_and_bessel_std():
    """Stratum a = [1, 0, 0]: mean 1/3, Bessel std 1/√3 → [2/√3, −1/√3, −1/√3]; b = [1, 1, 0]: mean 2/3 →
    [1/√3, 1/√3, −2/√3]. GRPO over the six (mean 1/2, std √0.3) gives ±0.5/√0.3 instead."""
    rewards = _t([1, 0, 0, 1, 1, 0])
    got = _san(rewards, [[0, 0, 0, 1, 1, 1]])
    torch.testing.assert_close(got, _t([2 * R3, -R3, -R3, R3, R3, -2 * R3]), rtol=0, atol=1e-12)
    g = 0.5 / math.sqrt(0.3)
    torch.testing.assert_close(ADVANTAGES["group_std"](rewards, 0.0), _t([g, -g, -g, g, g, -g]), rtol=0, atol=1e-12)


def test_labels_need_not_be_contiguous_and_eps_adds_to_each_stratum_std():
    """Labels 5 and 2 interleaved: {1, 0.5} (mean 0.75, std 0.25·√2) and {0, 1} (mean 0.5, std √0.5)."""
    rewards = _t([1.0, 0.0, 0.5, 1.0])
    torch.testing.assert_close(_san(rewards, [[5, 2, 5, 2]]), _t([R2, -R2, -R2, R2]), rtol=0, atol=1e-12)
    s5, s2 = 0.25 * math.sqrt(2), math.sqrt(0.5)
    expected = _t([0.25 / (s5 + 0.1), -0.5 / (s2 + 0.1), -0.25 / (s5 + 0.1), 0.5 / (s2 + 0.1)])
    torch.testing.assert_close(_san(rewards, [[5, 2, 5, 2]], eps=0.1), expected, rtol=0, atol=1e-12)


def test_singleton_and_flat_strata_get_zero_and_the_blend_adds_grpo():
    """[1 | 0, 0 | 1]: two singletons and a flat pair, so SAN gives nothing although the group is not flat; with
    α = 0.25 only (1 − α)·GRPO is left (mean 1/2, std √(1/3): ±0.5·√3)."""
    rewards, strata = _t([1, 0, 0, 1]), [[0, 1, 1, 2]]
    assert torch.equal(_san(rewards, strata), torch.zeros_like(rewards))
    h = 0.5 * math.sqrt(3)
    torch.testing.assert_close(_san(rewards, strata, blend=0.25), 0.75 * _t([h, -h, -h, h]), rtol=0, atol=1e-12)


def test_the_blend_is_linear_in_alpha():
    """α·SAN + (1 − α)·GRPO, by hand for the first group of the first test at α = 0.5."""
    rewards, strata = _t([1, 0, 0, 1, 1, 0]), [[0, 0, 0, 1, 1, 1]]
    g = 0.5 / math.sqrt(0.3)
    expected = 0.5 * _t([2 * R3, -R3, -R3, R3, R3, -2 * R3]) + 0.5 * _t([g, -g, -g, g, g, -g])
    torch.testing.assert_close(_san(rewards, strata, blend=0.5), expected, rtol=0, atol=1e-12)
    torch.testing.assert_close(_san(rewards, strata, blend=0.0), ADVANTAGES["group_std"](rewards, 0.0))


def test_one_label_is_grpo_and_labels_never_cross_groups():
    """Every response in one stratum: exactly group_std. The same label in two groups: still two baselines."""
    rewards = _t([0.2, 0.5, 1.1, 0.0], [1.0, 0.0, 0.0, 0.0])
    for blend in (1.0, 0.3):
        torch.testing.assert_close(
            _san(rewards, [[7] * 4] * 2, eps=0.1, blend=blend), ADVANTAGES["group_std"](rewards, 0.1)
        )


def test_strata_of_another_shape_is_an_error():
    with pytest.raises(ValueError, match=r"strata must match rewards' shape \[1, 4\], got \[1, 3\]"):
        _san(_t([1, 0, 0, 1]), [[0, 1, 1]])


def test_compute_advantages_passes_the_labels_exactly_to_the_estimator_that_reads_them():
    s = ObjectiveSettings.preset("grpo", **STRAT, stratum_blend=0.5)
    rewards, strata = _t([1, 0, 0, 1, 1, 0]), torch.tensor([[0, 0, 0, 1, 1, 1]])
    torch.testing.assert_close(compute_advantages(rewards, s, strata), _san(rewards, [[0, 0, 0, 1, 1, 1]], 1e-6, 0.5))
    with pytest.raises(ValueError, match="labels missing"):
        compute_advantages(rewards, s)
    with pytest.raises(ValueError, match="labels given"):
        compute_advantages(rewards, ObjectiveSettings.preset("grpo"), strata)


# ---- the update: micro-batch invariance, and not GRPO's --------------------------------------------------------------
REWARDS = _t([1, 0, 1, 1, 0, 1], [0, 0, 1, 1, 1, 0])
STRATA = torch.tensor([[0, 1, 0, 1, 1, 0], [1, 1, 0, 0, 1, 0]])
"""Two groups of 6 whose strata differ in success rate, so a stratum's offset from the group mean is not 0."""


def _batch(seed: int, b: int = 12, t: int = 6, v: int = 5):
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(b, t, v, generator=g, dtype=F64).requires_grad_(True)
    tokens = torch.randint(0, v, (b, t), generator=g)
    lengths = torch.tensor([6, 2, 4, 1, 6, 3, 5, 6, 2, 3, 1, 4])[:b]
    mask = (torch.arange(t) < lengths[:, None]).long()
    old = token_logprobs(logits.detach(), tokens) + 0.3 * torch.randn(b, t, generator=g, dtype=F64)
    return logits, tokens, mask, old


def _loss_and_grad(s, logits, tokens, mask, old, adv, splits=1):
    logits.grad = None
    rows = torch.arange(len(adv))
    norm = Normaliser.from_mask(mask, s.max_len)
    total, parts = 0.0, []
    for part in rows.chunk(splits):
        out = policy_loss(token_logprobs(logits[part], tokens[part]), old[part], adv[part], mask[part], s, norm=norm)
        out.loss.backward()
        total += out.loss.item()
        parts.append(out.metrics)
    return total, logits.grad.clone(), merge_metrics(parts)


@pytest.mark.parametrize("blend", [1.0, 0.5])
@pytest.mark.parametrize("mode", AGGREGATIONS.names())
def test_stratified_is_micro_batch_invariant(mode, blend):
    s = ObjectiveSettings.preset(
        "grpo", aggregation=mode, max_len=8, clip_low=0.05, clip_high=0.06, stratum_blend=blend, **STRAT
    )
    logits, tokens, mask, old = _batch(0)
    adv = compute_advantages(REWARDS, s, STRATA).flatten()
    loss1, grad1, metrics1 = _loss_and_grad(s, logits, tokens, mask, old, adv)
    assert metrics1[M.CLIP_FRAC] > 0
    for splits in (2, 3, 12):
        loss_k, grad_k, metrics_k = _loss_and_grad(s, logits, tokens, mask, old, adv, splits)
        assert abs(loss_k - loss1) < 1e-10 and (grad_k - grad1).abs().max().item() < 1e-10
        assert metrics_k == pytest.approx(metrics1, abs=1e-10)


def test_stratified_changes_the_update_relative_to_grpo():
    """Same logits, rewards and aggregation: only the advantages differ. By hand for one response: group 0's response 1
    (stratum 1 = [0, 1, 0], mean 1/3, Bessel std 1/√3) gets −1/√3 under SAN, and (0 − 2/3)/std(group 0) under GRPO.
    The blend's advantages are the blend of both, and its gradient differs from either."""
    logits, tokens, mask, old = _batch(1)
    grpo = ObjectiveSettings.preset("grpo")
    strat = ObjectiveSettings.preset("grpo", **STRAT)
    half = ObjectiveSettings.preset("grpo", **STRAT, stratum_blend=0.5)
    a_grpo = compute_advantages(REWARDS, grpo).flatten()
    a_san = compute_advantages(REWARDS, strat, STRATA).flatten()
    a_half = compute_advantages(REWARDS, half, STRATA).flatten()
    assert a_san[1].item() == pytest.approx(-R3, abs=1e-5)
    assert a_grpo[1].item() == pytest.approx(-(2 / 3) / REWARDS[0].std().item(), abs=1e-5)
    torch.testing.assert_close(a_half, 0.5 * a_san + 0.5 * a_grpo)
    _, g_grpo, _ = _loss_and_grad(grpo, logits, tokens, mask, old, a_grpo)
    _, g_san, _ = _loss_and_grad(strat, logits, tokens, mask, old, a_san)
    _, g_half, _ = _loss_and_grad(half, logits, tokens, mask, old, a_half)
    assert (g_san - g_grpo).abs().max().item() > 1e-3
    assert min((g_half - g_grpo).abs().max().item(), (g_half - g_san).abs().max().item()) > 1e-4


# ---- the loop: each sample's stratum from its grade's info, else its group's meta ------------------------------------
LOOP_REWARDS = {"p0": [1.0, 0.0, 1.0, 1.0], "p1": [1.0, 0.0, 0.0, 0.0]}
INFO_HIDDEN = [False, True, False, True]
"""p0's grades report hidden_digit in their info (and its meta says otherwise, which must lose); p1 reports it only in
its meta: [False, False, True, True]."""


class FakeTask:
    name = "fake"

    def sample_groups(self, rng, num_groups, group_size):
        meta = {
            0: [{"hidden_digit": h} for h in (True, True, False, False)],
            1: [{"hidden_digit": h} for h in (False, False, True, True)],
        }
        return [
            Group(f"p{k}", "", tuple(f"{k}:{j}" for j in range(group_size)), tuple(meta[k][:group_size]))
            for k in range(num_groups)
        ]

    def grade(self, group, index, completion):
        reward = LOOP_REWARDS[group.problem_id][index]
        info = {"hidden_digit": INFO_HIDDEN[index]} if group.problem_id == "p0" else {"answered": True}
        return Grade(reward, reward == 1.0, info)

    def step_metrics(self, groups, grades, lengths):
        return {}


def _fake_trainer(objective: ObjectiveSettings):
    settings = TrainerSettings(
        objective,
        RolloutConfig(prompts_per_step=2, group_size=4, max_new_tokens=8),
        TrainConfig(steps=1, device="cpu", reference_kl=False),
        0,
    )
    tr = Trainer(FakeLM(), FakeTask(), FakeBackend(), 0, settings)
    seen = []
    update = tr.update

    def spy(step, t, advantages, mask, *precomputed):
        seen.append(advantages.tolist())
        return update(step, t, advantages, mask, *precomputed)

    tr.update = spy
    return tr, seen


def test_the_loop_reads_each_stratum_from_the_grade_then_the_meta():
    """p0 by info [F, T, F, T]: clean {1, 1} flat → 0, hidden {0, 1} → ∓1/√2. (By its meta [T, T, F, F] it would be
    hidden {1, 0} → ±1/√2 at indices 0, 1 and clean {1, 1} → 0.) p1 by meta [F, F, T, T]: clean {1, 0} → ±1/√2,
    hidden {0, 0} → 0. GRPO would give p0 [0.5, −1.5, 0.5, 0.5] and p1 [1.5, −0.5, −0.5, −0.5]."""
    tr, seen = _fake_trainer(ObjectiveSettings.preset("grpo", max_len=8, **STRAT))
    metrics = tr.step(1)
    ((adv,),) = [seen]
    assert adv == pytest.approx([0.0, -R2, 0.0, R2, R2, -R2, 0.0, 0.0], abs=1e-5)
    assert metrics[M.ADV_ZERO_FRAC] == pytest.approx(4 / 8)


def test_a_stratum_the_task_does_not_report_fails_the_first_step_in_one_line():
    tr, _ = _fake_trainer(ObjectiveSettings.preset("grpo", advantage="stratified", stratum_key="nope"))
    with pytest.raises(ValueError, match=r"^objective.stratum_key: task fake reports no 'nope' per sample") as error:
        tr.step(1)
    assert "(it reports: hidden_digit)" in str(error.value) and "\n" not in str(error.value)


def _toy_samples(config: ToyAdditionConfig, groups: int = 3, width: int = 5) -> Samples:
    task = ToyAdditionTask(config)
    drawn = task.sample_groups(np.random.default_rng(0), groups, width)
    grades = [task.grade(g, j, f">{g.answer};" if j % 2 else ">0;") for g in drawn for j in range(width)]
    n = groups * width
    empty = torch.zeros(n)
    return Samples(drawn, [[]] * n, [[]] * n, empty.bool(), empty, grades, [""] * n, [1] * n, [[]] * n)


def test_the_toy_reports_the_keys_its_config_names_and_its_labels_follow_the_hidden_digit():
    for config in (ToyAdditionConfig(hide_prob=0.5), ToyAdditionConfig(hide_prob=0.5, random_reward=0.5)):
        s = _toy_samples(config)
        reported = {k for g in s.grades for k in g.info} | {k for g in s.groups for m in g.meta for k in m}
        assert tuple(sorted(reported)) == config.reported_keys
    s = _toy_samples(ToyAdditionConfig(hide_prob=0.5))
    labels = stratum_labels(s, "hidden_digit", "toy_addition")
    hidden = torch.tensor([[m["hidden_digit"] for m in g.meta] for g in s.groups])
    assert labels.shape == (3, 5) and 0 < hidden.sum() < 15
    assert torch.equal(labels[:, :, None] == labels[:, None, :], hidden[:, :, None] == hidden[:, None, :])
    answered = stratum_labels(s, "answered", "toy_addition")  # every response here answers: one stratum
    assert torch.equal(answered, torch.zeros(3, 5, dtype=torch.long))


# ---- settings and config: one-line errors ----------------------------------------------------------------------------
def test_stratum_settings_are_one_line_errors_naming_the_key():
    with pytest.raises(ValidationError, match=r"stratum_key is set exactly when advantage is stratified"):
        ObjectiveSettings.preset("grpo", advantage="stratified")
    with pytest.raises(ValidationError, match=r"stratum_key is set exactly when advantage is stratified"):
        ObjectiveSettings.preset("grpo", stratum_key="hidden_digit")
    with pytest.raises(ValidationError, match=r"stratum_blend \(0.5\) needs advantage stratified"):
        ObjectiveSettings.preset("grpo", stratum_blend=0.5)
    with pytest.raises(ValidationError, match="stratum_blend"):
        ObjectiveSettings.preset("grpo", **STRAT, stratum_blend=1.5)
    base = {"preset": "grpo", "advantage": "stratified"}
    with pytest.raises(
        ValidationError,
        match=r"objective.stratum_key: 'nope' is not a fact task toy_addition reports per sample \(it reports: "
        r"answered, filler_tokens, hidden_digit, hidden_operand, hidden_place\)",
    ):
        RunConfig.model_validate({"objective": {**base, "stratum_key": "nope"}})
    with pytest.raises(ValidationError, match="objective.stratum_key: 'random_reward'"):
        RunConfig.model_validate({"objective": {**base, "stratum_key": "random_reward"}})
    assert RunConfig.model_validate(
        {"objective": {**base, "stratum_key": "random_reward"}, "task": {"toy_addition": {"random_reward": 0.5}}}
    )
    run = RunConfig.model_validate({"objective": {**base, "stratum_key": "hidden_digit", "stratum_blend": 0.8}})
    assert run.objective.stratum_blend == 0.8
    with pytest.raises(
        ValidationError, match=r"train.engine: trl cannot express .*objective.stratum_key: hidden_digit"
    ):
        RunConfig.model_validate({"objective": {**base, "stratum_key": "hidden_digit"}, "train": {"engine": "trl"}})


def test_the_defaults_leave_every_job_id_as_it_was():
    """A run that does not stratify dumps neither field into its id; one that does, both that differ."""
    plain = RunConfig.model_validate({"objective": {"preset": "grpo"}})
    assert "stratum_key" not in str(plain.identity()) and "stratum_blend" not in str(plain.identity())
    on = RunConfig.model_validate({"objective": {"preset": "grpo", **STRAT}})
    assert on.identity()["objective"]["stratum_key"] == "hidden_digit" and on.config_hash != plain.config_hash
