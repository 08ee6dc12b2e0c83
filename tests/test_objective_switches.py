"""Every switch against numbers worked out by hand (written here as literals)."""

import math

import pytest
import torch

from trainer import metric_names as M
from trainer.objective import (
    ADVANTAGES,
    AGGREGATIONS,
    KL_ESTIMATORS,
    RATIOS,
    Normaliser,
    ObjectiveSettings,
    advantage_metrics,
    clipped_surrogate,
    dynamic_sampling_filter,
    group_outcome_metrics,
    merge_metrics,
    overlong_filter,
    policy_loss,
    soft_overlong_penalty,
    token_entropy,
    token_logprobs,
)

T = lambda *rows: torch.tensor(rows, dtype=torch.float64)  # noqa: E731
REWARDS = T([1, 0, 0, 1], [1, 1, 1, 1], [0, 0, 0, 1])


# ---- advantages -------------------------------------------------------------------------
@pytest.mark.parametrize(
    "name, eps, expected",
    [
        # std of [1,0,0,1] with Bessel = sqrt(1/3); of [0,0,0,1] = 0.5
        (
            "group_std",
            0.0,
            [
                [0.8660254037844387, -0.8660254037844387, -0.8660254037844387, 0.8660254037844387],
                [0, 0, 0, 0],
                [-0.5, -0.5, -0.5, 1.5],
            ],
        ),
        (
            "group_std",
            0.1,
            [
                [0.7381705193654007, -0.7381705193654007, -0.7381705193654007, 0.7381705193654007],
                [0, 0, 0, 0],
                [-0.4166666666666667, -0.4166666666666667, -0.4166666666666667, 1.25],
            ],
        ),
        ("group_mean", 0.1, [[0.5, -0.5, -0.5, 0.5], [0, 0, 0, 0], [-0.25, -0.25, -0.25, 0.75]]),
        # one std over all 12 rewards (7 ones, 5 zeros): sqrt(420/1584) = 0.5149286505444373
        (
            "batch_std",
            0.0,
            [
                [0.9710083124552245, -0.9710083124552245, -0.9710083124552245, 0.9710083124552245],
                [0, 0, 0, 0],
                [-0.4855041562276122, -0.4855041562276122, -0.4855041562276122, 1.4565124686828366],
            ],
        ),
        # median of [1,0,0,1] is 0.5; of [0,0,0,1] is 0
        ("group_median", 0.0, [[0.5, -0.5, -0.5, 0.5], [0, 0, 0, 0], [0, 0, 0, 1]]),
    ],
)
def test_advantages_binary(name, eps, expected):
    torch.testing.assert_close(ADVANTAGES[name](REWARDS, eps), T(*expected), rtol=0, atol=1e-12)


def test_advantages_real_valued_rewards():
    r = T([0.2, 0.5, 1.1])  # mean 0.6, Bessel std 0.45825756949558405
    torch.testing.assert_close(
        ADVANTAGES["group_std"](r, 0.1), T([-0.7165151389911679, -0.17912878474779195, 0.8956439237389602])
    )
    torch.testing.assert_close(ADVANTAGES["group_median"](r, 0.0), T([-0.3, 0.0, 0.6]))
    torch.testing.assert_close(ADVANTAGES["group_median"](T([0, 1, 1]), 0.0), T([-1.0, 0.0, 0.0]))


@pytest.mark.parametrize("name", [n for n in ADVANTAGES.names() if ADVANTAGES.meta(n).get("zeroes_flat_groups", True)])
@pytest.mark.parametrize("rewards", [T([0.3, 0.3, 0.3]), T([1.0]), T([0.1] * 7), T([0, 0], [0, 0])])
def test_flat_groups_get_exactly_zero(name, rewards):
    """batch_norm and ngrpo, which give flat groups a signal by design, are tested in test_advantage_variants.py."""
    params = {"reward_range": (0.0, 1.0), "bnpo_params": None, "bnpo_max_weight": None, "stratum_blend": 0.5}
    kwargs = {k: params[k] for k in ADVANTAGES.meta(name).get("params", ())}
    if ADVANTAGES.meta(name).get("needs_strata"):  # strata of one response and of several: all flat
        kwargs["strata"] = torch.arange(rewards.numel()).view_as(rewards) % 2
    if ADVANTAGES.meta(name).get("needs_lengths"):  # unequal lengths: a length-weighted mean of equal rewards
        kwargs["lengths"] = torch.arange(1, rewards.numel() + 1).view_as(rewards) * 7
    adv = ADVANTAGES[name](rewards, 0.0, **kwargs)  # eps 0
    assert torch.equal(adv, torch.zeros_like(rewards))


def test_advantage_metrics():
    got = advantage_metrics(T([0.5, -0.5, 0.0, 0.0], [1.5, 0.0, -1.0, 0.0]))
    assert got == pytest.approx({M.ADV_MEAN: 0.0625, M.ADV_ABS_MEAN: 0.4375, M.ADV_ZERO_FRAC: 0.5})


