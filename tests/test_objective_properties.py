"""Properties the papers rely on: the length bias, micro-batch invariance, GSPO's ratio."""

import itertools
import math

import pytest
import torch
from fake_loop import assert_splits_agree
from hypothesis import given, settings
from hypothesis import strategies as st

from trainer.objective import (
    ADVANTAGES,
    AGGREGATIONS,
    RATIOS,
    Normaliser,
    ObjectiveSettings,
    compute_advantages,
    covariance_selection,
    merge_metrics,
    policy_loss,
    token_entropy,
    token_logprobs,
)

torch.set_default_dtype(torch.float64)
advantage_values = st.floats(min_value=0.01, max_value=5.0).flatmap(lambda a: st.sampled_from([a, -a]))


@settings(max_examples=25, deadline=None)
@given(adv=advantage_values, extra_budget=st.integers(min_value=0, max_value=400))
def test_length_bias_of_per_response_normalisation(adv, extra_budget):
    """Same advantage, lengths 10 and 100, at ratio 1: GRPO's 1/T_i gives each token of the long
    response a 10× smaller gradient; token-mean and the constant normaliser treat tokens alike."""
    mask = torch.zeros(2, 100)
    mask[0, :10] = 1
    mask[1, :] = 1
    for mode, expected_ratio in [("seq_mean_token_mean", 10.0), ("token_mean", 1.0), ("constant", 1.0)]:
        s = ObjectiveSettings.preset("grpo", aggregation=mode, max_len=100 + extra_budget)
        logp = torch.zeros(2, 100, requires_grad=True)
        policy_loss(logp, torch.zeros(2, 100), torch.tensor([adv, adv]), mask, s).loss.backward()
        short, long = logp.grad[0, :10], logp.grad[1, :]
        assert torch.allclose(short, short[0].expand_as(short)) and torch.allclose(long, long[0].expand_as(long))
        assert (short[0] / long[0]).item() == pytest.approx(expected_ratio, rel=1e-12)
        # the sign: a negative advantage pushes the tokens' log-probs down (positive gradient of the loss)
        assert math.copysign(1, short[0].item()) == -math.copysign(1, adv)


def _batch(seed: int, b: int = 8, t: int = 12, v: int = 5):
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(b, t, v, generator=g).requires_grad_(True)
    tokens = torch.randint(0, v, (b, t), generator=g)
    lengths = torch.tensor([12, 3, 7, 1, 12, 5, 0, 9])[:b]  # one response fully masked (e.g. filtered)
    mask = (torch.arange(t) < lengths[:, None]).long()
    old_logp = token_logprobs(logits.detach(), tokens) + 0.3 * torch.randn(b, t, generator=g)
    ref_logp = old_logp + 0.2 * torch.randn(b, t, generator=g)
    adv = torch.tensor([1.2, -0.7, 0.0, 0.4, -1.5, 0.9, 0.3, -0.2])[:b]
    return logits, tokens, mask, old_logp, ref_logp, adv


def _run(s, logits, tokens, mask, old_logp, ref_logp, adv, splits):
    """Loss, metrics and gradient accumulated over `splits` micro-batches with batch-wide counts."""
    logits.grad = None
    norm = Normaliser.from_mask(mask, s.max_len)
    total, parts = 0.0, []
    for rows in torch.arange(mask.shape[0]).chunk(splits):
        lg = logits[rows]
        out = policy_loss(
            token_logprobs(lg, tokens[rows]),
            old_logp[rows],
            adv[rows],
            mask[rows],
            s,
            ref_logp=ref_logp[rows],
            entropy=token_entropy(lg),
            norm=norm,
        )
        out.loss.backward()
        total += out.loss.item()
        parts.append(out.metrics)
    return total, merge_metrics(parts), logits.grad.clone()


