"""The KL forms of issue 65: the abs estimator, the KL term's gradient forms (objective.kl_gradient) and the adaptive
KL coefficient (objective.kl_target, kl_horizon): by hand, across micro-batches, in the update and in the loop."""

import math
from pathlib import Path

import pytest
import torch
from fake_loop import FakeBackend, FakeLM, TableTask

from harness.config.run_config import LATER_FIELDS, load_run_config
from trainer import metric_names as M
from trainer.config import RolloutConfig, TrainConfig
from trainer.loop import Trainer, TrainerSettings
from trainer.objective import (
    KL_ESTIMATORS,
    KLCoefficient,
    Normaliser,
    ObjectiveSettings,
    adaptive_kl_coef,
    merge_metrics,
    policy_loss,
)

TOY_RUN = Path(__file__).resolve().parents[1] / "ablations" / "toy_run.yaml"

# One response of three tokens: log r = log π_θ − log π_ref = [0.5, −1, 0.2], log ρ = log π_θ − log π_old =
# [0.1, 3, −0.2] (ρ_1 = e³ = 20.1, above OpenRLHF's cap of 10).
LOG_R = [0.5, -1.0, 0.2]
LOG_RHO = [0.1, 3.0, -0.2]
LOGP = torch.tensor([[-1.0, -2.0, -0.5]], dtype=torch.float64)
REF = LOGP - torch.tensor([LOG_R], dtype=torch.float64)
OLD = LOGP - torch.tensor([LOG_RHO], dtype=torch.float64)
MASK = torch.ones(1, 3, dtype=torch.float64)


def _k3(x: float) -> float:
    return math.exp(-x) - 1 + x


def _kl_term(form: str, estimator: str = "k3", ratio: str = "token") -> tuple[list[float], list[float]]:
    """(β·KL_t per token, ∂L/∂log π_θ(o_t)) of `policy_loss` with β = 1, A = 0 (no surrogate term) and the
    token-sum aggregation, so each token's loss is its KL term."""
    s = ObjectiveSettings.preset(
        "grpo", kl_coef=1.0, kl_estimator=estimator, kl_gradient=form, ratio=ratio, aggregation="token_sum"
    )
    values = []
    for t in range(3):  # one token's term at a time, the others masked
        mask = torch.zeros_like(MASK)
        mask[0, t] = 1
        values.append(policy_loss(LOGP, OLD, torch.zeros(1), mask, s, ref_logp=REF).loss.item())
    logp = LOGP.clone().requires_grad_(True)
    policy_loss(logp, OLD, torch.zeros(1), MASK, s, ref_logp=REF).loss.backward()
    return values, logp.grad[0].tolist()


def test_abs_by_hand():
    logp = LOGP.clone().requires_grad_(True)
    value = KL_ESTIMATORS["abs"](logp, REF)
    value.sum().backward()
    assert value[0].tolist() == pytest.approx([0.5, 1.0, 0.2], abs=1e-12)
    assert logp.grad[0].tolist() == [1.0, -1.0, 1.0]  # sign(log r)


def test_the_estimators_own_gradient_by_hand():
    values, grads = _kl_term("estimator")
    assert values == pytest.approx([_k3(x) for x in LOG_R], abs=1e-12)  # 0.1065, 0.7183, 0.0187
    assert grads == pytest.approx([1 - math.exp(-x) for x in LOG_R], abs=1e-12)  # ∂k3 = 1 − 1/r


@pytest.mark.parametrize("estimator", ["k1", "k3", "abs"])
def test_k2_straight_through_keeps_the_value_with_log_r_as_gradient(estimator):
    """verl's k1+, k3+ and abs+: the estimator's value, k2's gradient ∂½(log r)² = log r."""
    values, grads = _kl_term("k2_straight_through", estimator)
    plain, _ = _kl_term("estimator", estimator)
    assert values == pytest.approx(plain, abs=1e-12)
    assert grads == pytest.approx(LOG_R, abs=1e-12)


def test_trl_bias_correction_by_hand():
    """ρ·k3 with ρ differentiable: value e^{log ρ}·k3, gradient ρ·(k3 + 1 − 1/r) = ρ·log r."""
    values, grads = _kl_term("trl_bias_correction")
    assert values == pytest.approx([math.exp(p) * _k3(x) for x, p in zip(LOG_R, LOG_RHO)], abs=1e-12)
    assert grads == pytest.approx([math.exp(p) * x for x, p in zip(LOG_R, LOG_RHO)], abs=1e-12)
    assert grads[1] == pytest.approx(-20.0855369, abs=1e-6)


def test_trl_bias_correction_at_the_sequence_level_weighs_every_token_by_the_responses_ratio():
    """ρ = s = exp(mean log ρ) = e^{2.9/3} on every token; ∂(s·Σ k3)/∂log π_t = s·(Σ k3)/3 + s·(1 − 1/r_t)."""
    _, grads = _kl_term("trl_bias_correction", ratio="sequence")
    s = math.exp(sum(LOG_RHO) / 3)
    total = sum(_k3(x) for x in LOG_R)
    settings = ObjectiveSettings.preset(
        "grpo", kl_coef=1.0, kl_gradient="trl_bias_correction", ratio="sequence", aggregation="token_sum"
    )
    loss = policy_loss(LOGP, OLD, torch.zeros(1), MASK, settings, ref_logp=REF).loss.item()
    assert loss == pytest.approx(s * total, abs=1e-12)
    assert grads == pytest.approx([s * total / 3 + s * (1 - math.exp(-x)) for x in LOG_R], abs=1e-12)


