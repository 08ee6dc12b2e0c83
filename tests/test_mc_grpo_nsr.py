"""MC-GRPO's median pivot (arXiv 2601.22582), the advantage sign-flip metric, and negative-sample reinforcement
(NSR / W-REINFORCE, arXiv 2506.01347): hand-computed numbers, micro-batch invariance, the change from GRPO on the same
tensors, and the loop sampling G + 1 per group and training on G (a fake model, task and backend: no toy build)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from fake_loop import FakeBackend, FakeLM, TableTask
from pydantic import ValidationError

from harness.config.run_config import RunConfig
from trainer import metric_names as M
from trainer.config import RolloutConfig, TrainConfig
from trainer.loop import Trainer, TrainerSettings
from trainer.objective import (
    AGGREGATIONS,
    Normaliser,
    ObjectiveSettings,
    compute_advantages,
    median_pivot,
    merge_metrics,
    policy_loss,
    sign_flip_metrics,
    token_logprobs,
    trained_samples,
)
from trainer.objective.masks import sign_weight

F64 = torch.float64
MC = {"advantage": "group_median", "median_pivot": True}


def _t(*rows):
    return torch.tensor(rows, dtype=F64)


# ---- MC-GRPO: the pivot, by hand ------------------------------------------------------------------------------------
def test_the_pivot_is_the_first_response_at_the_group_median():
    rewards = _t(
        [1.0, 0.0, 0.0],  # median 0: the first 0 (index 1); the other 0 stays, with A = 0
        [1.0, 1.0, 0.0],  # median 1: index 0
        [0.0, 0.0, 0.0],  # flat: index 0
        [0.0, 0.1, 0.2],  # median 0.1: index 1
        [0.5, -1.0, 2.0],  # median 0.5: index 0
    )
    assert median_pivot(rewards).nonzero()[:, 1].tolist() == [1, 0, 0, 1, 0]
    five = _t([0.3, 0.0, 1.0, 0.2, 0.1])  # sorted 0, 0.1, 0.2, 0.3, 1: median 0.2 at index 3
    assert median_pivot(five).tolist() == [[False, False, False, True, False]]
    s = ObjectiveSettings.preset("grpo", **MC)
    assert trained_samples(rewards, s).sum(1).tolist() == [2] * 5  # G = 2 of G + 1 = 3 per group
    assert trained_samples(rewards, ObjectiveSettings.preset("grpo")).all()  # off: every response
    with pytest.raises(ValueError, match="odd group"):
        median_pivot(_t([0.0, 1.0]))


def test_the_pivot_has_zero_advantage_and_the_others_keep_the_median_baseline():
    s = ObjectiveSettings.preset("grpo", **MC)
    rewards = _t([0.0, 0.1, 0.2], [1.0, 0.0, 0.0])
    adv = compute_advantages(rewards, s)
    keep = trained_samples(rewards, s)
    assert adv[~keep].tolist() == [0.0, 0.0]  # each pivot's A = R − median = 0
    assert adv[keep].tolist() == pytest.approx([-0.1, 0.1, 1.0, 0.0])  # R − median over all G + 1


def test_median_pivot_settings_are_one_line_errors_naming_the_key():
    with pytest.raises(
        ValidationError, match=r"median_pivot: true needs advantage 'group_median_mad' or 'group_median'.*group_std"
    ):
        ObjectiveSettings.preset("grpo", median_pivot=True)
    base = {"objective": {"preset": "grpo", **MC}}
    with pytest.raises(ValidationError, match=r"objective.median_pivot: true needs an even rollout.group_size.*got 3"):
        RunConfig.model_validate({**base, "rollout": {"group_size": 3}})
    assert RunConfig.model_validate({**base, "rollout": {"group_size": 2}}).objective.extra_samples == 1
    with pytest.raises(ValidationError, match=r"train.engine: trl cannot express .*objective.median_pivot: true"):
        RunConfig.model_validate({**base, "train": {"engine": "trl"}})


# ---- MC-GRPO: B counts only the G responses that carry gradient ------------------------------------------------------
def _group_batch(seed: int, groups: int = 3, n: int = 3, t: int = 6, v: int = 5):
    """Logits, tokens, mask and π_old for groups × n responses, and rewards [groups, n]."""
    g = torch.Generator().manual_seed(seed)
    b = groups * n
    logits = torch.randn(b, t, v, generator=g, dtype=F64).requires_grad_(True)
    tokens = torch.randint(0, v, (b, t), generator=g)
    lengths = torch.tensor([6, 2, 4, 1, 6, 3, 5, 6, 2])[:b]
    mask = (torch.arange(t) < lengths[:, None]).long()
    old = token_logprobs(logits.detach(), tokens) + 0.3 * torch.randn(b, t, generator=g, dtype=F64)
    rewards = _t([0.0, 1.0, 0.3], [1.0, 0.0, 0.0], [0.2, 0.9, 0.5])[:groups]
    return logits, tokens, mask, old, rewards


def _loss_and_grad(s, logits, tokens, mask, old, adv, rows, splits=1):
    """Loss and gradient of the batch `rows`, over `splits` micro-batches with the batch's counts."""
    logits.grad = None
    norm = Normaliser.from_mask(mask[rows], s.max_len)
    total, parts = 0.0, []
    for part in rows.chunk(splits):
        lg = logits[part]
        out = policy_loss(token_logprobs(lg, tokens[part]), old[part], adv[part], mask[part], s, norm=norm)
        out.loss.backward()
        total += out.loss.item()
        parts.append(out.metrics)
    return total, logits.grad.clone(), merge_metrics(parts)


