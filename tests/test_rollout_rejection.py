"""The rollout rejection (objective.rollout_rejection, verl's `rollout_rs`) and the rollout weights' batch mean
(objective.rollout_correction_batch_normalize, verl's `rollout_is_batch_normalize`): each criterion against numbers
worked out by hand, how a rejected token leaves the loss and its normalisers, micro-batch invariance, the loop, the
settings' one-line errors, TRL's refusal and the job ids. `benchmarks/rollout_rejection_vs_verl.py` compares both
with verl's own functions."""

import math
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from fake_loop import assert_splits_agree

from harness.config.run_config import LATER_FIELDS, load_run_config
from trainer import metric_names as M
from trainer.objective import (
    AGGREGATIONS,
    ROLLOUT_REJECTIONS,
    Normaliser,
    ObjectiveSettings,
    kept_tokens,
    merge_metrics,
    policy_loss,
    rollout_weight_mean,
    token_logprobs,
)
from trainer.objective.rejection import log_gap, rollout_keep

TOY_RUN = Path(__file__).resolve().parents[1] / "ablations" / "toy_run.yaml"
D = torch.float64

# Two responses, the second one token shorter; log r = log π_old − log π_rollout per token:
#   response 0: 0.1, −0.2, 0.5      response 1: 0.0, 0.3 (then padding)
# k1 = −log r:            −0.1, 0.2, −0.5         0, −0.3
# k2 = ½(log r)²:         0.005, 0.02, 0.125      0, 0.045
# k3 = e^x − 1 − x:       0.0051709, 0.0187308, 0.1487213      0, 0.0498588
OLD = torch.tensor([[-1.0, -2.0, -0.5], [-1.5, -0.7, 0.0]], dtype=D)
LOG_R = torch.tensor([[0.1, -0.2, 0.5], [0.0, 0.3, 9.0]], dtype=D)  # 9.0 sits on padding: never read
ROLLOUT = OLD - LOG_R
MASK = torch.tensor([[1, 1, 1], [1, 1, 0]])


@pytest.mark.parametrize(
    "criterion, low, high, keep",
    [
        # each token's π_rollout/π_old = e^k1 within [0.8, 1.25] (low = 1/high): e^−0.5 and e^−0.3 fall below 0.8
        ("token_k1", None, 1.25, [[1, 1, 0], [1, 0, 1]]),
        ("token_k1", 0.55, 1.1, [[1, 0, 1], [1, 1, 1]]),  # [log 0.55, log 1.1] = [−0.598, 0.0953]: 0.2 is out
        ("token_k2", None, 0.03, [[1, 1, 0], [1, 0, 1]]),  # 0.125 and 0.045 exceed 0.03
        ("token_k2", None, 0.02, [[1, 1, 0], [1, 0, 1]]),  # 0.02 ≤ 0.02 is kept: the bound is inclusive
        ("token_k3", None, 0.01, [[1, 0, 0], [1, 0, 1]]),  # 0.0187 too
        # sums: k1 −0.4 and −0.3; k2 0.15 and 0.045; k3 0.1726229 and 0.0498588
        ("seq_sum_k1", None, 1.25, [[0, 0, 0], [0, 0, 0]]),  # both below log 0.8 = −0.223
        ("seq_sum_k1", 0.7, 1.25, [[0, 0, 0], [1, 1, 1]]),  # log 0.7 = −0.357: −0.3 is in, −0.4 out
        ("seq_sum_k2", None, 0.1, [[0, 0, 0], [1, 1, 1]]),
        ("seq_sum_k3", None, 0.1, [[0, 0, 0], [1, 1, 1]]),
        ("seq_sum_k3", None, 0.2, [[1, 1, 1], [1, 1, 1]]),
        # means: k1 −0.1333 and −0.15 (geometric-mean ratios e^0.1333, e^0.15); k2 0.05 and 0.0225; k3 0.0575, 0.0249
        ("seq_mean_k1", None, 1.15, [[1, 1, 1], [0, 0, 0]]),  # log 1.15 = 0.1398: −0.15 is out
        ("seq_mean_k2", None, 0.03, [[0, 0, 0], [1, 1, 1]]),
        ("seq_mean_k3", None, 0.05, [[0, 0, 0], [1, 1, 1]]),
        # largest: k2 0.125 and 0.045; k3 0.1487 and 0.0498588
        ("seq_max_k2", None, 0.05, [[0, 0, 0], [1, 1, 1]]),
        ("seq_max_k3", None, 0.05, [[0, 0, 0], [1, 1, 1]]),
        ("seq_max_k3", None, 0.049, [[0, 0, 0], [0, 0, 0]]),
    ],
)
def test_each_criterion_keeps_what_the_hand_computed_statistic_allows(criterion, low, high, keep):
    got = rollout_keep(OLD, ROLLOUT, MASK, criterion, low, high)
    assert got.dtype == torch.bool and got.shape == MASK.shape
    assert got.long().tolist() == keep