@pytest.mark.parametrize("mode, ratio", list(itertools.product(AGGREGATIONS.names(), RATIOS.names())))
def test_micro_batch_invariance(mode, ratio):
    s = ObjectiveSettings.preset(
        "grpo", aggregation=mode, ratio=ratio, max_len=16, kl_coef=0.05, clip_low=0.05, clip_high=0.06, dual_clip=1.2
    )
    batch = _batch(0)
    metrics = assert_splits_agree(lambda splits: _run(s, *batch, splits=splits), tol=1e-6)
    assert metrics["policy/clip_frac"] > 0  # the check covers clipped tokens too
    assert ratio != "token" or metrics["policy/dual_clip_frac"] > 0


NEW_SWITCHES = {
    "cispo": ("cispo", {"clip_high": 0.2}),
    "sapo": ("sapo", {}),
    "luspo": ("luspo", {"clip_low": 0.05, "clip_high": 0.06}),
    "vespo": ("vespo", {}),
    "entropy_bonus": ("grpo", {"entropy_coef": 0.05}),
    "entropy_adaptive": (
        "grpo",
        {"entropy_coef": 0.05, "entropy_target": 9.0, "entropy_coef_step": 0.01, "entropy_coef_max": 0.1},
    ),
    "top_entropy": ("grpo", {"top_entropy_quantile": 0.3}),
    "top_entropy_bonus": ("dr_grpo", {"top_entropy_quantile": 0.3, "entropy_coef": 0.05}),
    "off_policy_mask": ("grpo", {"off_policy_threshold": 0.02}),
    **{
        f"rollout_{mode}": (
            "grpo",
            {"rollout_correction": mode, "rollout_correction_min": 0.8, "rollout_correction_max": 1.2},
        )
        for mode in ("token_truncate", "token_mask", "sequence_truncate", "sequence_mask")
    },
    "vespo_rollout": ("vespo", {"rollout_correction": "token_truncate", "rollout_correction_max": 1.2}),
    "kl_cov": ("grpo", {"surrogate": "kl_cov", "kl_cov_ratio": 0.1, "kl_cov_coef": 1.0}),
    "clip_cov": ("grpo", {"clip_cov_ratio": 0.1, "clip_cov_bounds": (0.0, 5.0)}),
    "gmpo": ("gmpo", {"clip_low": 0.1, "clip_high": 0.1}),
    "gmpo_rollout": ("gmpo", {"rollout_correction": "token_truncate", "rollout_correction_max": 1.2}),
    "dppo_tv": ("dppo_tv", {"dppo_bounds": (0.02, 0.03), "dppo_ratio_cap": 1.1}),
    "dppo_kl": ("dppo_kl", {"dppo_bounds": (0.005, 0.01), "dppo_ratio_cap": 1.1}),
    "dro": ("grpo", {"surrogate": "dro", "dro_beta": 0.5}),
    "gpg": ("gpg", {}),
}


def _run_all(s, logits, tokens, mask, old_logp, rollout_logp, adv, splits):
    """`_run` with every input a switch may read: the rollout's log-probs and the batch's entropies."""
    logits.grad = None
    entropy = token_entropy(logits.detach())
    norm = Normaliser.from_mask(mask, s.max_len, entropy=entropy, top_entropy_quantile=s.top_entropy_quantile)
    logp = token_logprobs(logits.detach(), tokens)
    selected = covariance_selection(logp, old_logp, adv, mask, s, torch.Generator().manual_seed(0))
    total, parts = 0.0, []
    for rows in torch.arange(mask.shape[0]).chunk(splits):
        lg = logits[rows]
        h = token_entropy(lg)
        out = policy_loss(
            token_logprobs(lg, tokens[rows]),
            old_logp[rows],
            adv[rows],
            mask[rows],
            s,
            entropy=h if s.entropy_bonus else h.detach(),
            norm=norm,
            rollout_logp=rollout_logp[rows],
            cov_selected=None if selected is None else selected[rows],
        )
        out.loss.backward()
        total += out.loss.item()
        parts.append(out.metrics)
    return total, merge_metrics(parts), logits.grad.clone()