@pytest.mark.parametrize("mode", AGGREGATIONS.names())
def test_the_normaliser_counts_the_g_trained_responses_by_hand(mode):
    """At ratio 1 each token's loss is −A_i. Two groups of G + 1 = 3, pivots out: B = 4 (not 6) responses, and only
    their tokens."""
    s = ObjectiveSettings.preset("grpo", aggregation=mode, max_len=10, **MC)
    rewards = _t([0.0, 0.1, 0.2], [1.0, 0.0, 0.0])  # A = [-0.1, 0, 0.1], [1, 0, 0]; pivots: index 1 and 1
    lengths = torch.tensor([2, 3, 4, 1, 5, 2])
    mask = (torch.arange(6) < lengths[:, None]).long()
    keep = trained_samples(rewards, s).flatten()
    adv = compute_advantages(rewards, s).flatten()
    rows = keep.nonzero()[:, 0]  # 0, 2, 3, 5
    logp = torch.zeros(6, 6, dtype=F64)
    got = policy_loss(logp[rows], logp[rows], adv[rows], mask[rows], s).loss.item()
    a, T = [-0.1, 0.1, 1.0, 0.0], [2, 4, 1, 2]  # the trained responses' advantages and lengths
    expected = {
        "seq_mean_token_mean": -sum(a) / 4,
        "token_mean": -sum(x * n for x, n in zip(a, T)) / sum(T),
        "constant": -sum(x * n for x, n in zip(a, T)) / (4 * 10),
        "seq_mean_token_sum": -sum(x * n for x, n in zip(a, T)) / 4,
        "token_sum": -sum(x * n for x, n in zip(a, T)),
    }
    assert got == pytest.approx(expected[mode], abs=1e-12)


@pytest.mark.parametrize("mode", AGGREGATIONS.names())
def test_mc_grpo_is_micro_batch_invariant(mode):
    s = ObjectiveSettings.preset("grpo", aggregation=mode, max_len=8, clip_low=0.05, clip_high=0.06, **MC)
    logits, tokens, mask, old, rewards = _group_batch(0)
    adv = compute_advantages(rewards, s).flatten()
    rows = trained_samples(rewards, s).flatten().nonzero()[:, 0]
    loss1, grad1, metrics1 = _loss_and_grad(s, logits, tokens, mask, old, adv, rows)
    assert metrics1[M.CLIP_FRAC] > 0
    for splits in (2, 3, 6):
        loss_k, grad_k, metrics_k = _loss_and_grad(s, logits, tokens, mask, old, adv, rows, splits)
        assert abs(loss_k - loss1) < 1e-10 and (grad_k - grad1).abs().max().item() < 1e-10
        assert metrics_k == pytest.approx(metrics1, abs=1e-10)