# ---- importance ratios ------------------------------------------------------------------
LOGP_DIFF = T([math.log(2), math.log(8), 5.0])  # last position is padding
MASK = torch.tensor([[1, 1, 0]])


def test_token_ratio():
    got = RATIOS["token"](LOGP_DIFF, torch.zeros_like(LOGP_DIFF), MASK).exp()
    torch.testing.assert_close(got, T([2.0, 8.0, 1.0]))  # padding → log-ratio 0


@pytest.mark.parametrize("level", ["sequence", "sequence_token"])
def test_sequence_ratio_is_geometric_mean(level):
    got = RATIOS[level](LOGP_DIFF, torch.zeros_like(LOGP_DIFF), MASK).exp()
    assert got[0, 0].item() == pytest.approx(4.0) and got[0, 1].item() == pytest.approx(4.0)  # sqrt(2·8)


def test_sequence_vs_sequence_token_gradients():
    # d s_i/d logp_it = s_i/T_i for GSPO; s_i for GSPO-token (its value is still s_i).
    grads = {}
    for level in ("sequence", "sequence_token", "token"):
        logp = LOGP_DIFF.clone().requires_grad_(True)
        RATIOS[level](logp, torch.zeros_like(logp), MASK).exp()[0, :2].sum().backward()
        grads[level] = logp.grad[0].tolist()
    # sequence: both entries equal 4 and each depends on both tokens with weight 4/2
    assert grads["sequence"] == pytest.approx([4.0, 4.0, 0.0])
    assert grads["sequence_token"] == pytest.approx([4.0, 4.0, 0.0])
    assert grads["token"] == pytest.approx([2.0, 8.0, 0.0])
    logp = LOGP_DIFF.clone().requires_grad_(True)
    RATIOS["sequence"](logp, torch.zeros_like(logp), MASK).exp()[0, 0].backward()
    assert logp.grad[0].tolist() == pytest.approx([2.0, 2.0, 0.0])  # one s_i: 4/T_i per token
    logp = LOGP_DIFF.clone().requires_grad_(True)
    RATIOS["sequence_token"](logp, torch.zeros_like(logp), MASK).exp()[0, 0].backward()
    assert logp.grad[0].tolist() == pytest.approx([4.0, 0.0, 0.0])  # per-token: only its own token


# ---- clipping ---------------------------------------------------------------------------
R = T([0.5, 0.9, 1.0, 1.1, 1.25, 1.5])


@pytest.mark.parametrize(
    "adv, lo, hi, loss, low, high",
    [
        (1.0, 0.2, 0.28, [-0.5, -0.9, -1.0, -1.1, -1.25, -1.28], [0] * 6, [0, 0, 0, 0, 0, 1]),
        (1.0, 0.2, 0.2, [-0.5, -0.9, -1.0, -1.1, -1.2, -1.2], [0] * 6, [0, 0, 0, 0, 1, 1]),
        (-1.0, 0.2, 0.28, [0.8, 0.9, 1.0, 1.1, 1.25, 1.5], [1, 0, 0, 0, 0, 0], [0] * 6),
        (-2.0, 0.1, 0.28, [1.8, 1.8, 2.0, 2.2, 2.5, 3.0], [1, 0, 0, 0, 0, 0], [0] * 6),
        (0.0, 0.2, 0.2, [0.0] * 6, [0] * 6, [0] * 6),
    ],
)
def test_clipped_surrogate(adv, lo, hi, loss, low, high):
    log_r = R.log().requires_grad_(True)
    out = clipped_surrogate(log_r, torch.full((1,), adv, dtype=torch.float64), lo, hi)
    torch.testing.assert_close(out.loss, T(loss))
    assert out.clipped_low.int().tolist() == [low] and out.clipped_high.int().tolist() == [high]
    out.loss.sum().backward()
    # clipped tokens get no gradient; the others get dℓ/dlog r = −r·A
    expected = [0.0 if (lo or hi) else -r * adv for r, lo, hi in zip(R[0].tolist(), low, high)]
    assert log_r.grad[0].tolist() == pytest.approx(expected)


def test_dual_clip_caps_negative_advantage_loss():
    log_r = T([0.5, 2.0, 5.0], [0.5, 2.0, 5.0]).log().requires_grad_(True)
    adv = torch.tensor([-1.0, 2.0], dtype=torch.float64)
    out = clipped_surrogate(log_r, adv, 0.2, 0.2, dual_clip=3.0)
    # A=−1: max(r, clip r) = 0.8, 2, 5 → capped at 3; A=+2 is never dual-clipped
    torch.testing.assert_close(out.loss, T([0.8, 2.0, 3.0], [-1.0, -2.4, -2.4]))
    assert out.dual_clipped.int().tolist() == [[0, 0, 1], [0, 0, 0]]
    out.loss.sum().backward()
    torch.testing.assert_close(log_r.grad, T([0.0, 2.0, 0.0], [-1.0, 0.0, 0.0]))


