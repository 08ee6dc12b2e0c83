"""The advantage-side variants of the literature: REINFORCE++'s global normalisation (batch_norm,
group_mean_batch_norm), Lite PPO (a preset), NGRPO (the ngrpo estimator and preset) and BNPO (bnpo), each against
numbers worked out by hand, split into micro-batches, and against GRPO on the same tensors."""

import math
import re

import numpy as np
import pytest
import torch

from harness.config.errors import ConfigError
from harness.config.run_config import LATER_FIELDS, load_run_config
from harness.config.trl_args import grpo_args, trl_problems
from tests.fake_loop import UPDATE_LENGTHS, assert_splits_agree, split_update
from tests.test_trl_engine import EXPRESSIBLE, TOY_RUN
from trainer.objective import (
    ADVANTAGES,
    Normaliser,
    ObjectiveSettings,
    TokenProbabilities,
    compute_advantages,
    policy_loss,
    token_logprobs,
)
from trainer.objective.advantages import bnpo_beta_params

T = lambda *rows: torch.tensor(rows, dtype=torch.float64)  # noqa: E731
REWARDS = T([1, 0, 0, 1], [1, 1, 1, 1], [0, 0, 0, 1])
UNIT = (0.0, 1.0)
NEW = (
    "passk",
    "rloo",
    "opo",
    "batch_norm",
    "group_mean_batch_norm",
    "ngrpo",
    "bnpo",
    "group_median_mad",
    "baseline_free",
    "batch_norm_tokens",
    "group_mean_batch_norm_tokens",
    "batch_mean",
    "batch_mean_tokens",
    "group_mean_batch_mean_tokens",
    "optimal_token_baseline",
)


def _settings(advantage: str, **over) -> ObjectiveSettings:
    if advantage in ("ngrpo", "bnpo"):
        over.setdefault("reward_range", UNIT)
    return ObjectiveSettings.preset("grpo", advantage=advantage, **over)


# ---- REINFORCE++ (arXiv 2501.03262) --------------------------------------------------------
SD_REWARDS = math.sqrt(420 / 1584)  # Bessel std of the 12 rewards: 7 ones, 5 zeros (mean 7/12)
SD_CENTRED = math.sqrt(1.75 / 11)  # of the 12 group-centred values: 4 × 0.25² ... 3 × 0.25² + 0.75², sum 1.75


def test_rloo_by_hand():
    """Each response against the mean of the other three: 1 − 1/3 and 0 − 2/3 in a 2-of-4 group, 1 − 0 and 0 − 1/3
    in a 1-of-4 group; a flat group and a group of one get 0 (nothing to compare with)."""
    got = ADVANTAGES["rloo"](T([1, 0, 0, 1], [1, 1, 1, 1], [1, 0, 0, 0]), 0.0)
    third = 1 / 3
    expected = T([2 * third, -2 * third, -2 * third, 2 * third], [0, 0, 0, 0], [1, -third, -third, -third])
    torch.testing.assert_close(got, expected, rtol=0, atol=1e-15)
    assert ADVANTAGES["rloo"](T([0.7], [0.2]), 0.0).tolist() == [[0.0], [0.0]]
    assert torch.equal(ADVANTAGES["rloo"](T([0.5, 0.5, 0.5]), 0.0), torch.zeros(1, 3, dtype=torch.float64))
    continuous = T([0.2, 1.5, -0.4, 0.9, 0.0])
    loo = torch.stack([continuous[0, i] - (continuous.sum() - continuous[0, i]) / 4 for i in range(5)])[None]
    torch.testing.assert_close(ADVANTAGES["rloo"](continuous, 0.0), loo, rtol=0, atol=1e-15)


def test_opo_by_hand():
    """The baseline weighs each reward by its response's length: (10·1 + 3·0 + 7·0 + 1·1) / 21 = 11/21 in a 2-of-4
    group, so the long correct response and the short one get the same 10/21; a flat group and a group of one get 0."""
    lengths = torch.tensor([[10, 3, 7, 1], [5, 5, 2, 9]])
    got = ADVANTAGES["opo"](T([1, 0, 0, 1], [1, 1, 1, 1]), 0.0, lengths)
    b = 11 / 21
    torch.testing.assert_close(got, T([1 - b, -b, -b, 1 - b], [0, 0, 0, 0]), rtol=0, atol=1e-15)
    equal = torch.full((1, 4), 6)
    torch.testing.assert_close(  # equal lengths: the plain group mean, Dr. GRPO's advantage
        ADVANTAGES["opo"](T([1, 0, 0, 1]), 0.0, equal), ADVANTAGES["group_mean"](T([1, 0, 0, 1]), 0.0), rtol=0, atol=0
    )
    assert ADVANTAGES["opo"](T([0.3], [0.9]), 0.0, torch.tensor([[4], [2]])).tolist() == [[0.0], [0.0]]