def test_mc_grpo_changes_the_update_relative_to_grpo():
    """Same logits and rewards: GRPO trains on all G + 1 with the std-scaled mean baseline; MC-GRPO on G with the
    median. And against the median baseline without the pivot left out: the pivot has A = 0, so only B differs, and
    under seq_mean_token_mean MC-GRPO's gradient is exactly (G + 1)/G = 3/2 of it."""
    logits, tokens, mask, old, rewards = _group_batch(1)
    everyone = torch.arange(9)
    grpo = ObjectiveSettings.preset("grpo")
    _, g_grpo, _ = _loss_and_grad(
        grpo, logits, tokens, mask, old, compute_advantages(rewards, grpo).flatten(), everyone
    )
    mc = ObjectiveSettings.preset("grpo", **MC)
    adv = compute_advantages(rewards, mc).flatten()
    rows = trained_samples(rewards, mc).flatten().nonzero()[:, 0]
    assert len(rows) == 6
    _, g_mc, _ = _loss_and_grad(mc, logits, tokens, mask, old, adv, rows)
    assert (g_mc - g_grpo).abs().max().item() > 1e-3
    median_only = ObjectiveSettings.preset("grpo", advantage="group_median")
    _, g_median, _ = _loss_and_grad(median_only, logits, tokens, mask, old, adv, everyone)
    assert torch.allclose(g_mc, 1.5 * g_median, atol=1e-12)
    assert g_mc[~trained_samples(rewards, mc).flatten()].abs().max().item() == 0  # the pivots get no gradient


# ---- the sign-flip metric --------------------------------------------------------------------------------------------
def test_sign_flips_by_hand():
    """[0.3, 0, 1, 0.2, 0.1]: median 0.2, mean 0.32. Under the median, 0.3 gets A = +0.1 where the mean gives −0.02:
    one reversal among the 4 trained responses (the pivot, 0.2, has A = 0 and is out), one in 5 over all."""
    r = _t([0.3, 0.0, 1.0, 0.2, 0.1])
    mc = ObjectiveSettings.preset("grpo", **MC)
    adv = compute_advantages(r, mc)
    assert sign_flip_metrics(r, adv, trained_samples(r, mc)) == {M.ADV_SIGN_FLIP_FRAC: 0.25}
    assert sign_flip_metrics(r, adv) == {M.ADV_SIGN_FLIP_FRAC: pytest.approx(0.2)}
    # binary rewards [1, 0, 0]: median 0 zeroes the wrong answers (mean: −1/3), which is no reversal
    b = _t([1.0, 0.0, 0.0])
    assert sign_flip_metrics(b, compute_advantages(b, mc))[M.ADV_SIGN_FLIP_FRAC] == 0.0
    for name in ("group_std", "group_mean", "batch_std"):  # a mean baseline never reverses the mean's sign
        s = ObjectiveSettings.preset("grpo", advantage=name)
        assert sign_flip_metrics(r, compute_advantages(r, s))[M.ADV_SIGN_FLIP_FRAC] == 0.0
    assert sign_flip_metrics(r, adv, torch.zeros_like(r, dtype=torch.bool))[M.ADV_SIGN_FLIP_FRAC] == 0.0


# ---- NSR / W-REINFORCE -----------------------------------------------------------------------------------------------
def test_sign_weight_by_hand():
    adv = _t(1.2, -0.7, 0.0, 0.4)
    assert sign_weight(adv, 0.0).tolist() == [0.0, 1.0, 1.0, 0.0]
    assert sign_weight(adv, 0.1).tolist() == [0.1, 1.0, 1.0, 0.1]


@pytest.mark.parametrize(("lam", "expected"), [(None, -0.375), (0.0, 0.375), (0.1, 0.3)])
def test_nsr_loss_and_gradient_by_hand(lam, expected):
    """A = [1, −0.5, 2, −1], every response 2 tokens, ratio 1 (ℓ = −A), seq_mean_token_mean with B = 4 for every λ:
    GRPO −(1 − 0.5 + 2 − 1)/4; NSR −(−0.5 − 1)/4; W-REINFORCE λ = 0.1: −(0.1 − 0.5 + 0.2 − 1)/4.
    ∂L/∂log π_it = −w_i·A_i/(B·T_i)."""
    s = ObjectiveSettings.preset("grpo", positive_weight=lam)
    adv = _t(1.0, -0.5, 2.0, -1.0)
    logp = torch.zeros(4, 2, dtype=F64, requires_grad=True)
    out = policy_loss(logp, logp.detach(), adv, torch.ones(4, 2), s)
    assert out.loss.item() == pytest.approx(expected, abs=1e-12)
    out.loss.backward()
    w = [1.0, 1.0, 1.0, 1.0] if lam is None else [lam, 1.0, lam, 1.0]
    assert logp.grad[:, 0].tolist() == pytest.approx([-wi * a / (4 * 2) for wi, a in zip(w, adv.tolist())], abs=1e-12)


