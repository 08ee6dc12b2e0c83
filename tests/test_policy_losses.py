"""GMPO, DPPO-Binary-TV/-KL, DRO, GPG (its loss and advantage) and the full sequence ratio Π_t r_t, by hand: values
and gradients with respect to the log-probabilities, and each against the update it replaces. Their micro-batch
invariance is in test_objective_properties.py, their equality with verl's and TRL's code in
benchmarks/losses_vs_authors.py and benchmarks/advantages_vs_authors.py."""

from __future__ import annotations

import math

import pytest
import torch

from trainer import metric_names as M
from trainer.objective import ADVANTAGES, ObjectiveSettings, compute_advantages, policy_loss

D = torch.float64


def T(*rows):
    return torch.tensor(rows, dtype=D)


def _grad(s, logp, old_logp, adv, mask, **kw):
    """(loss, ∂loss/∂log π, metrics) of `policy_loss` at log π = `logp`."""
    lp = logp.clone().requires_grad_(True)
    out = policy_loss(lp, old_logp, adv, mask, s, **kw)
    (g,) = torch.autograd.grad(out.loss, lp)
    return out.loss.item(), g, out.metrics


def test_gmpo_by_hand():
    """Response 0 (A = +1): log r = [0.1, 0.5, −0.6] → clipped above at 0.4 only → mean −0.1/3; response 1 (A = −2):
    log r = [0.5, −0.7] → clipped below at −0.4 only → mean 0.05. L = (−e^(−1/30) + 2e^0.05)/2; a token's gradient is
    −A·ρ/(T·B) unless its log-ratio was clipped, then 0."""
    s = ObjectiveSettings.preset("gmpo")
    log_r = T([0.1, 0.5, -0.6], [0.5, -0.7, 0.0])
    mask = T([1, 1, 1], [1, 1, 0])
    logp = T([-1.0, -2.0, -0.5], [-0.3, -1.2, -9.0])
    loss, g, metrics = _grad(s, logp, logp - log_r, T(1.0, -2.0), mask)
    rho0, rho1 = math.exp(-0.1 / 3), math.exp(0.05)
    assert loss == pytest.approx((-rho0 + 2 * rho1) / 2, rel=1e-12)
    want = T([-rho0 / 6, 0.0, -rho0 / 6], [2 * rho1 / 4, 0.0, 0.0])
    assert torch.allclose(g, want, atol=1e-14)
    assert metrics[M.CLIP_FRAC_HIGH].item() == pytest.approx(1 / 5)  # response 0's token 1, of 5 loss tokens
    assert metrics[M.CLIP_FRAC_LOW].item() == pytest.approx(1 / 5)  # response 1's token 1


def test_gmpo_clips_only_on_the_side_ppo_does():
    """A > 0 with every log-ratio far below −ε_low, A < 0 with every one far above ε_high: nothing is clipped, every
    token keeps its gradient −A·ρ/T (the geometric mean of the unclipped ratios)."""
    s = ObjectiveSettings.preset("gmpo")
    log_r = T([-1.0, -2.0], [1.0, 1.5])
    logp = T([-0.5, -0.5], [-0.5, -0.5])
    loss, g, metrics = _grad(s, logp, logp - log_r, T(1.0, -1.0), torch.ones(2, 2, dtype=D))
    rho0, rho1 = math.exp(-1.5), math.exp(1.25)
    assert loss == pytest.approx((-rho0 + rho1) / 2, rel=1e-12)
    assert torch.allclose(g, T([-rho0 / 4] * 2, [rho1 / 4] * 2), atol=1e-14)
    assert metrics[M.CLIP_FRAC].item() == 0


def _probs_case():
    """Four one-token responses from π_old = 0.5: π = 0.7 (+0.2), 0.6 (+0.1), 0.3 (−0.2), 0.4 (−0.1)."""
    p = T([0.7], [0.6], [0.3], [0.4])
    return torch.log(p), torch.log(torch.full_like(p, 0.5)), p


def test_dppo_tv_by_hand():
    """δ = 0.15 both ways, cap c = 1.1, A = [+1, +1, −1, −1], token mean over 4 tokens: π − π_old = +0.2 with A > 0
    and −0.2 with A < 0 leave the loss; π = 0.6 keeps it with weight min(1.2, 1.1) = 1.1, π = 0.4 with 0.8."""
    s = ObjectiveSettings.preset("dppo_tv", aggregation="token_mean", dppo_ratio_cap=1.1)
    logp, old, p = _probs_case()
    loss, g, metrics = _grad(s, logp, old, T(1.0, 1.0, -1.0, -1.0), torch.ones(4, 1, dtype=D))
    assert loss == pytest.approx((-1.1 * math.log(0.6) + 0.8 * math.log(0.4)) / 4, rel=1e-12)
    assert torch.allclose(g.flatten(), T(0.0, -1.1 / 4, 0.0, 0.8 / 4), atol=1e-14)
    assert (metrics[M.CLIP_FRAC_HIGH].item(), metrics[M.CLIP_FRAC_LOW].item()) == (0.25, 0.25)