def test_passk_by_hand():
    """Only a group's best response moves, by its lead over the runner-up over the group's std: one correct of four
    gets 1 / (std of [1, 0, 0, 0] = 1/2) = 2; two correct tie at the top and get 0, as a flat group and a group of one;
    graded rewards 0.9 over 0.5 (std of [0.5, 0.9, 0.2] ≈ 0.351) give 0.4 / 0.351 to the 0.9 alone."""
    got = ADVANTAGES["passk"](T([0, 1, 0, 0], [1, 0, 0, 1], [1, 1, 1, 1]), 0.0)
    torch.testing.assert_close(got, T([0, 2, 0, 0], [0, 0, 0, 0], [0, 0, 0, 0]), rtol=0, atol=1e-15)
    graded = T([0.5, 0.9, 0.2])
    lead = 0.4 / float(graded.std())
    torch.testing.assert_close(ADVANTAGES["passk"](graded, 0.0), T([0, lead, 0]), rtol=0, atol=1e-15)
    assert ADVANTAGES["passk"](T([0.3], [1.0]), 0.0).tolist() == [[0.0], [0.0]]


def test_batch_norm_by_hand():
    hi, lo = (5 / 12) / SD_REWARDS, (-7 / 12) / SD_REWARDS
    torch.testing.assert_close(
        ADVANTAGES["batch_norm"](REWARDS, 0.0), T([hi, lo, lo, hi], [hi, hi, hi, hi], [lo, lo, lo, hi])
    )
    # G = 1, REINFORCE++ proper (k = 1): mean 0.5, Bessel std sqrt(1/3)
    h = 0.5 / math.sqrt(1 / 3)
    torch.testing.assert_close(ADVANTAGES["batch_norm"](T([1], [0], [0], [1]), 0.0), T([h], [-h], [-h], [h]))
    # ε enters the denominator: std of [0, 1] is sqrt(1/2)
    torch.testing.assert_close(ADVANTAGES["batch_norm"](T([0, 1]), 0.1), T([-0.5, 0.5]) / (math.sqrt(0.5) + 0.1))


def test_batch_norm_gives_flat_groups_a_signal_but_a_flat_batch_none():
    adv = ADVANTAGES["batch_norm"](T([1, 1], [0, 0]), 0.0)
    h = 0.5 / math.sqrt(1 / 3)
    torch.testing.assert_close(adv, T([h, h], [-h, -h]))
    for flat in (T([0.3, 0.3], [0.3, 0.3]), T([1.0]), T([0, 0, 0])):
        assert torch.equal(ADVANTAGES["batch_norm"](flat, 0.0), torch.zeros_like(flat))


def test_group_mean_batch_norm_by_hand_and_unlike_batch_std():
    s = 1 / SD_CENTRED
    expected = T([0.5 * s, -0.5 * s, -0.5 * s, 0.5 * s], [0, 0, 0, 0], [-0.25 * s, -0.25 * s, -0.25 * s, 0.75 * s])
    torch.testing.assert_close(ADVANTAGES["group_mean_batch_norm"](REWARDS, 0.0), expected)
    # batch_std (Lite PPO, TRL "batch") divides the same centred values by the std of the raw rewards instead
    torch.testing.assert_close(ADVANTAGES["batch_std"](REWARDS, 0.0), expected * SD_CENTRED / SD_REWARDS)
    for flat in (T([0.3, 0.3, 0.3]), T([0, 0], [1, 1])):
        assert torch.equal(ADVANTAGES["group_mean_batch_norm"](flat, 0.0), torch.zeros_like(flat))


# ---- NGRPO (arXiv 2509.18851) --------------------------------------------------------------
def test_ngrpo_reproduces_the_papers_case():
    """The paper's G = 8 group with one correct response: GRPO 2.47 / −0.35, NGRPO 1.76 / −0.50. With the virtual
    sample the 9 rewards are two ones and seven zeros: mean 2/9, Bessel variance (2·(7/9)² + 7·(2/9)²)/8 = 126/648."""
    group = T([1, 0, 0, 0, 0, 0, 0, 0])
    sd = math.sqrt(126 / 648)
    adv = ADVANTAGES["ngrpo"](group, 0.0, UNIT)
    torch.testing.assert_close(adv, T([(7 / 9) / sd] + [(-2 / 9) / sd] * 7))
    assert adv[0, 0].item() == pytest.approx(1.76, abs=0.005) and adv[0, 1].item() == pytest.approx(-0.50, abs=0.005)
    grpo = ADVANTAGES["group_std"](group, 0.0)
    assert grpo[0, 0].item() == pytest.approx(2.47, abs=0.005) and grpo[0, 1].item() == pytest.approx(-0.35, abs=0.005)