@pytest.mark.parametrize("estimator", ["k1", "k3"])
def test_openrlhf_unbiased_gradient_by_hand(estimator):
    """The estimator's value; gradient min(ρ, 10)·log r, whatever the estimator."""
    values, grads = _kl_term("openrlhf_unbiased_gradient", estimator)
    plain, _ = _kl_term("estimator", estimator)
    assert values == pytest.approx(plain, abs=1e-12)
    assert grads == pytest.approx([min(math.exp(p), 10.0) * x for x, p in zip(LOG_R, LOG_RHO)], abs=1e-12)
    assert grads[1] == -10.0  # ρ = 20.1, capped


def test_trl_and_openrlhf_share_the_gradient_where_the_cap_does_not_bind():
    _, trl = _kl_term("trl_bias_correction")
    _, openrlhf = _kl_term("openrlhf_unbiased_gradient")
    assert [trl[0], trl[2]] == pytest.approx([openrlhf[0], openrlhf[2]], abs=1e-12)
    assert trl[1] != pytest.approx(openrlhf[1])  # ρ = 20.1: TRL's weight is not capped


# ---- across micro-batches, and in the update ----------------------------------------------------------------------
G = torch.Generator().manual_seed(3)
B_LOGP = torch.randn(4, 5, generator=G, dtype=torch.float64) - 1
B_OLD = B_LOGP + 0.3 * torch.randn(4, 5, generator=G, dtype=torch.float64)
B_REF = B_LOGP + 0.5 * torch.randn(4, 5, generator=G, dtype=torch.float64)
B_MASK = (torch.arange(5) < torch.tensor([5, 2, 4, 3])[:, None]).to(torch.float64)
B_ADV = torch.tensor([1.0, -0.5, 0.3, -1.2], dtype=torch.float64)
FORMS = ["estimator", "k2_straight_through", "trl_bias_correction", "openrlhf_unbiased_gradient"]


def _loss_and_grad(s, rows_split=None):
    logp = B_LOGP.clone().requires_grad_(True)
    if rows_split is None:
        out = policy_loss(logp, B_OLD, B_ADV, B_MASK, s, ref_logp=B_REF)
        out.loss.backward()
        return out.loss.item(), logp.grad, {k: v.item() for k, v in out.metrics.items()}
    norm, total, parts = Normaliser.from_mask(B_MASK), 0.0, []
    for rows in rows_split:
        out = policy_loss(logp[rows], B_OLD[rows], B_ADV[rows], B_MASK[rows], s, ref_logp=B_REF[rows], norm=norm)
        out.loss.backward()
        total += out.loss.item()
        parts.append(out.metrics)
    return total, logp.grad, merge_metrics(parts)


@pytest.mark.parametrize("ratio", ["token", "sequence"])
@pytest.mark.parametrize("form", FORMS)
def test_each_form_is_the_same_over_micro_batches(form, ratio):
    s = ObjectiveSettings.preset("grpo", kl_coef=0.2, kl_gradient=form, ratio=ratio, clip_low=0.9, clip_high=9.0)
    whole, grad, metrics = _loss_and_grad(s)
    split, grad_split, metrics_split = _loss_and_grad(s, [torch.tensor([0, 2]), torch.tensor([1, 3])])
    assert split == pytest.approx(whole, abs=1e-12)
    torch.testing.assert_close(grad_split, grad, rtol=0, atol=1e-12)
    assert metrics_split == pytest.approx(metrics)


@pytest.mark.parametrize("form", FORMS[1:])
def test_each_form_changes_the_update_and_not_the_kl_metric(form):
    base = ObjectiveSettings.preset("grpo", kl_coef=0.2, clip_low=0.9, clip_high=9.0)
    _, plain, plain_metrics = _loss_and_grad(base)
    _, grad, metrics = _loss_and_grad(base.model_copy(update={"kl_gradient": form}))
    assert (grad - plain).abs().max().item() > 1e-3
    assert metrics[M.KL] == pytest.approx(plain_metrics[M.KL], abs=1e-12)  # policy/kl is the estimator's value


def test_abs_changes_the_update():
    base = ObjectiveSettings.preset("grpo", kl_coef=0.2)
    _, k3, _ = _loss_and_grad(base)
    _, absolute, metrics = _loss_and_grad(base.model_copy(update={"kl_estimator": "abs"}))
    assert (absolute - k3).abs().max().item() > 1e-3
    assert metrics[M.KL] == pytest.approx((B_LOGP - B_REF).abs()[B_MASK.bool()].mean().item(), abs=1e-12)