def test_gspo_sequence_clipping_with_tiny_epsilon():
    s = ObjectiveSettings.preset("gspo")
    old = torch.zeros(4, 2, dtype=torch.float64)
    logp = T(
        [math.log(1.5), math.log(1 / 1.5)],  # token ratios 1.5, 0.67 but s = 1: not clipped
        [math.log(1.0005), math.log(1.0005)],  # s = 1.0005 > 1 + 4e-4 with A > 0: clipped high
        [math.log(0.9996), math.log(0.9996)],  # s = 0.9996 < 1 − 3e-4 with A < 0: clipped low
        [math.log(0.9996), math.log(0.9996)],  # same ratio with A > 0: not clipped
    ).requires_grad_(True)
    adv = torch.tensor([1.0, 1.0, -1.0, 1.0], dtype=torch.float64)
    out = policy_loss(logp, old, adv, torch.ones(4, 2), s)
    assert out.metrics[M.CLIP_FRAC_HIGH].item() == pytest.approx(0.25)
    assert out.metrics[M.CLIP_FRAC_LOW].item() == pytest.approx(0.25)
    assert out.metrics[M.CLIP_FRAC].item() == pytest.approx(0.5)
    out.loss.backward()
    # loss = mean over 4 sequences of −s_i·A_i (or the clipped constant); ∂s_i/∂logp_it = s_i/2
    g = logp.grad
    assert g[0].tolist() == pytest.approx([-1 / 8, -1 / 8])
    assert g[1].tolist() == [0.0, 0.0] and g[2].tolist() == [0.0, 0.0]
    assert g[3].tolist() == pytest.approx([-0.9996 / 8, -0.9996 / 8])
    assert out.loss.item() == pytest.approx(-(1.0 + 1.0004 - 0.9997 + 0.9996) / 4)
    # the same tokens under token-level GRPO clipping: the 1.5 ratio clips
    tok = policy_loss(logp.detach(), old, adv, torch.ones(4, 2), ObjectiveSettings.preset("grpo"))
    assert tok.metrics[M.CLIP_FRAC_HIGH].item() == pytest.approx(1 / 8)


# Three responses of 4, 2 and 3 loss tokens (9 in all), π_old = 1 everywhere; the padding holds ratios that would
# clip if it counted (5 with A > 0, 0.1 with A < 0). Clip range [0.8, 1.2].
CLIP_RATIOS = T([1.5, 1.0, 1.0, 1 / 1.5], [0.5, 0.5, 0.1, 0.1], [1.1, 1.1, 2.0, 5.0])
CLIP_MASK = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0], [1, 1, 1, 0]])
CLIP_ADV = torch.tensor([1.0, -1.0, 1.0], dtype=torch.float64)


@pytest.mark.parametrize(
    "ratio, low, high, tokens, seqs",
    [
        # token: r0's 1.5 (A > 0; its 0.67 is below 0.8 but A > 0), r1's two 0.5 (A < 0), r2's 2.0 (A > 0):
        # 4 of 9 tokens, 2 low and 2 high; each response has a clipped token: 3 of 3
        ("token", 2 / 9, 2 / 9, 4 / 9, 3 / 3),
        # sequence: s_0 = (1.5·1·1·(1/1.5))^(1/4) = 1, s_1 = 0.5 (A < 0: low), s_2 = (1.1·1.1·2)^(1/3) = 1.343
        # (A > 0: high): 2 of 3 responses, and their 2 + 3 = 5 of 9 tokens
        ("sequence", 1 / 3, 1 / 3, 5 / 9, 2 / 3),
        ("sequence_token", 1 / 3, 1 / 3, 5 / 9, 2 / 3),  # the same values as sequence
    ],
)
def test_clip_fractions_in_tokens_and_in_sequences(ratio, low, high, tokens, seqs):
    s = ObjectiveSettings.preset("grpo", ratio=ratio)
    logp = CLIP_RATIOS.log()
    out = policy_loss(logp, torch.zeros_like(logp), CLIP_ADV, CLIP_MASK, s)
    got = {k: v.item() for k, v in out.metrics.items()}
    assert got[M.CLIP_FRAC_LOW] == pytest.approx(low) and got[M.CLIP_FRAC_HIGH] == pytest.approx(high)
    assert got[M.CLIP_FRAC] == pytest.approx(low + high)  # the ratio's own unit: tokens, else sequences
    assert got[M.CLIP_FRAC_TOKENS] == pytest.approx(tokens) and got[M.CLIP_FRAC_SEQS] == pytest.approx(seqs)
    # split into micro-batches {r0, r1} and {r2} with the batch's counts: the contributions add up to the same
    norm = Normaliser.from_mask(CLIP_MASK)
    parts = [
        policy_loss(logp[rows], torch.zeros_like(logp[rows]), CLIP_ADV[rows], CLIP_MASK[rows], s, norm=norm).metrics
        for rows in (torch.tensor([0, 1]), torch.tensor([2]))
    ]
    assert merge_metrics(parts) == pytest.approx(got)