def test_ngrpo_gives_all_wrong_groups_a_negative_advantage():
    # 8 zeros and the virtual 1: mean 1/9, Bessel variance (8/81 + 64/81)/8 = 1/9, so A = −(1/9)/(1/3) = −1/3
    adv = ADVANTAGES["ngrpo"](T([0] * 8, [1] * 8), 0.0, UNIT)
    torch.testing.assert_close(adv, T([-1 / 3] * 8, [0] * 8))  # all at r_max: nothing to calibrate against
    # G = 1: {0, 1} has mean 0.5 and std sqrt(1/2)
    torch.testing.assert_close(ADVANTAGES["ngrpo"](T([0], [1]), 0.0, UNIT), T([-0.5 / math.sqrt(0.5)], [0]))
    # real rewards within [−1, 2]: {0.5, 2, 2} has mean 1.5 and Bessel variance (1 + 0.25 + 0.25)/2 = 0.75; ε 0.1
    torch.testing.assert_close(
        ADVANTAGES["ngrpo"](T([0.5, 2.0]), 0.1, (-1.0, 2.0)), T([-1.0, 0.5]) / (math.sqrt(0.75) + 0.1)
    )


def test_ngrpo_and_bnpo_refuse_a_reward_outside_the_range():
    for name in ("ngrpo", "bnpo"):
        with pytest.raises(ValueError, match=r"^reward_range: a reward of 1.5 lies outside \[0, 1\]"):
            ADVANTAGES[name](T([0, 1.5]), 0.0, UNIT)


def test_ngrpos_asymmetric_clip_is_epsilon_low_and_high():
    """PPO's clip lets only 1 + ε_high bind at A > 0 and only 1 − ε_low at A < 0, so NGRPO's looser positive and
    stricter negative clip is ε_low 0.16, ε_high 0.24. Token-mean over 2 tokens, gradient −A·r/2 when unclipped:
    r = 0.82 at A = −1 is clipped by 0.84 (not by 0.8), r = 1.22 at A = +1 by 1.2 (not by 1.24)."""
    old = torch.zeros(2, 1)
    logp = torch.log(T([0.82], [1.22])).requires_grad_(True)
    adv, mask = T(-1.0, 1.0), torch.ones(2, 1)
    grads = []
    for s in (ObjectiveSettings.preset("ngrpo"), ObjectiveSettings.preset("ngrpo", clip_low=0.2, clip_high=0.2)):
        logp.grad = None
        policy_loss(logp, old, adv, mask, s).loss.backward()
        grads.append(logp.grad.clone())
    torch.testing.assert_close(grads[0], T([0.0], [-1.22 / 2]))
    torch.testing.assert_close(grads[1], T([0.82 / 2], [0.0]))


# ---- BNPO (arXiv 2506.02864) ---------------------------------------------------------------
def test_bnpo_with_fixed_parameters_is_reinforce_and_grpo():
    # (1, 1): the uniform density, so A = R − p, the group baseline alone
    torch.testing.assert_close(
        ADVANTAGES["bnpo"](REWARDS, 0.0, UNIT, (1.0, 1.0)), ADVANTAGES["group_mean"](REWARDS, 0.0)
    )
    # (3/2, 3/2): f(p) = (8/π)·sqrt(p(1 − p)), so A = (π/8)·(R − p)/sqrt(p(1 − p)); p = 0.5 and 0.25
    q, r = math.pi / 8, math.pi / 8 / math.sqrt(0.1875)
    expected = T([q, -q, -q, q], [0, 0, 0, 0], [-0.25 * r, -0.25 * r, -0.25 * r, 0.75 * r])
    torch.testing.assert_close(ADVANTAGES["bnpo"](REWARDS, 0.0, UNIT, (1.5, 1.5)), expected)


def test_bnpo_parameters_follow_the_success_rate_by_hand():
    """p = (0.5, 1, 0.25): μ = 7/12, σ² = (1 + 25 + 16)/144/2 = 7/48, k = μ(1 − μ)/σ² − 1 = (35/144)/(7/48) − 1 = 2/3,
    a = 7/18, b = 5/18, so (α, β) = (1 + 7/54, 1 + 5/54) = (61/54, 59/54)."""
    alpha, beta = bnpo_beta_params(T(0.5, 1.0, 0.25))
    assert (alpha, beta) == pytest.approx((61 / 54, 59 / 54), rel=1e-12)
    density = lambda p: torch.distributions.Beta(T(61 / 54), T(59 / 54)).log_prob(T(p)).exp().item()  # noqa: E731
    d1, d3 = density(0.5), density(0.25)
    expected = T([0.5 / d1, -0.5 / d1, -0.5 / d1, 0.5 / d1], [0, 0, 0, 0], [-0.25 / d3] * 3 + [0.75 / d3])
    torch.testing.assert_close(ADVANTAGES["bnpo"](REWARDS, 0.0, UNIT), expected)


def test_bnpo_parameters_recover_the_beta_of_the_success_rates():
    """Success rates drawn from Beta(2, 4): the rule gives (1 + 2/3, 1 + 4/3)."""
    p = torch.from_numpy(np.random.default_rng(0).beta(2.0, 4.0, 200_000))
    assert bnpo_beta_params(p) == pytest.approx((1 + 2 / 3, 1 + 4 / 3), abs=0.03)