@pytest.mark.parametrize("name", NEW_SWITCHES)
def test_micro_batch_invariance_of_the_newer_switches(name):
    """CISPO, SAPO, LUSPO, VESPO, the entropy bonus, the top-entropy mask, the off-policy mask, the rollout
    correction, GMPO, DPPO, DRO and GPG: split into 2 or 4 micro-batches with batch-wide counts (the entropy
    quantile taken over the batch), the same loss, gradient and metrics as the whole batch."""
    preset, over = NEW_SWITCHES[name]
    s = ObjectiveSettings.preset(preset, max_len=16, **over)
    logits, tokens, mask, old_logp, _, adv = _batch(0)
    rollout_logp = old_logp + 0.2 * torch.randn(old_logp.shape, generator=torch.Generator().manual_seed(5))
    batch = (logits, tokens, mask, old_logp, rollout_logp, adv)
    assert_splits_agree(lambda splits: _run_all(s, *batch, splits=splits), tol=1e-6)


@pytest.mark.parametrize("mode", AGGREGATIONS.names())
def test_fully_masked_micro_batch_adds_nothing_and_keeps_its_count(mode):
    """Row 6 of `_batch` is fully masked (e.g. overlong-filtered). Alone in a micro-batch it adds 0 to the
    loss and gradient, the split sums to the full batch, and B = 8 counts it: dropping the row instead
    scales the loss by 8/7 under the modes divided by B (token_mean and token_sum do not depend on B)."""
    s = ObjectiveSettings.preset("grpo", aggregation=mode, max_len=16)
    logits, tokens, mask, old_logp, ref_logp, adv = _batch(2)
    norm = Normaliser.from_mask(mask, s.max_len)
    assert (norm.num_sequences, norm.num_scored) == (8, 7)
    full, _, grad = _run(s, logits, tokens, mask, old_logp, ref_logp, adv, splits=1)
    logits.grad, total = None, 0.0
    for rows in (torch.tensor([6]), torch.tensor([0, 1, 2, 3, 4, 5, 7])):
        out = policy_loss(
            token_logprobs(logits[rows], tokens[rows]), old_logp[rows], adv[rows], mask[rows], s, norm=norm
        )
        assert rows.numel() > 1 or out.loss.item() == 0.0
        out.loss.backward()
        total += out.loss.item()
    assert total == pytest.approx(full, abs=1e-12) and torch.allclose(logits.grad, grad, atol=1e-12)
    assert logits.grad[6].abs().max().item() == 0.0
    keep = torch.tensor([0, 1, 2, 3, 4, 5, 7])
    dropped = policy_loss(
        token_logprobs(logits[keep].detach(), tokens[keep]), old_logp[keep], adv[keep], mask[keep], s
    ).loss.item()
    assert full == pytest.approx(dropped * (1.0 if mode in ("token_mean", "token_sum") else 7 / 8), rel=1e-12)


def test_micro_batch_counts_are_the_pitfall():
    """Dividing by each micro-batch's own token count (a pitfall seen in other frameworks) changes the loss,
    so the invariance test above can fail."""
    s = ObjectiveSettings.preset("dapo", max_len=16, overlong_cache_len=4)
    logits, tokens, mask, old_logp, ref_logp, adv = _batch(1)
    right = _run(s, logits, tokens, mask, old_logp, ref_logp, adv, splits=1)[0]
    naive = 0.0
    for rows in torch.arange(8).chunk(4):
        out = policy_loss(token_logprobs(logits[rows], tokens[rows]), old_logp[rows], adv[rows], mask[rows], s)
        naive += out.loss.item() / 4  # mean of micro-batch means
    assert abs(naive - right) > 1e-3


@settings(max_examples=30, deadline=None)
@given(st.lists(st.floats(min_value=-2.0, max_value=2.0), min_size=1, max_size=20))
def test_sequence_ratio_equals_geometric_mean_of_token_ratios(log_ratios):
    lr = torch.tensor([log_ratios + [9.0]])  # trailing padding
    mask = torch.tensor([[1] * len(log_ratios) + [0]])
    s_i = RATIOS["sequence"](lr, torch.zeros_like(lr), mask).exp()[0, 0].item()
    geo = math.prod(math.exp(x) for x in log_ratios) ** (1 / len(log_ratios))
    assert s_i == pytest.approx(geo, rel=1e-9)
    s_tok = RATIOS["sequence_token"](lr, torch.zeros_like(lr), mask).exp()[0, : len(log_ratios)]
    assert torch.allclose(s_tok, torch.full_like(s_tok, s_i))