# ---- aggregation ------------------------------------------------------------------------
LOSS = T([1.0, 2.0, 3.0, float("nan")], [4.0, 5.0, 99.0, 99.0], [7.0, 7.0, 7.0, 7.0])
AGG_MASK = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0], [0, 0, 0, 0]])  # third response fully masked


# B counts every response, the fully masked one too (GRPO's 1/G, Dr. GRPO's B·L_max, TRL)
@pytest.mark.parametrize(
    "mode, expected, token_grads",
    [
        ("seq_mean_token_mean", (6 / 3 + 9 / 2) / 3, [1 / 9, 1 / 6]),  # 2.1666…; ∂/∂ℓ_it = 1/(B·T_i)
        ("token_mean", 15 / 5, [1 / 5, 1 / 5]),  # 3.0; 1/Σ T_i
        ("constant", 15 / (3 * 4), [1 / 12, 1 / 12]),  # 1.25 with L_max = 4; 1/(B·L_max)
        ("seq_mean_token_sum", 15 / 3, [1 / 3, 1 / 3]),  # 5.0; 1/B
        ("token_sum", 15.0, [1.0, 1.0]),  # verl's token-sum: no divisor
    ],
)
def test_aggregation_modes(mode, expected, token_grads):
    norm = Normaliser.from_mask(AGG_MASK, max_len=4)
    assert (norm.num_sequences, norm.num_tokens) == (3, 5)
    loss = LOSS.clone().requires_grad_(True)
    out = AGGREGATIONS[mode](loss, AGG_MASK, norm)
    assert out.item() == pytest.approx(expected)
    out.backward()
    g = loss.grad
    assert g[0, :3].tolist() == pytest.approx([token_grads[0]] * 3)
    assert g[1, :2].tolist() == pytest.approx([token_grads[1]] * 2)
    assert torch.equal(g[2], torch.zeros(4)) and g[0, 3] == 0 and g[1, 2:].tolist() == [0, 0]


@pytest.mark.parametrize(
    "mode, scale",
    [
        ("seq_mean_token_mean", 15 / 16),
        ("token_mean", 1.0),
        ("constant", 15 / 16),
        ("seq_mean_token_sum", 15 / 16),
        ("token_sum", 1.0),
    ],
)
def test_masked_response_stays_in_the_batch_count(mode, scale):
    """1 of 16 responses filtered (overlong): the other 15's loss is scaled by 15/16, not left at 1/15
    (the 16/15 excess over TRL); under `constant` the divisor B·L_max does not move with filtering."""
    loss = torch.arange(1.0, 16 * 4 + 1, dtype=torch.float64).view(16, 4)
    mask = torch.ones(16, 4)
    mask[5] = 0
    kept = torch.cat([loss[:5], loss[6:]]), torch.cat([mask[:5], mask[6:]])
    full = AGGREGATIONS[mode](loss, mask, Normaliser.from_mask(mask, 4)).item()
    alone = AGGREGATIONS[mode](*kept, Normaliser.from_mask(kept[1], 4)).item()
    assert full == pytest.approx(alone * scale, rel=1e-12)


def test_constant_normaliser_needs_max_len():
    with pytest.raises(ValueError, match="max_len"):
        AGGREGATIONS["constant"](LOSS, AGG_MASK, Normaliser.from_mask(AGG_MASK))


def test_all_masked_batch_gives_zero_not_nan():
    mask = torch.zeros(2, 3)
    for mode in AGGREGATIONS.names():
        assert AGGREGATIONS[mode](torch.ones(2, 3), mask, Normaliser.from_mask(mask, 3)).item() == 0.0


# ---- KL and entropy ---------------------------------------------------------------------
LOG_R = T([math.log(2), 0.0, -math.log(2)])


@pytest.mark.parametrize(
    "name, expected",
    [
        ("k1", [0.6931471805599453, 0.0, -0.6931471805599453]),
        ("k2", [0.2402265069591007, 0.0, 0.2402265069591007]),
        ("k3", [0.1931471805599453, 0.0, 0.3068528194400547]),  # 1/2 − 1 + ln 2; 2 − 1 − ln 2
    ],
)
def test_kl_estimators(name, expected):
    torch.testing.assert_close(KL_ESTIMATORS[name](LOG_R, torch.zeros_like(LOG_R)), T(expected))