@pytest.mark.parametrize(
    "p",
    [T(0.25), T(0.5, 0.5, 0.5), T(0.0, 1.0)],  # one group; no spread; σ² = 0.5 ≥ μ(1 − μ) = 0.25
)
def test_bnpo_parameters_fall_back_to_uniform_where_no_beta_fits(p):
    assert bnpo_beta_params(p) == (1.0, 1.0)


def test_bnpo_maps_the_reward_range_onto_the_unit_interval_and_zeroes_flat_groups():
    # rewards in [−1, 1]: −1 → 0, 1 → 1; p = 0.5; with (1, 1), A = R̃ − p = ±0.5
    adv = ADVANTAGES["bnpo"](T([1, -1], [1, 1], [-1, -1]), 0.0, (-1.0, 1.0), (1.0, 1.0))
    torch.testing.assert_close(adv, T([0.5, -0.5], [0, 0], [0, 0]))
    # p at 0 or 1 makes f 0 or ∞ for α, β ≠ 1: flat groups still get exactly 0
    for params in (None, (3.0, 0.5), (0.5, 3.0)):
        adv = ADVANTAGES["bnpo"](T([0, 0, 0], [1, 1, 1], [0, 1, 1]), 0.0, UNIT, params)
        assert torch.equal(adv[:2], torch.zeros(2, 3)) and torch.isfinite(adv).all()


# ---- settings: presets, parameters, errors ---------------------------------------------------
def test_lite_ppo_is_batch_std_with_the_token_mean():
    s = ObjectiveSettings.preset("lite_ppo")
    grpo = ObjectiveSettings.preset("grpo")
    changed = {k for k in type(s).model_fields if getattr(s, k) != getattr(grpo, k)}
    assert changed == {"advantage", "aggregation"} and (s.advantage, s.aggregation) == ("batch_std", "token_mean")


# ---- MC-GRPO as released (arXiv 2601.22582) --------------------------------------------------
def test_mc_grpo_by_hand():
    """Median and MAD (lower medians), ε, then each group's non-zero advantages × n / #non-zero."""
    got = ADVANTAGES["group_median_mad"](T([1, 0, 0, 0, 0], [1, 1, 0, 0, 0], [0, 0, 0, 0, 0]), 1e-3)
    torch.testing.assert_close(got, T([5000, 0, 0, 0, 0], [2500, 2500, 0, 0, 0], [0, 0, 0, 0, 0]), rtol=0, atol=1e-9)
    # median 0.5; |R - 0.5| = .3 0 .6 .4 .2, MAD 0.3; A' = (R - 0.5) / 0.301; 4 of 5 non-zero: × 5/4
    r = T([0.2, 0.5, 1.1, 0.9, 0.3])
    want = (r - 0.5) / 0.301 * 1.25
    want[0, 1] = 0.0
    torch.testing.assert_close(ADVANTAGES["group_median_mad"](r, 1e-3), want, rtol=0, atol=1e-12)
    # even n: the lower middle value, as torch.median: median of [0, 0, 1, 1] is 0, MAD of [0, 0, 1, 1] is 0
    torch.testing.assert_close(
        ADVANTAGES["group_median_mad"](T([0, 0, 1, 1]), 1e-3), T([0, 0, 2000, 2000]), rtol=0, atol=1e-9
    )


def test_the_mc_grpo_preset_is_the_authors_estimator_and_the_median_alone_stays_an_ablation():
    s = ObjectiveSettings.preset("mc_grpo")
    assert (s.advantage, s.adv_eps, s.median_pivot, s.aggregation) == (
        "group_median_mad",
        1e-3,
        True,
        "seq_mean_token_mean",
    )
    assert ObjectiveSettings.preset("grpo", advantage="group_median", median_pivot=True).median_pivot
    with pytest.raises(ValueError, match="median_pivot: true needs advantage 'group_median_mad' or 'group_median'"):
        ObjectiveSettings.preset("grpo", median_pivot=True)
    with pytest.raises(ValueError, match="adv_eps must be above 0 for advantage group_median_mad"):
        ObjectiveSettings.preset("mc_grpo", adv_eps=0.0)


# ---- negative-sample reinforcement as released (arXiv 2506.01347) -----------------------------------------
def test_the_baseline_free_advantage_is_plus_and_minus_one_and_refuses_graded_rewards():
    torch.testing.assert_close(
        ADVANTAGES["baseline_free"](REWARDS, 0.0), T([1, -1, -1, 1], [1, 1, 1, 1], [-1, -1, -1, 1]), rtol=0, atol=0
    )
    assert ADVANTAGES["baseline_free"](T([0, 0, 0]), 0.0).tolist() == [[-1, -1, -1]]  # an all-wrong group: −1, not 0
    with pytest.raises(ValueError, match="advantage baseline_free needs 0/1 rewards .correct or not., got 0.5"):
        ADVANTAGES["baseline_free"](T([1, 0.5, 0]), 0.0)