def test_dppo_kl_by_hand():
    """The binary KL from π_old = 0.5: D(0.7) = ½ log(0.5/0.7) + ½ log(0.5/0.3) ≈ 0.0872, D(0.6) ≈ 0.0201,
    D(0.3) ≈ 0.0872, D(0.4) ≈ 0.0201. δ = 0.05 masks 0.7 (A > 0, π rose) and 0.3 (A < 0, π fell); with the signs of A
    swapped nothing is masked (π moved the other way)."""
    s = ObjectiveSettings.preset("dppo_kl", aggregation="token_mean", dppo_ratio_cap=100.0)
    logp, old, p = _probs_case()

    def kl(q):
        return 0.5 * math.log(0.5 / q) + 0.5 * math.log((0.5 + 1e-8) / (1 - q + 1e-8))

    assert kl(0.7) > 0.05 > kl(0.6) and kl(0.3) > 0.05 > kl(0.4)
    loss, g, _ = _grad(s, logp, old, T(1.0, 1.0, -1.0, -1.0), torch.ones(4, 1, dtype=D))
    assert torch.allclose(g.flatten(), T(0.0, -1.2 / 4, 0.0, 0.8 / 4), atol=1e-14)
    assert loss == pytest.approx((-1.2 * math.log(0.6) + 0.8 * math.log(0.4)) / 4, rel=1e-12)
    _, g, metrics = _grad(s, logp, old, T(-1.0, -1.0, 1.0, 1.0), torch.ones(4, 1, dtype=D))
    assert torch.allclose(g.flatten(), (p / 0.5).flatten() * T(1.0, 1.0, -1.0, -1.0) / 4, atol=1e-14)
    assert metrics[M.CLIP_FRAC].item() == 0


def test_dro_by_hand():
    """ℓ = −(A·log π − ½β(log r)²) on every loss token (A = 0 too), token mean; ∂ℓ/∂log π = −A + β·log r."""
    s = ObjectiveSettings.preset("grpo", surrogate="dro", dro_beta=0.5, aggregation="token_mean")
    logp, log_r = T([-1.0, -2.0], [-0.5, -3.0]), T([0.2, -0.4], [0.6, 0.0])
    mask, adv = T([1, 1], [1, 0]), T(2.0, 0.0)
    loss, g, _ = _grad(s, logp, logp - log_r, adv, mask)
    terms = [-(2 * -1.0 - 0.25 * 0.04), -(2 * -2.0 - 0.25 * 0.16), 0.25 * 0.36]
    assert loss == pytest.approx(sum(terms) / 3, rel=1e-12)
    assert torch.allclose(g, T([(-2 + 0.1) / 3, (-2 - 0.2) / 3], [0.3 / 3, 0.0]), atol=1e-14)


def test_gpg_loss_by_hand():
    """ℓ = −A·log π whatever π_old: the value is −A·log π (not −A·r), the gradient −A per token (token mean)."""
    s = ObjectiveSettings.preset("gpg")
    logp = T([-1.0, -2.0], [-0.5, -3.0])
    loss, g, _ = _grad(s, logp, logp + 5.0, T(1.5, -1.0), T([1, 1], [1, 0]))
    assert loss == pytest.approx((1.5 + 3.0 - 0.5) / 3, rel=1e-12)
    assert torch.allclose(g, T([-0.5, -0.5], [1 / 3, 0.0]), atol=1e-14)


def test_gpg_advantages_by_hand():
    """Groups [1,0,0,0], [1,1,1,1], [0,1,1,0]: the group-mean advantages times α. The paper's α = B/(B − M) =
    12/8 (4 responses in the one flat group); verl's α = B/#non-zero rewards = 12/7."""
    r = T([1, 0, 0, 0], [1, 1, 1, 1], [0, 1, 1, 0])
    centred = T([0.75, -0.25, -0.25, -0.25], [0, 0, 0, 0], [-0.5, 0.5, 0.5, -0.5])
    assert torch.allclose(ADVANTAGES["gpg"](r, 0.0), centred * 1.5, atol=1e-15)
    assert torch.allclose(ADVANTAGES["gpg_nonzero"](r, 0.0), centred * 12 / 7, atol=1e-15)
    s = ObjectiveSettings.preset("gpg")
    assert torch.equal(compute_advantages(r, s), ADVANTAGES["gpg"](r, 0.0))
    assert torch.equal(ADVANTAGES["gpg"](T([1, 1], [0, 0]), 0.0), torch.zeros(2, 2, dtype=D))  # no signal: 0