def test_positive_weight_out_of_range_is_a_one_line_error():
    for bad in (-0.1, 1.5):
        with pytest.raises(ValidationError, match="positive_weight"):
            ObjectiveSettings.preset("grpo", positive_weight=bad)
    with pytest.raises(ValidationError, match=r"trl cannot express .*objective.positive_weight: 0.1"):
        RunConfig.model_validate({"objective": {"preset": "grpo", "positive_weight": 0.1}, "train": {"engine": "trl"}})


def _flat_batch(seed: int):
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(8, 7, 5, generator=g, dtype=F64).requires_grad_(True)
    tokens = torch.randint(0, 5, (8, 7), generator=g)
    mask = (torch.arange(7) < torch.tensor([7, 3, 5, 1, 7, 4, 0, 6])[:, None]).long()
    old = token_logprobs(logits.detach(), tokens) + 0.3 * torch.randn(8, 7, generator=g, dtype=F64)
    adv = _t(1.2, -0.7, 0.0, 0.4, -1.5, 0.9, 0.3, -0.2)
    return logits, tokens, mask, old, adv


@pytest.mark.parametrize("lam", [0.0, 0.1])
@pytest.mark.parametrize("mode", AGGREGATIONS.names())
def test_nsr_is_micro_batch_invariant(mode, lam):
    s = ObjectiveSettings.preset(
        "grpo", aggregation=mode, max_len=8, positive_weight=lam, clip_low=0.05, clip_high=0.06
    )
    logits, tokens, mask, old, adv = _flat_batch(0)
    loss1, grad1, metrics1 = _loss_and_grad(s, logits, tokens, mask, old, adv, torch.arange(8))
    for splits in (2, 4, 8):
        loss_k, grad_k, metrics_k = _loss_and_grad(s, logits, tokens, mask, old, adv, torch.arange(8), splits)
        assert abs(loss_k - loss1) < 1e-10 and (grad_k - grad1).abs().max().item() < 1e-10
        assert metrics_k == pytest.approx(metrics1, abs=1e-10)


@pytest.mark.parametrize("mode", AGGREGATIONS.names())
def test_nsr_changes_the_update_relative_to_grpo_and_keeps_the_normaliser(mode):
    """Same tensors: NSR's gradient differs from GRPO's, is 0 on the A > 0 responses and equal to GRPO's on the
    others (the normaliser still counts every response); W-REINFORCE's is λ × GRPO's on A > 0."""
    logits, tokens, mask, old, adv = _flat_batch(1)
    everyone, positive = torch.arange(8), adv > 0
    grads = {}
    for lam in (None, 0.0, 0.1):
        s = ObjectiveSettings.preset("grpo", aggregation=mode, max_len=8, positive_weight=lam)
        grads[lam] = _loss_and_grad(s, logits, tokens, mask, old, adv, everyone)[1]
    assert (grads[0.0] - grads[None]).abs().max().item() > 1e-3
    assert grads[0.0][positive].abs().max().item() == 0
    assert torch.allclose(grads[0.0][~positive], grads[None][~positive], atol=1e-12)
    assert torch.allclose(grads[0.1][positive], 0.1 * grads[None][positive], atol=1e-12)


# ---- the loop: G + 1 sampled per group, the pivot out of the update --------------------------------------------------
REWARDS = {"p0": [0.3, 0.0, 1.0, 0.2, 0.1], "p1": [1.0, 0.0, 0.0, 1.0, 0.0]}
"""Each problem's reward by sample index. p0: median 0.2 (pivot index 3); p1: median 0 (pivot index 1, the first 0)."""


def _fake_trainer(objective: ObjectiveSettings, group_size: int = 4, **train):
    settings = TrainerSettings(
        objective,
        RolloutConfig(prompts_per_step=2, group_size=group_size, max_new_tokens=8),
        TrainConfig(steps=1, device="cpu", reference_kl=False, **train),
        0,
    )
    backend = FakeBackend()
    tr = Trainer(FakeLM(), TableTask(REWARDS), backend, 0, settings)
    seen = []
    update = tr.update

    def spy(step, t, advantages, mask, *precomputed):
        seen.append((t, advantages.tolist(), mask))
        return update(step, t, advantages, mask, *precomputed)

    tr.update = spy
    return tr, backend, seen