def test_the_statistics_by_hand():
    """The three estimators per token, and a response's sum, mean and largest over its loss tokens only."""
    log_r = log_gap(OLD, ROLLOUT, MASK)
    assert log_r.flatten().tolist() == pytest.approx([0.1, -0.2, 0.5, 0.0, 0.3, 0.0], abs=1e-12)  # padding read as 0
    from trainer.objective.rejection import _k1, _k2, _k3, _seq_max, _seq_mean, _seq_sum

    k3 = [math.exp(x) - 1 - x for x in (0.1, -0.2, 0.5, 0.0, 0.3)]
    assert _k3(log_r)[MASK.bool()].tolist() == pytest.approx(k3, abs=1e-12)
    assert _seq_sum(_k1(log_r), MASK).flatten().tolist() == pytest.approx([-0.4, -0.3], abs=1e-12)
    assert _seq_mean(_k2(log_r), MASK).flatten().tolist() == pytest.approx([0.05, 0.0225], abs=1e-12)
    assert _seq_max(_k3(log_r), MASK).flatten().tolist() == pytest.approx([k3[2], k3[4]], abs=1e-12)


def test_a_response_without_loss_tokens_has_statistic_zero_and_log_r_is_clamped():
    """verl's conventions: an empty response's sum, mean and max are 0; |log r| is clamped to 20 (k3 stays
    finite)."""
    empty = torch.zeros(1, 3, dtype=torch.long)
    for name in ROLLOUT_REJECTIONS.names():
        low = 0.5 if name.endswith("k1") else None
        assert rollout_keep(OLD[:1], ROLLOUT[:1], empty, name, low, 2.0).all(), name  # 0 lies inside every band
    assert not rollout_keep(OLD[:1], ROLLOUT[:1], empty, "seq_sum_k1", 1.5, 2.0).any()  # [log 1.5, log 2] has no 0
    huge = torch.tensor([[40.0]], dtype=D)
    one = torch.ones(1, 1, dtype=torch.long)
    assert log_gap(huge, torch.zeros(1, 1, dtype=D), one).item() == 20.0
    assert rollout_keep(huge, torch.zeros(1, 1, dtype=D), one, "token_k3", None, math.exp(20) - 20).all()
    assert not rollout_keep(huge, torch.zeros(1, 1, dtype=D), one, "token_k3", None, math.exp(20) - 22).any()


def test_a_rejected_token_leaves_the_loss_and_its_normalisers():
    """At r = 1 (π_θ = π_old) the clipped surrogate's gradient is −A per token over the normaliser. token_k2 at 0.03
    keeps tokens 0 and 1 of response 0 and token 0 of response 1 (3 of 5): token_mean divides by 3, and
    seq_mean_token_mean by each response's kept count T_i (2 and 1) and by B = 2."""
    adv = torch.tensor([1.0, -2.0], dtype=D)
    for aggregation, grads in [
        ("token_mean", [[-1 / 3, -1 / 3, 0], [2 / 3, 0, 0]]),
        ("seq_mean_token_mean", [[-1 / 4, -1 / 4, 0], [1.0, 0, 0]]),
        ("seq_mean_token_sum", [[-1 / 2, -1 / 2, 0], [1.0, 0, 0]]),
        ("constant", [[-1 / 8, -1 / 8, 0], [2 / 8, 0, 0]]),  # B·L_max = 2·4
    ]:
        s = ObjectiveSettings.preset(
            "grpo", aggregation=aggregation, max_len=4, rollout_rejection="token_k2", rollout_rejection_max=0.03
        )
        logp = OLD.clone().requires_grad_(True)
        out = policy_loss(logp, OLD, adv, MASK, s, rollout_logp=ROLLOUT)
        out.loss.backward()
        assert logp.grad.flatten().tolist() == pytest.approx(sum(grads, []), abs=1e-12), aggregation
        assert out.metrics[M.ROLLOUT_REJECTED_FRAC].item() == pytest.approx(2 / 5, abs=1e-12)