def test_gspo_token_has_sequence_value_with_per_token_gradients():
    g = torch.Generator().manual_seed(3)
    logp = (0.01 * torch.randn(3, 6, generator=g)).requires_grad_(True)
    old = torch.zeros(3, 6)
    mask = torch.ones(3, 6)
    seq = ObjectiveSettings.preset("gspo", clip_low=0.5, clip_high=0.5)  # wide: nothing clips
    tok = ObjectiveSettings.preset("gspo", ratio="sequence_token", clip_low=0.5, clip_high=0.5)
    adv = torch.tensor([1.0, -0.5, 2.0])
    out_seq, out_tok = policy_loss(logp, old, adv, mask, seq), policy_loss(logp, old, adv, mask, tok)
    assert out_seq.loss.item() == pytest.approx(out_tok.loss.item(), rel=1e-12)
    (g_seq,) = torch.autograd.grad(out_seq.loss, logp)
    (g_tok,) = torch.autograd.grad(out_tok.loss, logp)
    # GSPO: every token of response i gets −A_i s_i/(B T_i); GSPO-token: −A_i s_i/(B T_i) too when the
    # advantage is shared by the tokens (GSPO paper, eq. 14), so the gradients agree here ...
    assert torch.allclose(g_seq, g_tok, atol=1e-12)
    # ... yet in GSPO-token a token's gradient depends only on its own log-prob: perturbing one token's
    # log-prob moves every gradient of its response under GSPO (shared s_i), likewise under GSPO-token
    # (s_i is its value), but the Jacobian of GSPO-token's ratio is diagonal.
    j_tok = torch.autograd.functional.jacobian(lambda x: RATIOS["sequence_token"](x, old, mask).exp(), logp)
    j_seq = torch.autograd.functional.jacobian(lambda x: RATIOS["sequence"](x, old, mask).exp(), logp)
    off_diag = j_tok[0, :, 0, :] - torch.diag(torch.diagonal(j_tok[0, :, 0, :]))
    assert off_diag.abs().max().item() == 0.0
    assert (j_seq[0, :, 0, :] != 0).all()


@pytest.mark.parametrize("preset", ["grpo", "dr_grpo", "dapo", "gspo"])
@pytest.mark.parametrize(
    "advantage", [n for n in ADVANTAGES.names() if ADVANTAGES.meta(n).get("zeroes_flat_groups", True)]
)
@pytest.mark.parametrize("mode", AGGREGATIONS.names())
def test_all_equal_groups_give_zero_advantage_and_finite_loss(preset, advantage, mode):
    """batch_norm and ngrpo, which give flat groups a signal by design, are tested in test_advantage_variants.py."""
    range_ = {"reward_range": (0.0, 1.0)} if advantage in ("ngrpo", "bnpo") else {}
    if advantage == "stratified":
        range_ = {"stratum_key": "hidden_digit", "stratum_blend": 0.5}
    eps = 1e-3 if advantage == "group_median_mad" else 0.0  # MC-GRPO's MAD needs its ε (0 is refused)
    s = ObjectiveSettings.preset(
        preset, advantage=advantage, aggregation=mode, adv_eps=eps, max_len=8, overlong_cache_len=2, **range_
    )
    rewards = torch.tensor([[1.0] * 4, [0.0] * 4])
    strata = torch.tensor([[0, 1, 1, 0]] * 2) if s.stratum_key is not None else None
    adv = compute_advantages(rewards, s, strata, lengths=torch.tensor([[3, 1, 4, 1]] * 2))
    assert torch.equal(adv, torch.zeros_like(adv))
    logp = torch.randn(8, 8, requires_grad=True)
    out = policy_loss(logp, logp.detach() + 0.1, adv.flatten(), torch.ones(8, 8), s, entropy=torch.ones(8, 8))
    out.loss.backward()
    assert out.loss.item() == 0.0 and torch.isfinite(logp.grad).all()
    assert all(math.isfinite(v.item()) for v in out.metrics.values())