def test_token_entropy_and_logprobs():
    logits = T([0.0, 0.0, -50, -50], [0.0, 0.0, 0.0, 0.0], [math.log(3), 0.0, float("-inf"), float("-inf")])
    h = token_entropy(logits[:, :2].unsqueeze(0)).squeeze(0)
    torch.testing.assert_close(
        h, torch.tensor([0.6931471805599453, 0.6931471805599453, 0.5623351446188083], dtype=torch.float64)
    )
    assert token_entropy(logits[1:2].unsqueeze(0)).item() == pytest.approx(1.3862943611198906)  # ln 4
    lp = token_logprobs(logits[2:3, :2].unsqueeze(0), torch.tensor([[0]]))
    assert lp.item() == pytest.approx(-0.2876820724517809)  # ln 0.75


def test_policy_loss_entropy_is_token_mean_whatever_the_aggregation():
    mask = torch.tensor([[1, 1, 1], [1, 0, 0]])
    entropy = T([1.0, 1.0, 1.0], [3.0, 9.0, 9.0])
    zeros = torch.zeros(2, 3, dtype=torch.float64)
    for preset in ("grpo", "gspo"):
        out = policy_loss(
            zeros, zeros, torch.ones(2, dtype=torch.float64), mask, ObjectiveSettings.preset(preset), entropy=entropy
        )
        assert out.metrics[M.ENTROPY].item() == pytest.approx(6 / 4)  # not (1 + 3)/2


def test_policy_loss_kl_term_and_metric():
    mask = torch.tensor([[1, 1, 0]])
    logp = T([math.log(2), -math.log(2), 7.0])
    zeros = torch.zeros_like(logp)
    s = ObjectiveSettings.preset("grpo", kl_coef=0.5, kl_estimator="k3")
    out = policy_loss(logp, zeros, torch.zeros(1, dtype=torch.float64), mask, s, ref_logp=zeros)
    # A = 0 so the surrogate is 0; loss = β · mean_t k3 = 0.5 · (0.19314718 + 0.30685282)/2
    assert out.loss.item() == pytest.approx(0.125)
    assert out.metrics[M.KL].item() == pytest.approx(0.25)
    with pytest.raises(ValueError, match="ref_logp"):
        policy_loss(logp, zeros, torch.zeros(1), mask, s)


# ---- overlong and dynamic sampling ------------------------------------------------------
def test_soft_overlong_penalty():
    # L_max = 20, L_cache = 5: free up to 15, then −1/5 per token, −1 beyond 20
    got = soft_overlong_penalty(torch.tensor([10, 15, 16, 18, 20, 21]), max_len=20, cache_len=5)
    torch.testing.assert_close(got, torch.tensor([0.0, 0.0, -0.2, -0.6, -1.0, -1.0], dtype=torch.float64))
    with pytest.raises(ValueError):
        soft_overlong_penalty(torch.tensor([1]), max_len=4, cache_len=5)


def test_overlong_filter():
    mask = torch.tensor([[1, 1, 1], [1, 1, 0]])
    got = overlong_filter(mask, torch.tensor([True, False]))
    assert got.tolist() == [[0, 0, 0], [1, 1, 0]]


def test_dynamic_sampling_filter_and_group_outcomes():
    values = T([1, 0, 1], [1, 1, 1], [0, 0, 0], [0.5, 0.5, 0.5])
    f = dynamic_sampling_filter(values)
    assert f.keep.tolist() == [True, False, False, False]
    assert (f.dropped, f.dropped_all_max) == (3, 1)
    got = group_outcome_metrics(torch.tensor([[1, 0, 1], [1, 1, 1], [0, 0, 0], [0, 0, 0]]))
    assert got == {M.GROUPS_ALL_CORRECT_FRAC: 0.25, M.GROUPS_ALL_WRONG_FRAC: 0.5, M.GROUPS_MIXED_FRAC: 0.25}


# ---- the 2025-26 switches: clipping forms, LUSPO, token masks and weights, the entropy bonus -----------------------
def _one_token(preset: str, logp: float, old: float, adv: float, **over):
    """policy_loss on one response of one token: (loss, ∂loss/∂log π, metrics)."""
    s = ObjectiveSettings.preset(preset, max_len=4, **over)
    lp = T([logp]).requires_grad_(True)
    out = policy_loss(lp, T([old]), T(adv), torch.ones(1, 1), s)
    out.loss.backward()
    return out.loss.item(), lp.grad.item(), out.metrics


@pytest.mark.parametrize(
    "old, adv, loss, grad, capped",
    [
        (math.log(0.25), 1.0, -1.5 * math.log(0.5), -1.5, 1.0),  # r = 2 > cap 1.5: weight 1.5, gradient kept
        (math.log(0.25), -1.0, 1.5 * math.log(0.5), 1.5, 1.0),  # the cap acts whatever A's sign
        (math.log(0.5 / 1.2), 1.0, -1.2 * math.log(0.5), -1.2, 0.0),  # r = 1.2 below the cap: weight 1.2
        (math.log(0.25), 0.0, 0.0, 0.0, 0.0),  # over the cap with A = 0: the cap changes no gradient, not counted
    ],
)
def test_cispo_caps_the_weight_and_keeps_the_gradient(old, adv, loss, grad, capped):
    got_loss, got_grad, metrics = _one_token("cispo", math.log(0.5), old, adv, clip_high=0.5)
    assert got_loss == pytest.approx(loss, abs=1e-12) and got_grad == pytest.approx(grad, abs=1e-12)
    assert metrics[M.CLIP_FRAC_HIGH].item() == capped