def test_a_response_rejected_whole_still_counts_in_b():
    """seq_sum_k2 at 0.1 rejects response 0 (Σ k2 = 0.15): its three tokens leave the loss, but B = 2 still counts
    it (verl's `global_batch_size`), so response 1's two tokens get −A/(T_1·B) = 2/(2·2)."""
    s = ObjectiveSettings.preset("grpo", max_len=4, rollout_rejection="seq_sum_k2", rollout_rejection_max=0.1)
    logp = OLD.clone().requires_grad_(True)
    out = policy_loss(logp, OLD, torch.tensor([1.0, -2.0], dtype=D), MASK, s, rollout_logp=ROLLOUT)
    out.loss.backward()
    assert logp.grad.flatten().tolist() == pytest.approx([0, 0, 0, 0.5, 0.5, 0], abs=1e-12)
    assert out.metrics[M.ROLLOUT_REJECTED_FRAC].item() == pytest.approx(3 / 5, abs=1e-12)
    norm = Normaliser.from_mask(MASK, 4, kept=kept_tokens(OLD, ROLLOUT, MASK, s))
    assert (norm.num_sequences, norm.num_tokens, norm.num_scored, norm.num_rejected) == (2, 2, 1, 3)


def test_the_rejection_changes_the_update_and_is_a_no_op_when_off_or_when_it_keeps_all():
    adv = torch.tensor([1.0, -2.0], dtype=D)
    grads = {}
    for name, over in [
        ("off", {}),
        ("keeps_all", {"rollout_rejection": "seq_max_k3", "rollout_rejection_max": 1.0}),
        ("rejects", {"rollout_rejection": "token_k3", "rollout_rejection_max": 0.01}),
    ]:
        s = ObjectiveSettings.preset("dapo", max_len=10, **over)
        logp = OLD.clone().requires_grad_(True)
        # off, the rollout engine's log-probabilities are not read: wild ones change nothing
        rollout = ROLLOUT if over else ROLLOUT + 5.0
        out = policy_loss(logp, OLD, adv, MASK, s, rollout_logp=rollout)
        out.loss.backward()
        grads[name] = (out.loss.item(), logp.grad.clone(), out.metrics)
    assert M.ROLLOUT_REJECTED_FRAC not in grads["off"][2]
    assert grads["keeps_all"][2][M.ROLLOUT_REJECTED_FRAC].item() == 0.0
    assert grads["keeps_all"][0] == grads["off"][0] and torch.equal(grads["keeps_all"][1], grads["off"][1])
    assert not torch.allclose(grads["rejects"][1], grads["off"][1])
    assert grads["rejects"][2][M.ROLLOUT_REJECTED_FRAC].item() == pytest.approx(3 / 5, abs=1e-12)
    s = ObjectiveSettings.preset("dapo", max_len=10, rollout_rejection="token_k3", rollout_rejection_max=0.01)
    with pytest.raises(ValueError, match="rollout engine's log-probabilities"):
        policy_loss(OLD.clone().requires_grad_(True), OLD, adv, MASK, s)


# ---- the rollout weights' batch mean ----------------------------------------------------------------------------
def test_the_batch_mean_of_token_and_response_weights_by_hand():
    """Token weights e^0.1, e^−0.2, e^0.5, 1, e^0.3 truncated at 1.5 average 1.2219…/5 tokens; response weights
    e^0.4 = 1.4918 and e^0.3 = 1.3499, one each whatever their lengths."""
    token = ObjectiveSettings.preset(
        "grpo", rollout_correction="token_truncate", rollout_correction_max=1.5, rollout_correction_batch_normalize=True
    )
    weights = [math.exp(0.1), math.exp(-0.2), 1.5, 1.0, math.exp(0.3)]
    assert rollout_weight_mean(OLD, ROLLOUT, MASK, token) == pytest.approx(sum(weights) / 5, abs=1e-12)
    seq = token.model_copy(update={"rollout_correction": "sequence_truncate", "rollout_correction_max": 2.0})
    assert rollout_weight_mean(OLD, ROLLOUT, MASK, seq) == pytest.approx((math.exp(0.4) + math.exp(0.3)) / 2)
    masked = token.model_copy(update={"rollout_correction": "token_mask", "rollout_correction_max": 1.2})
    assert rollout_weight_mean(OLD, ROLLOUT, MASK, masked) == pytest.approx(  # e^0.5 and e^0.3 masked to 0
        (math.exp(0.1) + math.exp(-0.2) + 1.0) / 5, abs=1e-12
    )
    nothing = masked.model_copy(update={"rollout_correction_max": 0.5})  # every weight masked: mean 0 → no scaling
    assert rollout_weight_mean(OLD, ROLLOUT, MASK, nothing) == 1.0