# ---- the adaptive coefficient -------------------------------------------------------------------------------------
def test_the_controller_by_hand():
    # β·(1 + clip(KL/target − 1, ±0.2)·n/H): error 2 → 0.2 up; 0.09/0.1 − 1 = −0.1; 0 → −0.2 (clipped at −1 → −0.2)
    assert adaptive_kl_coef(0.1, 0.3, 0.1, 640, 64) == pytest.approx(0.1 * 1.02, abs=1e-15)
    assert adaptive_kl_coef(0.1, 0.09, 0.1, 640, 64) == pytest.approx(0.1 * (1 - 0.01), abs=1e-15)
    assert adaptive_kl_coef(0.1, 0.0, 0.1, 640, 64) == pytest.approx(0.1 * 0.98, abs=1e-15)
    assert adaptive_kl_coef(0.1, 0.1, 0.1, 640, 64) == 0.1  # at the target: unchanged


def test_the_coefficient_adapts_the_reward_when_the_reward_has_a_kl_else_the_loss():
    both = KLCoefficient.of(
        ObjectiveSettings.preset("grpo", kl_coef=0.05, kl_reward_coef=0.1, kl_target=0.1, kl_horizon=640)
    )
    assert both.metrics() == {M.KL_REWARD_COEF: 0.1}
    both.update({M.KL_REWARD_MEAN: 0.3, M.KL: 0.0}, 64)
    assert (both.loss, both.reward) == (0.05, pytest.approx(0.102))  # verl: the loss's β stays fixed
    loss = KLCoefficient.of(ObjectiveSettings.preset("grpo", kl_coef=0.05, kl_target=0.1, kl_horizon=640))
    loss.update({M.KL: 0.0}, 64)
    assert loss.metrics() == {M.KL_COEF: pytest.approx(0.05 * 0.98)}
    loss.update({}, 64)  # a step that trained nothing: no policy/kl, β stays
    assert loss.loss == pytest.approx(0.05 * 0.98)
    fixed = KLCoefficient.of(ObjectiveSettings.preset("grpo", kl_coef=0.05))
    fixed.update({M.KL: 9.0}, 64)
    assert (fixed.loss, fixed.metrics()) == (0.05, {})


def test_the_new_fields_enter_a_job_id_only_when_set():
    new = {"kl_gradient": "estimator", "kl_target": None, "kl_horizon": None}
    assert all(LATER_FIELDS[f"objective.{k}"] == v for k, v in new.items())
    for name in ("grpo", "dr_grpo", "dapo", "gspo"):
        objective = load_run_config(TOY_RUN, [f"objective.preset={name}"]).identity()["objective"]
        assert not set(new) & set(objective), name
    sets = ["objective.kl_coef=0.01", "objective.kl_gradient=openrlhf_unbiased_gradient"]
    sets += ["objective.kl_target=0.1", "objective.kl_horizon=1000"]
    objective = load_run_config(TOY_RUN, sets).identity()["objective"]
    assert (objective["kl_gradient"], objective["kl_target"], objective["kl_horizon"]) == (
        "openrlhf_unbiased_gradient",
        0.1,
        1000,
    )


# ---- the loop -------------------------------------------------------------------------------------------------
def _trainer(objective: ObjectiveSettings) -> Trainer:
    settings = TrainerSettings(
        objective,
        RolloutConfig(prompts_per_step=2, group_size=4, max_new_tokens=8),
        TrainConfig(steps=3, device="cpu", reference_kl=False, lr=0.05),
        0,
    )
    tr = Trainer(FakeLM(), TableTask({"p0": [1.0, 0.0] * 3, "p1": [0.0, 1.0] * 3}), FakeBackend(), 0, settings)
    with torch.no_grad():  # a reference the policy has moved away from
        tr.ref.out.bias.copy_(torch.linspace(-1.0, 1.0, 32))
    return tr


@pytest.mark.parametrize(
    "over, coef, measured",
    [
        ({"kl_reward_coef": 0.5}, M.KL_REWARD_COEF, M.KL_REWARD_MEAN),
        ({"kl_coef": 0.5}, M.KL_COEF, M.KL),
    ],
)
def test_the_loop_carries_the_coefficient_from_step_to_step(over, coef, measured):
    """Each step logs the β it applied; the next applies Ziegler's update of it on the step's KL and its 8 responses
    (a target far below the KL: β rises by 0.2·8/40 = 4 % a step)."""
    tr = _trainer(ObjectiveSettings.preset("grpo", max_len=8, kl_target=1e-6, kl_horizon=40, **over))
    steps = [tr.step(k) for k in (1, 2, 3)]
    assert steps[0][coef] == 0.5
    for before, after in zip(steps, steps[1:]):
        assert after[coef] == pytest.approx(adaptive_kl_coef(before[coef], before[measured], 1e-6, 40, 8), abs=1e-15)
        assert after[coef] == pytest.approx(before[coef] * 1.04, abs=1e-15)
    assert {coef, measured} <= M.ALL


def test_a_fixed_coefficient_logs_no_coefficient():
    metrics = _trainer(ObjectiveSettings.preset("grpo", max_len=8, kl_reward_coef=0.5)).step(1)
    assert M.KL_REWARD_COEF not in metrics and M.KL_COEF not in metrics and M.KL_REWARD_MEAN in metrics