def test_sequence_product_ratio_by_hand():
    """Π_t r_t: response 0's log-ratios sum to 0.3 (w = e^0.3 > 1.2, A > 0: clipped, loss −1.2, no gradient);
    response 1's to −0.05 (w = e^(−0.05), loss −w, each token's gradient −w/B: the log-ratios are summed, not
    averaged as GSPO's)."""
    s = ObjectiveSettings.preset("grpo", ratio="sequence_product")
    log_r = T([0.1, 0.2, 0.0], [0.05, -0.1, 0.0])
    logp, mask = T([-1.0, -1.0, -1.0], [-1.0, -1.0, -1.0]), T([1, 1, 0], [1, 1, 0])
    loss, g, metrics = _grad(s, logp, logp - log_r, T(1.0, 1.0), mask)
    w = math.exp(-0.05)
    assert loss == pytest.approx((-1.2 - w) / 2, rel=1e-12)
    assert torch.allclose(g, T([0.0, 0.0, 0.0], [-w / 2, -w / 2, 0.0]), atol=1e-14)
    assert metrics[M.CLIP_FRAC_SEQS].item() == 0.5
    gspo = ObjectiveSettings.preset("grpo", ratio="sequence")
    assert _grad(gspo, logp, logp - log_r, T(1.0, 1.0), mask)[0] != pytest.approx(loss)


def _moved_batch(seed=3):
    """Eight responses of up to 6 tokens, the policy moved from π_old, mixed advantages."""
    g = torch.Generator().manual_seed(seed)
    logp = torch.log(torch.rand(8, 6, generator=g, dtype=D) * 0.9 + 0.05)
    old = torch.log((torch.exp(logp) + 0.3 * (torch.rand(8, 6, generator=g, dtype=D) - 0.5)).clamp(0.02, 0.98))
    mask = (torch.arange(6) < torch.tensor([6, 2, 4, 1, 5, 3, 6, 4])[:, None]).to(D)
    return logp, old, T(1.0, -0.5, 2.0, -1.5, 0.7, -0.2, 0.3, -1.0), mask


@pytest.mark.parametrize(
    "preset, over",
    [
        ("gmpo", {}),
        ("dppo_tv", {"aggregation": "seq_mean_token_mean", "dppo_ratio_cap": 1.3}),
        ("dppo_kl", {"aggregation": "seq_mean_token_mean", "dppo_ratio_cap": 1.3}),
        ("grpo", {"surrogate": "dro", "dro_beta": 0.5}),
        ("grpo", {"surrogate": "gpg"}),
        ("grpo", {"ratio": "sequence_product"}),
    ],
)
def test_each_switch_changes_the_update(preset, over):
    """Against GRPO's clipped token surrogate with the same advantages and aggregation, on a batch the policy has
    moved on: a different gradient (and at π = π_old, where every one of them is the policy gradient, the same)."""
    s = ObjectiveSettings.preset(preset, max_len=6, **over)
    base = ObjectiveSettings.preset("grpo", aggregation=s.aggregation, max_len=6)
    logp, old, adv, mask = _moved_batch()
    _, g, _ = _grad(s, logp, old, adv, mask)
    _, g_base, _ = _grad(base, logp, old, adv, mask)
    assert (g - g_base).abs().max().item() > 1e-3
    _, g_on, _ = _grad(s, logp, logp, adv, mask)
    _, g_base_on, _ = _grad(base, logp, logp, adv, mask)
    if s.surrogate != "gmpo" and s.ratio != "sequence_product":  # per token, −A/T_i·(1/B) at r = 1
        assert torch.allclose(g_on, g_base_on, atol=1e-12)


def test_gpg_advantage_changes_the_update():
    """α = 12/8 scales Dr. GRPO's group-mean advantages: a different update whenever a group is flat."""
    r = T([1, 0, 0, 0], [1, 1, 1, 1], [0, 1, 1, 0])
    assert not torch.allclose(ADVANTAGES["gpg"](r, 0.0), ADVANTAGES["group_mean"](r, 0.0))
    r_mixed = T([1, 0, 0, 0], [0, 1, 1, 0])
    assert torch.allclose(ADVANTAGES["gpg"](r_mixed, 0.0), ADVANTAGES["group_mean"](r_mixed, 0.0))