def test_normalised_weights_average_one_and_scale_the_gradient():
    s = ObjectiveSettings.preset(
        "grpo",
        aggregation="token_mean",
        rollout_correction="token_truncate",
        rollout_correction_max=1.5,
        rollout_correction_batch_normalize=True,
    )
    adv = torch.tensor([1.0, 1.0], dtype=D)
    grads = []
    for normalise in (False, True):
        logp = OLD.clone().requires_grad_(True)
        out = policy_loss(
            logp,
            OLD,
            adv,
            MASK,
            s.model_copy(update={"rollout_correction_batch_normalize": normalise}),
            rollout_logp=ROLLOUT,
        )
        out.loss.backward()
        grads.append(logp.grad)
        if normalise:
            assert out.metrics[M.ROLLOUT_WEIGHT_MEAN].item() == pytest.approx(1.0, abs=1e-12)
    mean = rollout_weight_mean(OLD, ROLLOUT, MASK, s)
    assert mean > 1.0 and torch.allclose(grads[1] * mean, grads[0], atol=1e-14)


def test_the_weights_come_from_the_full_response_and_the_mean_from_before_the_rejection():
    """verl computes its rollout weights and their mean from the full response mask, then rejects: a response-level
    weight keeps its rejected tokens' ratios, and the batch mean counts the rejected tokens' weights."""
    s = ObjectiveSettings.preset(
        "grpo",
        aggregation="token_mean",
        rollout_correction="sequence_truncate",
        rollout_correction_max=10.0,
        rollout_correction_batch_normalize=True,
        rollout_rejection="token_k2",
        rollout_rejection_max=0.03,
    )
    adv = torch.tensor([1.0, 1.0], dtype=D)
    logp = OLD.clone().requires_grad_(True)
    policy_loss(logp, OLD, adv, MASK, s, rollout_logp=ROLLOUT).loss.backward()
    mean = (math.exp(0.4) + math.exp(0.3)) / 2  # over both responses, every token of each
    expected = [[-math.exp(0.4) / mean / 3] * 2 + [0], [-math.exp(0.3) / mean / 3, 0, 0]]
    assert logp.grad.flatten().tolist() == pytest.approx(sum(expected, []), abs=1e-12)


# ---- micro-batches --------------------------------------------------------------------------------------------------
def _batch(seed: int = 0, b: int = 8, t: int = 12, v: int = 5):
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(b, t, v, generator=g, dtype=D).requires_grad_(True)
    tokens = torch.randint(0, v, (b, t), generator=g)
    lengths = torch.tensor([12, 3, 7, 1, 12, 5, 0, 9])[:b]
    mask = (torch.arange(t) < lengths[:, None]).long()
    old = token_logprobs(logits.detach(), tokens) + 0.3 * torch.randn(b, t, generator=g, dtype=D)
    rollout = old + 0.25 * torch.randn(b, t, generator=g, dtype=D)
    adv = torch.tensor([1.2, -0.7, 0.0, 0.4, -1.5, 0.9, 0.3, -0.2], dtype=D)[:b]
    return logits, tokens, mask, old, rollout, adv


def _split(s, logits, tokens, mask, old, rollout, adv, splits):
    """Loss, metrics and gradient over `splits` micro-batches, the rejection and the weights' mean taken over the
    whole batch first (as the loop does)."""
    logits.grad = None
    kept = kept_tokens(old, rollout, mask, s)
    norm = Normaliser.from_mask(mask, s.max_len, kept=kept)
    if s.rollout_correction_batch_normalize:
        norm = replace(norm, rollout_weight_mean=rollout_weight_mean(old, rollout, mask, s))
    total, parts = 0.0, []
    for rows in torch.arange(mask.shape[0]).chunk(splits):
        out = policy_loss(
            token_logprobs(logits[rows], tokens[rows]),
            old[rows],
            adv[rows],
            mask[rows],
            s,
            norm=norm,
            rollout_logp=rollout[rows],
            kept=None if kept is None else kept[rows],
        )
        out.loss.backward()
        total += out.loss.item()
        parts.append(out.metrics)
    return total, merge_metrics(parts), logits.grad.clone()