@pytest.mark.parametrize("preset, over", [("grpo", {}), ("dapo", {}), ("cispo", {}), ("grpo", {"dual_clip": 3.0})])
def test_clip_fractions_count_only_tokens_whose_gradient_the_clip_changes(preset, over):
    """Eight one-token responses, hand-computed: ratios far above and below every bound, A in {+1, −1, 0}. A token
    counts when its gradient differs from the unclipped r·A·∇log π (zeroed, or capped), and never with A = 0."""
    s = ObjectiveSettings.preset(preset, max_len=4, dynamic_sampling=False, overlong_filter=False, **over)
    ratios = [8.0, 8.0, 8.0, 0.1, 0.1, 0.1, 1.0, 1.0]  # 8 is over every cap (CISPO's preset: 1 + 4)
    advs = [1.0, -1.0, 0.0, 1.0, -1.0, 0.0, 1.0, -1.0]
    logp = torch.zeros(8, 1, dtype=torch.float64, requires_grad=True)
    r, a = T(*ratios), T(*advs)
    out = policy_loss(logp, -torch.log(r).view(8, 1), a, torch.ones(8, 1), s)
    out.loss.backward()
    unclipped = -r * a / 8  # ∂/∂log π of −r·A under every aggregation here (one token each, 8 responses)
    changed = ~torch.isclose(logp.grad.flatten(), unclipped)
    expected = {
        "grpo": [True, False, False, False, True, False, False, False],  # r > 1.2 with A > 0; r < 0.8 with A < 0
        "cispo": [True, True, False, False, False, False, False, False],  # r over the cap, A ≠ 0 (either sign)
    }
    want = expected.get(preset, expected["grpo"])
    if over.get("dual_clip"):
        want = [True, True, False, False, True, False, False, False]  # r = 8 > c = 3 with A < 0: the dual clip
    assert changed.tolist() == want
    share = out.metrics[M.CLIP_FRAC].item() + out.metrics.get(M.DUAL_CLIP_FRAC, torch.tensor(0.0)).item()
    assert share == pytest.approx(sum(want) / 8)


def test_sapo_soft_gate():
    # r = 1, A = 1, τ_pos = 1: loss −4σ(0) = −2, gradient −4σ(0)(1 − σ(0))·r·A = −1 (the hard clip's, at r = 1)
    loss, grad, _ = _one_token("sapo", 0.0, 0.0, 1.0)
    assert (loss, grad) == (pytest.approx(-2.0, abs=1e-12), pytest.approx(-1.0, abs=1e-12))
    # r = e^0.5, A = −1, τ_neg = 1.05: loss (4/1.05)σ(1.05·0.6487) = 2.5295, gradient 4σ(1 − σ)·r = 1.4714
    loss, grad, metrics = _one_token("sapo", 0.5, 0.0, -1.0)
    assert loss == pytest.approx(2.5295122036, abs=1e-9) and grad == pytest.approx(1.4713518315, abs=1e-9)
    assert metrics[M.CLIP_FRAC].item() == 0.0  # no hard clip


@pytest.mark.parametrize("adv, phi", [(1.0, 0.6378982936), (-1.0, 1.2217477125)])
def test_vespo_gamma_weight_of_the_sequence_ratio(adv, phi):
    """Two tokens with log-ratios 0.1 and 0.2: w = e^0.3; A ≥ 0 (k 2, λ 3): φ = e^(3 + 0.6 − 3w) = 0.6379;
    A < 0 (k 3, λ 2): φ = e^(2 + 0.9 − 2w) = 1.2217. Loss −φ·A·log π per token, token mean; gradient −φ·A/2."""
    s = ObjectiveSettings.preset("vespo", max_len=4)
    lp = T([-1.0, -2.0]).requires_grad_(True)
    out = policy_loss(lp, T([-1.1, -2.2]), T(adv), torch.ones(1, 2), s)
    out.loss.backward()
    assert out.loss.item() == pytest.approx(-phi * adv * (-3.0) / 2, abs=1e-9)
    assert lp.grad.flatten().tolist() == pytest.approx([-phi * adv / 2] * 2, abs=1e-9)