def test_the_loop_samples_g_plus_one_and_trains_on_g():
    tr, backend, seen = _fake_trainer(ObjectiveSettings.preset("grpo", max_len=8, **MC))
    metrics = tr.step(1)
    assert [len(c) for c in backend.calls] == [2 * 5]  # prompts_per_step × (G + 1)
    ((t, adv, mask),) = seen
    assert mask.shape[0] == 2 * 4  # B = prompts_per_step × G
    # the trained responses are every sample but the pivots (p0: index 3, p1: index 1), in sampling order
    P = int(t["prompt_len"])
    assert [int(t["ids"][i, P]) - 10 for i in range(8)] == [0, 1, 2, 4, 0, 2, 3, 4]
    # A = R − median: p0 [0.1, −0.2, 0.8, −0.1] (0.2 out), p1 [1, 0, 1, 0] (the first 0 out)
    assert adv == pytest.approx([0.1, -0.2, 0.8, -0.1, 1.0, 0.0, 1.0, 0.0], abs=1e-6)
    # on-policy (ratio 1): L = −(1/B) Σ_i A_i with B = 8 (G + 1 = 10 would give −0.26)
    assert metrics[M.LOSS] == pytest.approx(-2.6 / 8, abs=1e-6)
    assert metrics[M.ADV_SIGN_FLIP_FRAC] == pytest.approx(1 / 8)  # p0's 0.3: above the median, below the mean 0.32
    assert metrics[M.ADV_ZERO_FRAC] == pytest.approx(2 / 8)  # over the trained responses (the pivots are out)
    rows = tr.rollout_table()
    assert len(rows) == 10 and rows["kept"].all() and rows["advantage"].notna().all()
    assert rows.groupby("prompt_id")["sample_index"].max().tolist() == [4, 4]


def test_without_the_pivot_the_loop_samples_and_trains_on_g():
    tr, backend, seen = _fake_trainer(ObjectiveSettings.preset("grpo", advantage="group_median", max_len=8))
    metrics = tr.step(1)
    assert [len(c) for c in backend.calls] == [2 * 4]
    ((t, adv, mask),) = seen
    assert mask.shape[0] == 8 and M.ADV_SIGN_FLIP_FRAC in metrics


def test_the_loop_update_with_the_pivot_does_not_depend_on_micro_batches():
    params = []
    for micro, buckets in ((None, 1), (3, 1), (None, 3)):
        tr, _, _ = _fake_trainer(
            ObjectiveSettings.preset("grpo", max_len=8, **MC), micro_batch_size=micro, length_buckets=buckets
        )
        tr.step(1)
        params.append(torch.cat([p.detach().flatten() for p in tr.policy.parameters()]))
    for p in params[1:]:
        assert (p - params[0]).abs().max().item() < 1e-6
    start = torch.cat([p.detach().flatten() for p in FakeLM().parameters()])
    assert (params[0] - start).abs().max().item() > 1e-6  # the step moved the weights


def test_nsr_in_the_loop_trains_only_below_the_baseline():
    """All A > 0 responses weigh 0: the loop's loss is −(1/B) Σ_{A_i ≤ 0} A_i (p0: −0.2, −0.1; p1: none)."""
    tr, _, _ = _fake_trainer(ObjectiveSettings.preset("grpo", max_len=8, positive_weight=0.0, **MC))
    assert tr.step(1)[M.LOSS] == pytest.approx(0.3 / 8, abs=1e-6)


def test_trl_s_callback_logs_the_sign_flips_from_its_rewards_and_advantages():
    """TRL's baselines are group means: its own advantages reverse nothing (0); advantages that do are counted."""
    pytest.importorskip("trl")
    from harness.integrations.trl import HarnessCallback

    class Fake:
        reward_func_names = ["accuracy"]
        num_generations, eos_token_ids = 5, [1]
        accelerator = SimpleNamespace(is_main_process=False)  # logs through on_step only
        args = SimpleNamespace(sync_ref_model=False)  # no reference refresh to log

        def __init__(self, advantages):
            self._logs = {"advantages": advantages}

        def _calculate_rewards(self, *a):
            return None

    rewards = [0.3, 0.0, 1.0, 0.2, 0.1]
    logged = []
    for advantages, flips in (([r - 0.32 for r in rewards], 0.0), ([r - 0.2 for r in rewards], 0.2)):
        cb = HarnessCallback(Fake(advantages), tracker=object(), on_step=lambda step, m: logged.append(m))
        cb.step, cb.rows = 1, [{"step": 1, "shaped_reward": r} for r in rewards]
        cb._finish_step()
        assert logged.pop()[M.ADV_SIGN_FLIP_FRAC] == pytest.approx(flips)