SPLIT_CASES = {
    "token_k1": {"rollout_rejection": "token_k1", "rollout_rejection_max": 1.3},
    "seq_mean_k1": {"rollout_rejection": "seq_mean_k1", "rollout_rejection_min": 0.9, "rollout_rejection_max": 1.05},
    "seq_max_k3": {"rollout_rejection": "seq_max_k3", "rollout_rejection_max": 0.1},
    "normalised_tokens": {
        "rollout_correction": "token_truncate",
        "rollout_correction_max": 1.3,
        "rollout_correction_batch_normalize": True,
    },
    "normalised_responses_with_rejection": {
        "rollout_correction": "sequence_mask",
        "rollout_correction_max": 3.0,
        "rollout_correction_batch_normalize": True,
        "rollout_rejection": "token_k2",
        "rollout_rejection_max": 0.05,
    },
}


@pytest.mark.parametrize("aggregation", AGGREGATIONS.names())
@pytest.mark.parametrize("case", SPLIT_CASES)
def test_micro_batch_invariance(case, aggregation):
    s = ObjectiveSettings.preset("grpo", aggregation=aggregation, max_len=16, clip_low=0.1, clip_high=0.1)
    s = s.model_copy(update=SPLIT_CASES[case])
    batch = _batch()
    metrics = assert_splits_agree(lambda splits: _split(s, *batch, splits=splits))
    if s.rollout_rejection is not None:
        assert 0.05 < metrics[M.ROLLOUT_REJECTED_FRAC] < 0.95  # the check covers a real mix


# ---- the settings ---------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "over, message",
    [
        ({"rollout_rejection": "token_k4", "rollout_rejection_max": 2.0}, "unknown rollout rejection criterion"),
        ({"rollout_rejection": "token_k2"}, "rollout_rejection_max is set exactly when rollout_rejection is"),
        ({"rollout_rejection_max": 2.0}, "rollout_rejection_max is set exactly when rollout_rejection is"),
        ({"rollout_rejection_min": 0.5}, "rollout_rejection_min needs rollout_rejection"),
        (
            {"rollout_rejection": "seq_mean_k3", "rollout_rejection_min": 0.5, "rollout_rejection_max": 0.01},
            "rollout_rejection_min bounds a k1 criterion",
        ),
        (
            {"rollout_rejection": "token_k1", "rollout_rejection_min": 1.5, "rollout_rejection_max": 1.2},
            r"rollout_rejection_min \(1.5\) must not exceed rollout_rejection_max \(1.2\)",
        ),
        ({"rollout_rejection": "seq_sum_k1", "rollout_rejection_max": 0.5}, r"band \[1/max, max\] = \[2, 0.5\]"),
        ({"rollout_rejection": "token_k2", "rollout_rejection_max": 0.0}, "rollout_rejection_max"),
        ({"rollout_rejection": "token_k2", "rollout_rejection_max": math.inf}, "rollout_rejection_max"),
        ({"rollout_correction_batch_normalize": True}, "needs rollout_correction"),
    ],
)
def test_bad_settings_are_one_line_errors(over, message):
    with pytest.raises(ValueError, match=message):
        ObjectiveSettings.preset("grpo", **over)


def test_equal_bounds_and_a_single_upper_bound_are_accepted_as_verl_does():
    ObjectiveSettings.preset("grpo", rollout_rejection="token_k1", rollout_rejection_min=1.0, rollout_rejection_max=1.0)
    ObjectiveSettings.preset("grpo", rollout_rejection="seq_mean_k1", rollout_rejection_max=1.001)  # band [1/1.001,…]
    ObjectiveSettings.preset("grpo", rollout_rejection="seq_mean_k3", rollout_rejection_max=0.01)  # verl's K3-RS


def test_trl_refuses_both_in_one_line():
    base = ["train.engine=trl", "objective.adv_eps=0.0001", "train.reference_kl=false"]
    for sets, key in [
        (["objective.rollout_rejection=seq_mean_k1", "objective.rollout_rejection_max=1.001"], "rollout_rejection"),
        (
            [
                "rollout.backend=vllm",
                "objective.rollout_correction=token_truncate",
                "objective.rollout_correction_max=2",
                "objective.rollout_correction_batch_normalize=true",
            ],
            "rollout_correction_batch_normalize",
        ),
    ]:
        with pytest.raises(ValueError) as err:
            load_run_config(TOY_RUN, [*base, *sets])
        text = str(err.value)
        assert "\n" not in text.strip() and f"train.engine: trl cannot express objective.{key}" in text