def test_luspo_scales_gspo_by_length():
    """At r = 1, responses of 2 and 4 tokens with A = 1 and −1, B = 2: GSPO's per-token gradient is −A/(B·T_i),
    LUSPO's −A/B whatever the length (loss (1/B) Σ_i T_i·(−A_i) = (−2 + 4)/2 = 1)."""
    mask = T([1, 1, 0, 0], [1, 1, 1, 1])
    for preset, loss, grads in (
        ("gspo", 0.0, [-0.25, -0.25, 0.0, 0.0, 0.125, 0.125, 0.125, 0.125]),
        ("luspo", 1.0, [-0.5, -0.5, 0.0, 0.0, 0.5, 0.5, 0.5, 0.5]),
    ):
        lp = torch.zeros(2, 4, dtype=torch.float64, requires_grad=True)
        out = policy_loss(lp, torch.zeros(2, 4), T(1.0, -1.0), mask, ObjectiveSettings.preset(preset, max_len=4))
        out.loss.backward()
        assert out.loss.item() == pytest.approx(loss, abs=1e-12), preset
        assert lp.grad.flatten().tolist() == pytest.approx(grads, abs=1e-12), preset


def test_luspo_without_the_sequence_ratio_is_an_error():
    with pytest.raises(ValueError, match="ratio: preset luspo needs sequence or sequence_token, got token"):
        ObjectiveSettings.preset("luspo", max_len=4, ratio="token")


def test_entropy_bonus_is_a_token_mean_of_the_trained_tokens():
    """H = 1, 2, 3 on three loss tokens, c = 0.1: L_H = −0.1·2 = −0.2, ∂L/∂H_t = −0.1/3 (the policy term is 0
    at A = 0)."""
    s = ObjectiveSettings.preset("grpo", max_len=4, entropy_coef=0.1)
    h = T([1.0, 2.0, 3.0, 9.0]).requires_grad_(True)
    out = policy_loss(torch.zeros(1, 4), torch.zeros(1, 4), T(0.0), T([1, 1, 1, 0]), s, entropy=h)
    out.loss.backward()
    assert out.loss.item() == pytest.approx(-0.2, abs=1e-12)
    assert h.grad.flatten().tolist() == pytest.approx([-0.1 / 3] * 3 + [0.0], abs=1e-12)
    assert out.metrics[M.ENTROPY_COEF].item() == pytest.approx(0.1)


def test_top_entropy_mask_keeps_the_tokens_at_or_above_the_batch_quantile():
    """Entropies 0.1 … 1.7 on five tokens, ρ = 0.4: the 0.6 quantile is 0.9 + 0.4·0.4 = 1.06, so the tokens of
    entropy 1.3 and 1.7 train; under token_mean each of them gets −A/5 (the mean still counts all five)."""
    h = T([0.1, 0.5, 0.9, 1.3, 1.7])
    norm = Normaliser.from_mask(torch.ones(1, 5), 8, entropy=h, top_entropy_quantile=0.4)
    assert norm.entropy_floor == pytest.approx(1.06, abs=1e-12) and norm.num_trained == 2
    s = ObjectiveSettings.preset("grpo", max_len=8, aggregation="token_mean", top_entropy_quantile=0.4)
    lp = torch.zeros(1, 5, dtype=torch.float64, requires_grad=True)
    out = policy_loss(lp, torch.zeros(1, 5), T(1.0), torch.ones(1, 5), s, entropy=h)
    out.loss.backward()
    assert lp.grad.flatten().tolist() == pytest.approx([0, 0, 0, -0.2, -0.2], abs=1e-12)
    assert out.metrics[M.ENTROPY_TRAINED].item() == pytest.approx(1.5, abs=1e-12)


@pytest.mark.parametrize("adv, delta, kept", [(-1.0, 0.3, False), (-1.0, 0.5, True), (1.0, 0.0, True)])
def test_off_policy_mask(adv, delta, kept):
    """log π_θ = −1, −1 and the rollout's −0.5, −0.7: mean KL 0.4. A failing response beyond δ leaves the loss."""
    s = ObjectiveSettings.preset("grpo", max_len=4, off_policy_threshold=delta)
    lp = T([-1.0, -1.0]).requires_grad_(True)
    out = policy_loss(lp, lp.detach(), T(adv), torch.ones(1, 2), s, rollout_logp=T([-0.5, -0.7]))
    out.loss.backward()
    assert bool(lp.grad.abs().sum() > 0) == kept
    assert out.metrics[M.OFF_POLICY_MASKED_FRAC].item() == (0.0 if kept else 1.0)