def test_nsr_drops_the_correct_responses_and_w_reinforce_weighs_them_a_tenth():
    from trainer.objective.sampling import trained_samples

    nsr, w = ObjectiveSettings.preset("nsr"), ObjectiveSettings.preset("w_reinforce")
    assert (nsr.advantage, nsr.drop_correct, nsr.positive_weight, nsr.aggregation) == (
        "baseline_free", True, None, "token_mean"
    )  # fmt: skip
    assert (w.advantage, w.drop_correct, w.positive_weight, w.aggregation) == (
        "baseline_free", False, 0.1, "token_mean"
    )  # fmt: skip
    correct = REWARDS.bool()
    assert trained_samples(REWARDS, nsr, correct).tolist() == (~correct).tolist()
    assert trained_samples(REWARDS, w, correct).all()
    with pytest.raises(ValueError, match="drop_correct needs each response's correctness"):
        trained_samples(REWARDS, nsr)
    # W-REINFORCE's loss: λ = 0.1 on the +1 of a correct response is the authors' advantage of +0.1 (PPO's clipped
    # surrogate is linear in A for A of one sign)
    logits, tokens, mask, old_logp = _batch()
    adv = ADVANTAGES["baseline_free"](GROUP_REWARDS, 0.0).flatten()
    norm = Normaliser.from_mask(mask, None)
    lp = token_logprobs(logits, tokens)
    ours = policy_loss(lp, old_logp, adv, mask, w, norm=norm).loss
    theirs = policy_loss(lp, old_logp, torch.where(adv > 0, adv * 0.1, adv), mask,
                         ObjectiveSettings.preset("w_reinforce", positive_weight=None), norm=norm).loss  # fmt: skip
    assert abs(ours.item() - theirs.item()) < 1e-12


def test_ngrpo_as_released_scales_a_lone_response_and_drops_all_correct_groups():
    from trainer.objective.sampling import dynamic_sampling_filter

    lone = T([1.0], [0.0])
    # virtual: {R, 1}: R = 1 is all at the maximum, 0; R = 0 against {0, 1}: (0 − ½)/(√½ + ε)
    torch.testing.assert_close(
        ADVANTAGES["ngrpo"](lone, 0.0, UNIT), T([0.0], [-0.5 / math.sqrt(0.5)]), rtol=0, atol=1e-12
    )
    torch.testing.assert_close(ADVANTAGES["ngrpo"](lone, 1e-6, UNIT, "unit"), T([1 / (1 + 1e-6)], [0.0]))
    s = ObjectiveSettings.preset("ngrpo")
    assert (s.ngrpo_single, s.dynamic_sampling, s.dynamic_sampling_key, s.dynamic_sampling_drop) == (
        "unit", True, "correct", "all_best"
    )  # fmt: skip
    f = dynamic_sampling_filter(REWARDS, drop="all_best")  # mixed, all correct, mixed
    assert f.keep.tolist() == [True, False, True] and f.dropped == 1 and f.dropped_all_max == 1
    wrong = dynamic_sampling_filter(T([0, 0, 0, 0], [1, 0, 0, 0]), drop="all_best")
    assert wrong.keep.tolist() == [True, True]  # an all-wrong group stays: it carries NGRPO's signal
    assert dynamic_sampling_filter(T([0, 0, 0, 0], [1, 0, 0, 0])).keep.tolist() == [False, True]  # DAPO's


def test_reinforce_pp_whitens_over_tokens_as_verl_by_hand():
    """Two responses of lengths 3 and 1, rewards 1 and 0: N = 4 tokens, mean 3/4 (over N + 1e-8), variance
    (3·(1/4)² + (3/4)²)/4 · 4/3 = 1/4, so A = (R − 3/4)/√(1/4 + 1e-8): +1/2 and −3/2, nearly."""
    got = ADVANTAGES["batch_norm_tokens"](T([1.0, 0.0]), 0.0, torch.tensor([[3, 1]]))
    n = 4.0
    mean = 3.0 / (n + 1e-8)
    var = (3 * (1 - mean) ** 2 + (0 - mean) ** 2) / (n + 1e-8) * n / (n - 1)
    want = T([(1 - mean) / math.sqrt(var + 1e-8), (0 - mean) / math.sqrt(var + 1e-8)])
    torch.testing.assert_close(got, want, rtol=0, atol=1e-12)
    # an all-equal group of unequal lengths keeps a signal (verl's), where per-response whitening gives it none
    flat = ADVANTAGES["group_mean_batch_norm_tokens"](
        T([1, 0, 0, 1], [1, 1, 1, 1]), 0.0, torch.tensor([[9, 1, 1, 1], [5, 5, 1, 1]])
    )
    assert (
        flat[1].abs().max() > 0.1
        and (ADVANTAGES["group_mean_batch_norm"](T([1, 0, 0, 1], [1, 1, 1, 1]), 0.0)[1] == 0).all()
    )
    with pytest.raises(ValueError, match="needs more than one response token"):
        ADVANTAGES["batch_norm_tokens"](T([1.0]), 0.0, torch.tensor([[1]]))
    with pytest.raises(ValueError, match="whitens over tokens: it needs each response's length"):
        compute_advantages(REWARDS, ObjectiveSettings.preset("reinforce_pp"))
    assert ObjectiveSettings.preset("reinforce_pp_baseline").advantage == "group_mean_batch_norm_tokens"