def test_the_new_fields_enter_a_job_id_only_when_set():
    new = {
        "rollout_correction_batch_normalize": False,
        "rollout_rejection": None,
        "rollout_rejection_min": None,
        "rollout_rejection_max": None,
    }
    assert all(LATER_FIELDS[f"objective.{k}"] == v for k, v in new.items())
    for name in ("grpo", "dr_grpo", "dapo", "gspo"):
        objective = load_run_config(TOY_RUN, [f"objective.preset={name}"]).identity()["objective"]
        assert not set(new) & set(objective), name
    sets = ["objective.rollout_rejection=seq_mean_k1", "objective.rollout_rejection_max=1.001"]
    objective = load_run_config(TOY_RUN, sets).identity()["objective"]
    assert (objective["rollout_rejection"], objective["rollout_rejection_max"]) == ("seq_mean_k1", 1.001)
    assert "rollout_rejection_min" not in objective  # still at its default


# ---- the loop -------------------------------------------------------------------------------------------------------
def _trainer(overrides, *extra):
    from trainer.loop import Trainer, TrainerSettings
    from trainer.models.load import load_policy
    from trainer.models.toy import ensure_toy_model
    from trainer.rollout.hf import TransformersBackend
    from trainer.tasks.toy_addition import ToyAdditionTask

    cfg = load_run_config(TOY_RUN, [*overrides, *extra])
    torch.set_num_threads(1)
    path = str(ensure_toy_model(cfg.model.toy, cfg.model.cache_dir))
    policy, tok = load_policy(path, torch.device("cpu"), cfg.model.dtype)
    settings = TrainerSettings.of(cfg)
    return Trainer(
        policy, ToyAdditionTask(cfg.task.toy_addition), TransformersBackend(policy, tok), tok.pad_token_id, settings
    )


def _params(tr):
    return [p.detach().clone() for p in tr.policy.parameters()]


def test_the_loop_rejects_once_per_step_over_the_whole_batch(tiny_run_overrides):
    """A criterion that keeps everything trains exactly as the rejection off; one that keeps nothing (the band
    [log 1e-3, log 1e-3] holds no token) leaves the loss at 0 and logs a rejected share of 1. Every run weighs by the
    batch-normalised rollout correction, whose weights then average 1 over the step's tokens."""
    first = (
        "objective.preset=grpo",
        "objective.rollout_correction=token_truncate",
        "objective.rollout_correction_max=2.0",
        "objective.rollout_correction_batch_normalize=true",
    )
    runs = {}
    for name, extra in [
        ("off", ()),
        ("keeps_all", ("objective.rollout_rejection=seq_max_k2", "objective.rollout_rejection_max=1e6")),
        (
            "keeps_none",
            (
                "objective.rollout_rejection=token_k1",
                "objective.rollout_rejection_min=0.001",
                "objective.rollout_rejection_max=0.001",
            ),
        ),
    ]:
        tr = _trainer(tiny_run_overrides, *first, *extra)
        before = _params(tr)
        metrics = next(m for m in map(tr.step, range(1, 6)) if m[M.GROUPS_MIXED_FRAC] > 0)
        runs[name] = (metrics, before, _params(tr))
    off, keeps_all, none = (runs[k] for k in ("off", "keeps_all", "keeps_none"))
    assert M.ROLLOUT_REJECTED_FRAC not in off[0] and keeps_all[0][M.ROLLOUT_REJECTED_FRAC] == 0.0
    assert keeps_all[0][M.LOSS] == off[0][M.LOSS]
    assert all(torch.equal(a, b) for a, b in zip(keeps_all[2], off[2]))
    assert any(not torch.equal(a, b) for a, b in zip(off[1], off[2]))  # the step off did train
    assert off[0][M.ROLLOUT_WEIGHT_MEAN] == pytest.approx(1.0, abs=1e-5)
    assert none[0][M.ROLLOUT_REJECTED_FRAC] == pytest.approx(1.0, abs=1e-12)  # merged over micro-batches
    assert none[0][M.LOSS] == 0.0 and none[0][M.GRAD_NORM] == 0.0