@pytest.mark.parametrize(
    "mode, low, high, weight",
    [
        ("token_truncate", None, 1.2, [1.2, 0.6065306597]),  # e^0.5 = 1.6487 truncated to 1.2; e^−0.5 kept
        ("token_truncate", 0.7, 1.2, [1.2, 0.7]),
        ("token_mask", 0.5, 2.0, [1.6487212707, 0.6065306597]),
        ("token_mask", None, 1.2, [0.0, 0.6065306597]),  # above the bound: the token leaves the loss
        ("sequence_truncate", 0.5, 1.2, [1.0]),  # Σ log-gap = 0.5 − 0.5: w = 1
        ("sequence_mask", None, 0.9, [0.0]),
    ],
)
def test_rollout_corrections(mode, low, high, weight):
    """π_old's log-probs −1, −1 against the rollout engine's −1.5, −0.5: per-token weights e^0.5 and e^−0.5."""
    from trainer.objective import ROLLOUT_CORRECTIONS

    w = ROLLOUT_CORRECTIONS[mode](T([-1.0, -1.0]), T([-1.5, -0.5]), torch.ones(1, 2), low, high)
    assert w.flatten().tolist() == pytest.approx(weight, abs=1e-9)


def test_rollout_correction_weighs_the_loss():
    s = ObjectiveSettings.preset("grpo", max_len=4, rollout_correction="token_truncate", rollout_correction_max=1.2)
    lp = T([-1.0, -1.0]).requires_grad_(True)
    out = policy_loss(lp, lp.detach(), T(1.0), torch.ones(1, 2), s, rollout_logp=T([-1.5, -0.5]))
    out.loss.backward()
    assert lp.grad.flatten().tolist() == pytest.approx([-1.2 / 2, -0.6065306597 / 2], abs=1e-9)  # 1/T_i, r = 1
    with pytest.raises(ValueError, match="rollout engine's log-probabilities"):
        policy_loss(lp, lp.detach(), T(1.0), torch.ones(1, 2), s)


def test_covariance_and_the_tokens_kl_cov_and_clip_cov_pick():
    """Two responses of two tokens, A = 1 and −1, log π = (−1, −3) and (−1, −3): Ā = 0, l̄ = −2, so
    Cov = (1, −1) and (−1, 1). KL-Cov with k = 0.5 (n = 2) picks the two tokens of covariance 1; Clip-Cov with the
    band (0.5, 2) draws among the same two (here both, n = 2), unless the clip already clipped them."""
    from trainer.objective import covariance_selection
    from trainer.objective.masks import covariance

    logp, adv, mask = T([-1.0, -3.0], [-1.0, -3.0]), T(1.0, -1.0), torch.ones(2, 2)
    assert covariance(logp, adv, mask).tolist() == [[1.0, -1.0], [-1.0, 1.0]]
    kl = ObjectiveSettings.preset("grpo", max_len=4, surrogate="kl_cov", kl_cov_ratio=0.5, kl_cov_coef=1.0)
    assert covariance_selection(logp, logp, adv, mask, kl).tolist() == [[True, False], [False, True]]
    clip = ObjectiveSettings.preset("grpo", max_len=4, clip_cov_ratio=0.5, clip_cov_bounds=(0.5, 2.0))
    assert covariance_selection(logp, logp, adv, mask, clip).tolist() == [[True, False], [False, True]]
    moved = logp + T([0.0, 0.0], [0.0, -0.5])  # r = e^0.5 on the second response's last token, A < 0: clipped
    assert covariance_selection(moved, logp, adv, mask, clip).tolist() == [[True, False], [False, False]]


def test_kl_cov_penalises_only_its_tokens_and_clip_cov_cuts_theirs():
    """Token mean over 4 tokens at r = e^(0.5) on the picked tokens: KL-Cov adds β·|log r| = 0.5 there and keeps the
    unclipped −r·A everywhere; Clip-Cov zeroes the picked tokens' loss and gradient."""
    logp = T([-1.0, -3.0], [-1.0, -3.0]).requires_grad_(True)
    old = logp.detach() - T([0.5, 0.0], [0.0, 0.5])  # the tokens of covariance 1 moved up by 0.5
    adv, mask, r = T(1.0, -1.0), torch.ones(2, 2), math.exp(0.5)
    kl = ObjectiveSettings.preset("grpo", max_len=4, aggregation="token_mean", surrogate="kl_cov", kl_cov_ratio=0.5,
                                  kl_cov_coef=1.0)  # fmt: skip
    out = policy_loss(logp, old, adv, mask, kl)
    out.loss.backward()
    assert out.loss.item() == pytest.approx((-r + 0.5 - 1.0 + 1.0 + r + 0.5) / 4, abs=1e-12)
    assert logp.grad.flatten().tolist() == pytest.approx([(-r + 1) / 4, -1 / 4, 1 / 4, (r + 1) / 4], abs=1e-12)
    logp.grad = None
    clip = ObjectiveSettings.preset("grpo", max_len=4, aggregation="token_mean", clip_cov_ratio=0.5,
                                    clip_cov_bounds=(0.5, 2.0), clip_high=1.0, clip_low=0.9)  # fmt: skip
    out = policy_loss(logp, old, adv, mask, clip)
    out.loss.backward()
    assert logp.grad.flatten().tolist() == pytest.approx([0.0, -1 / 4, 1 / 4, 0.0], abs=1e-12)
    assert out.metrics[M.COV_SELECTED_FRAC].item() == 0.5