def test_the_unscaled_batch_baselines_by_hand():
    """FlashREINFORCE's batch mean and OpenRLHF's no_std_norm token means. Rewards [[1, 0], [1, 1]], lengths
    [[3, 1], [2, 2]]: the batch mean 3/4; the token mean (3 + 0 + 2 + 2)/8 = 7/8; the group-centred values
    [[1/2, −1/2], [0, 0]] have token mean (3/2 − 1/2)/8 = 1/8."""
    rewards, lengths = T([1, 0], [1, 1]), torch.tensor([[3, 1], [2, 2]])
    assert ADVANTAGES["batch_mean"](rewards, 0.0).tolist() == [[0.25, -0.75], [0.25, 0.25]]
    assert ADVANTAGES["batch_mean_tokens"](rewards, 0.0, lengths).tolist() == [[0.125, -0.875], [0.125, 0.125]]
    got = ADVANTAGES["group_mean_batch_mean_tokens"](rewards, 0.0, lengths)
    assert got.tolist() == [[0.375, -0.625], [-0.125, -0.125]]  # the flat group gets −1/8: no scale, no zeroing
    assert ADVANTAGES["batch_mean"](T([0.3, 0.3], [0.3, 0.3]), 0.0).abs().max() < 1e-15  # a flat batch: 0
    # one response per prompt: OpenRLHF's group mean cancels it, the two batch baselines do not
    alone = ADVANTAGES["group_mean_batch_mean_tokens"](T([1], [0]), 0.0, torch.tensor([[2], [3]]))
    assert alone.tolist() == [[0.0], [0.0]]
    assert ADVANTAGES["batch_mean_tokens"](T([1], [0]), 0.0, torch.tensor([[2], [3]])).tolist() == [[0.6], [-0.4]]


def test_bnpo_caps_its_weight_as_the_authors_do():
    """100 groups at p = ½ and one at p = ⅛ (8 responses each): the Beta fit puts almost no density at ⅛, so its
    correct response's weight is 4.4e9 uncapped; the authors' cap of 1e6 gives (1 − ⅛)·1e6 = 8.75e5."""
    half = [1, 1, 1, 1, 0, 0, 0, 0]
    rewards = T(*([half] * 100), [1, 0, 0, 0, 0, 0, 0, 0])
    free = ADVANTAGES["bnpo"](rewards, 0.0, UNIT)
    capped = ADVANTAGES["bnpo"](rewards, 0.0, UNIT, None, 1e6)
    assert free[-1, 0].item() > 4e9
    assert capped[-1, 0].item() == pytest.approx(8.75e5, rel=1e-12)
    torch.testing.assert_close(capped[:-1], free[:-1])  # the groups at ½ are far below the cap
    s = ObjectiveSettings.preset("bnpo")
    assert (s.bnpo_max_weight, s.aggregation, s.clip_high, s.dual_clip) == (1e6, "seq_mean_token_sum", 0.28, 10.0)


def test_compute_advantages_passes_the_estimators_parameters():
    zeros = T([0, 0, 0, 0, 0, 0, 0, 0])
    torch.testing.assert_close(compute_advantages(zeros, ObjectiveSettings.preset("ngrpo", adv_eps=0.0)), zeros - 1 / 3)
    s = _settings("bnpo", bnpo_params=(1.5, 1.5))
    torch.testing.assert_close(compute_advantages(REWARDS, s), ADVANTAGES["bnpo"](REWARDS, 0.0, UNIT, (1.5, 1.5)))


BETA_RANGE = "bnpo_params must be two Beta parameters > 0"


@pytest.mark.parametrize(
    "over, message",
    [
        ({"advantage": "ngrpo"}, "reward_range is set exactly when advantage is ngrpo or bnpo"),
        ({"advantage": "bnpo"}, "reward_range is set exactly when advantage is ngrpo or bnpo"),
        ({"reward_range": (0.0, 1.0)}, "reward_range is set exactly when advantage is ngrpo or bnpo"),
        ({"advantage": "ngrpo", "reward_range": (1.0, 0.0)}, "reward_range must be (low, high) with low < high"),
        ({"advantage": "ngrpo", "reward_range": (0.0, math.nan)}, "reward_range.1"),
        ({"advantage": "ngrpo", "reward_range": (0.0, math.inf)}, "reward_range.1"),
        ({"advantage": "ngrpo", "reward_range": (0.0, "one")}, "reward_range.1"),
        ({"advantage": "bnpo", "reward_range": UNIT, "bnpo_params": (0.0, 1.0)}, BETA_RANGE),
        ({"advantage": "bnpo", "reward_range": UNIT, "bnpo_params": (1.0, -2.0)}, BETA_RANGE),
        ({"advantage": "bnpo", "reward_range": UNIT, "bnpo_params": (1.0, math.inf)}, "bnpo_params.1"),
        ({"advantage": "ngrpo", "reward_range": UNIT, "bnpo_params": (1.0, 1.0)}, "bnpo_params needs advantage 'bnpo'"),
        ({"bnpo_max_weight": 1e6}, "bnpo_max_weight needs advantage 'bnpo'"),
        ({"ngrpo_single": "unit"}, "ngrpo_single needs advantage 'ngrpo'"),
        ({"dynamic_sampling_drop": "all_best"}, "dynamic_sampling_drop: all_best needs dynamic_sampling: true"),
        ({"advantage": "ngrpo", "reward_range": UNIT, "ngrpo_single": "one"}, "ngrpo_single"),
        ({"advantage": "bnpo", "reward_range": UNIT, "bnpo_max_weight": 0.0}, "bnpo_max_weight"),
        ({"advantage": "bnpo", "reward_range": UNIT, "bnpo_max_weight": math.inf}, "bnpo_max_weight"),
    ],
)
def test_bad_parameters_are_errors_naming_the_key(over, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        ObjectiveSettings.preset("grpo", **over)


def test_the_new_fields_enter_a_job_id_only_when_set():
    assert LATER_FIELDS["objective.reward_range"] is None and LATER_FIELDS["objective.bnpo_params"] is None
    for name in ("grpo", "dr_grpo", "dapo", "gspo", "cispo", "sapo", "luspo", "vespo", "lite_ppo"):
        objective = load_run_config(TOY_RUN, [f"objective.preset={name}"]).identity()["objective"]
        assert not {"reward_range", "bnpo_params"} & set(objective), name
    objective = load_run_config(TOY_RUN, ["objective.preset=ngrpo"]).identity()["objective"]
    assert objective["reward_range"] == [0.0, 1.0] and "bnpo_params" not in objective


# ---- TRL: only lite_ppo maps ---------------------------------------------------------------
@pytest.mark.parametrize("advantage", NEW)
def test_trl_cannot_express_the_new_estimators_in_one_line(advantage):
    sets = [f"objective.advantage={advantage}"]
    if advantage in ("ngrpo", "bnpo"):
        sets.append("objective.reward_range=[0,1]")
    with pytest.raises(ConfigError) as err:
        load_run_config(TOY_RUN, ["train.engine=trl", *EXPRESSIBLE, *sets])
    message = str(err.value)
    assert "\n" not in message
    assert message.startswith(f"{TOY_RUN}: train.engine: trl cannot express objective.advantage: {advantage} ")
    cfg = load_run_config(TOY_RUN, [*EXPRESSIBLE, *sets])
    assert trl_problems(cfg.objective, cfg.rollout, cfg.train) == [
        f"objective.advantage: {advantage} (TRL's scale_rewards is group, batch or none)"
    ]


def test_lite_ppo_maps_to_trls_batch_scale_and_dapo_loss():
    cfg = load_run_config(TOY_RUN, ["train.engine=trl", *EXPRESSIBLE, "objective.preset=lite_ppo"])
    args = grpo_args(cfg.objective, cfg.rollout, cfg.train)
    assert (args["scale_rewards"], args["loss_type"], args["epsilon"], args["epsilon_high"]) == (
        "batch",
        "dapo",
        0.2,
        0.2,
    )


# ---- the update: split into micro-batches, and unlike GRPO's -----------------------------------
GROUP_REWARDS = T([1, 0, 0, 1], [0, 0, 0, 0])  # one mixed group, one all-wrong group: 8 responses
LENGTHS = UPDATE_LENGTHS


def _batch(seed: int = 0, b: int = 8, t: int = 10, v: int = 5):
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(b, t, v, generator=g, dtype=torch.float64).requires_grad_(True)
    tokens = torch.randint(0, v, (b, t), generator=g)
    lengths = LENGTHS
    mask = (torch.arange(t) < lengths[:, None]).long()
    old_logp = token_logprobs(logits.detach(), tokens) + 0.3 * torch.randn(b, t, generator=g, dtype=torch.float64)
    return logits, tokens, mask, old_logp


def _update(
    s: ObjectiveSettings, splits: int, rewards: torch.Tensor = GROUP_REWARDS
) -> tuple[float, dict[str, float], torch.Tensor]:
    """Loss, metrics and gradient of one batch, its advantages computed once over the whole batch (as the loop does),
    the loss accumulated over `splits` micro-batches with batch-wide counts."""
    adv = compute_advantages(rewards, s, lengths=LENGTHS.view(rewards.shape)).flatten()
    return split_update(s, adv, splits)


VARIANTS = {
    "rloo": lambda: _settings("rloo"),
    "passk": lambda: _settings("passk"),
    "opo": lambda: _settings("opo"),
    "batch_norm": lambda: _settings("batch_norm"),
    "group_mean_batch_norm": lambda: _settings("group_mean_batch_norm"),
    "ngrpo": lambda: _settings("ngrpo"),
    "bnpo": lambda: _settings("bnpo"),
    "bnpo_fixed": lambda: _settings("bnpo", bnpo_params=(2.0, 3.0)),
    "lite_ppo": lambda: ObjectiveSettings.preset("lite_ppo"),
    "ngrpo_preset": lambda: ObjectiveSettings.preset("ngrpo"),
    "group_median_mad": lambda: _settings("group_median_mad", adv_eps=1e-3),
    "w_reinforce": lambda: ObjectiveSettings.preset("w_reinforce"),
    "bnpo_preset": lambda: ObjectiveSettings.preset("bnpo"),
    "reinforce_pp": lambda: ObjectiveSettings.preset("reinforce_pp"),
    "reinforce_pp_baseline": lambda: ObjectiveSettings.preset("reinforce_pp_baseline"),
    "nsr": lambda: ObjectiveSettings.preset("nsr"),
}


REWARDS_FOR = {"passk": T([1, 0, 0, 0], [0, 0, 1, 0])}
"""A variant's own batch where GROUP_REWARDS gives it no signal (pass@k: two correct responses tie at the top)."""


@pytest.mark.parametrize("variant", VARIANTS)
def test_micro_batch_invariance(variant):
    s, rewards = VARIANTS[variant](), REWARDS_FOR.get(variant, GROUP_REWARDS)
    metrics = assert_splits_agree(lambda splits: _update(s, splits, rewards))
    assert metrics["policy/clip_frac"] > 0  # the check covers clipped tokens too


@pytest.mark.parametrize("variant", VARIANTS)
def test_each_variant_changes_the_update_from_grpos(variant):
    rewards = REWARDS_FOR.get(variant, GROUP_REWARDS)
    _, _, grpo = _update(ObjectiveSettings.preset("grpo"), 1, rewards)
    _, _, mine = _update(VARIANTS[variant](), 1, rewards)
    assert (mine - grpo).abs().max().item() > 1e-3


@pytest.mark.parametrize("name", ADVANTAGES.names())
def test_one_response_advantages_are_exactly_those_with_a_signal_at_one_response_per_prompt(name):
    """`ONE_RESPONSE_ADVANTAGES` (what `rollout.group_size: 1` accepts) against each estimator's own output: groups of
    one with mixed 0/1 rewards, lengths and greedy rewards."""
    from trainer.objective.registry import ONE_RESPONSE_ADVANTAGES

    rewards = torch.tensor([[1.0], [0.0], [1.0], [0.0], [0.0], [1.0]], dtype=torch.float64)
    extra = {
        "strata": torch.tensor([[0], [1], [0], [1], [0], [1]]),
        "lengths": torch.tensor([[3], [5], [2], [7], [4], [6]]),
        "greedy": torch.tensor([[0.0], [1.0], [1.0], [0.0], [1.0], [0.0]], dtype=torch.float64),
        "values": torch.tensor([[0.5], [0.25], [0.75], [0.5], [0.25], [0.75]], dtype=torch.float64),
    }
    width = int(extra["lengths"].max())
    mask = torch.arange(width) < extra["lengths"][..., None]
    token_probs = TokenProbabilities(  # every token at π = ½ of two equally likely tokens: 1 − 2π + Σπ² = ½
        torch.where(mask, -math.log(2), 0.0).double(), torch.where(mask, 0.5, 0.0).double()
    )
    meta = ADVANTAGES.meta(name)
    fields = {"reward_range": (0.0, 1.0)} if name in ("ngrpo", "bnpo") else {}
    fields |= {"stratum_key": "hidden_digit"} if name == "stratified" else {}
    fields |= {"reward_components": ("reward", "format")} if meta.get("needs_components") else {}
    s = ObjectiveSettings.preset(name if name in ("poise", "spo") else "grpo", advantage=name, **fields)
    kwargs = {
        "strata": extra["strata"] if meta.get("needs_strata") else None,
        "lengths": extra["lengths"],
        "greedy": extra["greedy"],
        "values": extra["values"],
        "components": torch.stack([rewards, 1 - rewards], dim=-1),
        "prompt_values": extra["values"],
        "token_probs": token_probs,
    }
    adv = compute_advantages(rewards, s, **kwargs)
    assert bool((adv != 0).any()) == (name in ONE_RESPONSE_ADVANTAGES)
