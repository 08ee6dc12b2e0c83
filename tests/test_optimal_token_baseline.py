"""The optimal token baseline (arXiv 2602.07078; verl's optimal_token_baseline): A_it = R_i − B_t, B_t the group's
rewards weighted by each running path's cumulative 1 − 2π + Σ_v π². By hand, Σ_v π² from the logits (whole and in
chunks), split into micro-batches, against GRPO's update, and in the loop: the token probabilities it reads from the
policy before the update, its per-token advantage in the update and one per response in the metrics and the table."""

from __future__ import annotations

import re

import pytest
import torch
from fake_loop import UPDATE_LENGTHS, FakeBackend, FakeLM, TableTask, assert_splits_agree, record_updates, split_update
from test_chunked_logprobs import _batch, _qwen

from harness.config.errors import ConfigError
from harness.config.run_config import load_run_config
from tests.test_trl_engine import EXPRESSIBLE, TOY_RUN
from trainer import metric_names as M
from trainer.config import RolloutConfig, TrainConfig
from trainer.logprobs import ResponseScorer
from trainer.loop import Trainer, TrainerSettings
from trainer.objective import (
    ADVANTAGES,
    ObjectiveSettings,
    TokenProbabilities,
    compute_advantages,
    response_advantages,
    token_logprobs,
    token_sum_pi_squared,
)
from trainer.objective.registry import ONE_RESPONSE_ADVANTAGES, TOKEN_ADVANTAGES

OTB = ADVANTAGES["optimal_token_baseline"]


def T(*rows) -> torch.Tensor:
    return torch.tensor(rows, dtype=torch.float64)


def probs(pi: list[list[float]], squares: list[list[float]], weight=None) -> TokenProbabilities:
    """One group's token probabilities π and Σπ² ([G, L] each, padding given as π 1, Σπ² 0)."""
    return TokenProbabilities(torch.log(T(*pi))[None], T(*squares)[None], None if weight is None else T(*weight)[None])


# ---- by hand -----------------------------------------------------------------------------------------------------
def test_by_hand_two_responses_and_the_longest_ones_zero_tail():
    """w = 1 − 2π + Σπ²: response 1 (R = 1, 2 tokens) w = 0.5, 0.875, W = 0.5, 1.375; response 2 (R = 0, 1 token)
    w = 0.08. B_0 = (1·0.5 + 0·0.08)/0.58 = 25/29; at t = 1 response 1 runs alone, past the second-longest: its
    baseline is 0 (the zero tail), so A = 1 there, where its own energy-weighted reward would give B = 1, A = 0."""
    tp = probs([[0.5, 0.25], [0.8, 1.0]], [[0.5, 0.375], [0.68, 0.0]])
    adv = OTB(T([1, 0]), 0.0, torch.tensor([[2, 1]]), tp)
    torch.testing.assert_close(adv, T([[4 / 29, 1.0], [-25 / 29, 0.0]]), rtol=0, atol=1e-15)


def test_by_hand_a_tied_longest_pair_keeps_its_baseline_and_a_certain_token_weighs_nothing():
    """Rewards 1, 0, 1, lengths 2, 2, 1. w: response 1 (0.5, 0.5), W = 0.5, 1; response 2 (0.875, 0.5), W = 0.875,
    1.375; response 3 one certain token (π = Σπ² = 1), w = 0. B_0 = 0.5/1.375 = 4/11, B_1 = 1/2.375 = 8/19 (two
    longest responses: no zero tail); response 3 adds nothing to B_0 but gets R − B_0."""
    tp = probs([[0.5, 0.5], [0.25, 0.5], [1.0, 1.0]], [[0.5, 0.5], [0.375, 0.5], [1.0, 0.0]])
    adv = OTB(T([1, 0, 1]), 0.0, torch.tensor([[2, 2, 1]]), tp)
    want = T([[7 / 11, 11 / 19], [-4 / 11, -8 / 19], [7 / 11, 0.0]])
    torch.testing.assert_close(adv, want, rtol=0, atol=1e-15)
    # the rollout correction's ρ̄ scales w by ρ̄²: ρ̄ = 2 on response 2's first token makes its w 3.5, W = 3.5, 4
    weight = [[1.0, 1.0], [2.0, 1.0], [1.0, 1.0]]
    weighted = probs([[0.5, 0.5], [0.25, 0.5], [1.0, 1.0]], [[0.5, 0.5], [0.375, 0.5], [1.0, 0.0]], weight)
    adv = OTB(T([1, 0, 1]), 0.0, torch.tensor([[2, 2, 1]]), weighted)
    torch.testing.assert_close(adv, T([[7 / 8, 4 / 5], [-1 / 8, -1 / 5], [7 / 8, 0.0]]), rtol=0, atol=1e-15)


def test_epsilon_enters_the_denominator_and_a_group_of_certain_tokens_has_no_baseline():
    tp = probs([[0.5, 0.5], [0.25, 0.5], [1.0, 1.0]], [[0.5, 0.5], [0.375, 0.5], [1.0, 0.0]])
    adv = OTB(T([1, 0, 1]), 0.125, torch.tensor([[2, 2, 1]]), tp)
    assert adv[0, 1, 0].item() == pytest.approx(-0.5 / 1.5, abs=1e-15)  # B_0 = 0.5/(1.375 + 0.125)
    certain = probs([[1.0, 1.0], [1.0, 1.0]], [[1.0, 1.0], [1.0, 0.0]])  # every w = 0: no energy anywhere
    for eps in (0.0, 1e-8):  # B = 0 (verl's 0/ε), not NaN at ε = 0
        assert OTB(T([1, 0]), eps, torch.tensor([[2, 1]]), certain).tolist() == [[[1.0, 1.0], [0.0, 0.0]]]


def test_a_group_of_one_gets_zero_and_a_flat_group_keeps_only_its_zero_tail():
    one = TokenProbabilities(torch.log(T([[0.5, 0.5]])), T([[0.5, 0.5]]))
    assert OTB(T([1]), 1e-8, torch.tensor([[2]]), one).tolist() == [[[0.0, 0.0]]]
    tp = probs([[0.5, 0.25], [0.8, 1.0]], [[0.5, 0.375], [0.68, 0.0]])
    flat = OTB(T([1, 1]), 0.0, torch.tensor([[2, 1]]), tp)
    torch.testing.assert_close(flat, T([[0.0, 1.0], [0.0, 0.0]]), rtol=0, atol=1e-15)
    leftover = OTB(T([1, 1]), 1e-8, torch.tensor([[2, 1]]), tp)[0, :, 0]  # R·ε/(ΣW + ε) on shared positions
    torch.testing.assert_close(leftover, torch.full((2,), 1e-8 / (0.58 + 1e-8), dtype=torch.float64))
    assert not ADVANTAGES.meta("optimal_token_baseline").get("zeroes_flat_groups", True)


def test_sum_pi_squared_from_logits_and_the_energy_is_the_logit_gradients_squared_norm():
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(3, 4, 7, generator=g, dtype=torch.float64) * 3
    pi = torch.softmax(logits, -1)
    torch.testing.assert_close(token_sum_pi_squared(logits), (pi**2).sum(-1), rtol=0, atol=1e-14)
    tokens = torch.randint(7, (3, 4), generator=g)
    w = 1 - 2 * token_logprobs(logits, tokens).exp() + token_sum_pi_squared(logits)
    logits.requires_grad_(True)
    (grad,) = torch.autograd.grad(token_logprobs(logits, tokens).sum(), logits)  # ∂ log π(o)/∂z = e_o − π
    torch.testing.assert_close(w, (grad**2).sum(-1), rtol=0, atol=1e-14)


def test_response_advantages_are_each_responses_token_mean():
    adv = T([[4 / 29, 1.0], [-25 / 29, 0.0]])
    torch.testing.assert_close(response_advantages(adv, torch.tensor([[2, 1]])), T([(4 / 29 + 1) / 2, -25 / 29]))
    per_response = T([1.0, -1.0])
    assert response_advantages(per_response, torch.tensor([[3, 4]])) is per_response


def test_compute_advantages_hands_the_token_probabilities_to_it_only():
    s = ObjectiveSettings.preset("otb")
    assert s.needs_token_probs and not ObjectiveSettings.preset("grpo").needs_token_probs
    assert TOKEN_ADVANTAGES == ("optimal_token_baseline",) and "optimal_token_baseline" not in ONE_RESPONSE_ADVANTAGES
    tp = probs([[0.5, 0.25], [0.8, 1.0]], [[0.5, 0.375], [0.68, 0.0]])
    lengths = torch.tensor([[2, 1]])
    adv = compute_advantages(T([1, 0]), s, lengths=lengths, token_probs=tp)
    torch.testing.assert_close(adv, OTB(T([1, 0]), 1e-8, lengths, tp))  # the preset's ε, verl's 1e-8
    with pytest.raises(ValueError, match="needs each response token's probability"):
        compute_advantages(T([1, 0]), s, lengths=lengths)
    with pytest.raises(ValueError, match="token probabilities must be"):
        OTB(T([1, 0, 1]), 0.0, torch.tensor([[2, 1, 1]]), tp)


# ---- the update: split into micro-batches, and unlike GRPO's -------------------------------------------------------
REWARDS = T([1, 0, 0, 1], [0, 0, 1, 0])


def _token_probs(seed: int = 3) -> TokenProbabilities:
    """Random token probabilities for `split_update`'s 8 responses of UPDATE_LENGTHS tokens, as two groups of 4."""
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(2, 4, 10, 5, generator=g, dtype=torch.float64) * 2
    tokens = torch.randint(5, (2, 4, 10), generator=g)
    mask = torch.arange(10) < UPDATE_LENGTHS.view(2, 4, 1)
    return TokenProbabilities(
        torch.where(mask, token_logprobs(logits, tokens), 0.0), torch.where(mask, token_sum_pi_squared(logits), 0.0)
    )


def _update(s: ObjectiveSettings, splits: int):
    tp = _token_probs() if s.needs_token_probs else None
    adv = compute_advantages(REWARDS, s, lengths=UPDATE_LENGTHS.view(2, 4), token_probs=tp)
    return split_update(s, adv.flatten(0, 1), splits)


@pytest.mark.parametrize("preset", ["otb", "grpo", "gspo"])
def test_micro_batch_invariance(preset):
    s = ObjectiveSettings.preset(preset, advantage="optimal_token_baseline")
    assert assert_splits_agree(lambda splits: _update(s, splits))[M.CLIP_FRAC] > 0  # clipped tokens are covered too


def test_changes_the_update_from_grpos_dr_grpos_and_opos():
    _, _, mine = _update(ObjectiveSettings.preset("otb"), 1)
    for other in ("group_std", "group_mean", "opo"):
        _, _, theirs = _update(ObjectiveSettings.preset("otb", advantage=other), 1)
        assert (mine - theirs).abs().max().item() > 1e-3


# ---- the loop ----------------------------------------------------------------------------------------------------
def _loop(objective: ObjectiveSettings, rewards: dict[str, list[float]], **train):
    settings = TrainerSettings(
        objective,
        RolloutConfig(prompts_per_step=2, group_size=4, max_new_tokens=8, temperature=0.7),
        TrainConfig(steps=1, device="cpu", reference_kl=False, **train),
        0,
    )
    tr = Trainer(FakeLM(), TableTask(rewards), FakeBackend(), 0, settings)
    handed: list[TokenProbabilities] = []
    compute = tr._token_probabilities

    def spy(s):
        handed.append(compute(s))
        return handed[-1]

    tr._token_probabilities = spy
    return tr, handed, record_updates(tr, lambda t, advantages: (t, advantages.clone()))


def _fake_lm_probabilities(model: FakeLM, temperature: float) -> TokenProbabilities:
    """By hand for FakeBackend's responses (sample j: tokens 10 + j, j + 1 of them, after the prompt [3, 3]): FakeLM's
    logits depend on the previous token only, so response j's first token is predicted from token 3, the rest from
    10 + j."""
    with torch.no_grad():
        logits = model.out(model.emb.weight).double() / temperature  # row v: the logits after token v
    logp, squares = torch.zeros(4, 4, dtype=torch.float64), torch.zeros(4, 4, dtype=torch.float64)
    for j in range(4):
        previous = [3] + [10 + j] * j
        rows = logits[previous]
        logp[j, : j + 1] = torch.log_softmax(rows, -1)[:, 10 + j]
        squares[j, : j + 1] = (torch.softmax(rows, -1) ** 2).sum(-1)
    return TokenProbabilities(logp.repeat(2, 1, 1), squares.repeat(2, 1, 1))


def test_the_loop_reads_the_policys_probabilities_before_the_update_and_trains_per_token():
    tr, handed, seen = _loop(ObjectiveSettings.preset("otb"), {"p0": [1, 0, 0, 1], "p1": [0, 1, 1, 0]})
    want = _fake_lm_probabilities(tr.policy, 0.7)  # the policy as it sampled, before the step's update
    metrics = tr.step(1)
    (got,) = handed
    torch.testing.assert_close(got.logp, want.logp, rtol=0, atol=1e-6)  # FakeLM computes in float32
    torch.testing.assert_close(got.sum_pi_squared, want.sum_pi_squared, rtol=0, atol=1e-6)
    assert got.rollout_weight is None
    ((t, adv),) = seen
    lengths = torch.tensor([[1, 2, 3, 4]] * 2)
    expected = OTB(T([1, 0, 0, 1], [0, 1, 1, 0]), 1e-8, lengths, got)
    assert adv.shape == (8, 4) == t["resp_mask"].shape
    torch.testing.assert_close(adv, expected.flatten(0, 1).float())
    assert (adv[:, 3] != 0).sum() == 1 and adv[3, 3] == 1 and adv[7, 3] == 0  # the longest's zero tail: A = R
    per_response = response_advantages(expected, lengths).flatten()
    table = tr.rollout_table()
    torch.testing.assert_close(torch.tensor(table["advantage"].tolist(), dtype=torch.float64), per_response)
    assert metrics[M.ADV_MEAN] == pytest.approx(per_response.mean().item(), abs=1e-7)


def test_the_rollout_correction_weighs_the_energy_and_other_advantages_read_no_probabilities():
    """FakeBackend's rollout log-probabilities are 0 (π_rollout = 1), so ρ̄ = clip(π_old, 0.5, 2) per token."""
    s = ObjectiveSettings.preset(
        "otb", rollout_correction="token_truncate", rollout_correction_min=0.5, rollout_correction_max=2.0
    )
    tr, handed, _ = _loop(s, {"p0": [1, 0, 0, 1], "p1": [0, 1, 1, 0]})
    tr.step(1)
    (got,) = handed
    mask = torch.arange(4) < torch.tensor([1, 2, 3, 4])[:, None]
    want = torch.where(mask, got.logp.exp().clamp(0.5, 2.0), 1.0)
    torch.testing.assert_close(got.rollout_weight, want)
    tr, handed, seen = _loop(ObjectiveSettings.preset("grpo"), {"p0": [1, 0, 0, 1], "p1": [0, 1, 1, 0]})
    tr.step(1)
    assert handed == [] and seen[0][1].dim() == 1


def test_several_mini_batches_cut_each_ones_advantages_to_its_width():
    tr, _, seen = _loop(ObjectiveSettings.preset("otb"), {"p0": [1, 0, 0, 1], "p1": [0, 1, 1, 0]}, mini_batches=2)
    metrics = tr.step(1)
    assert seen[0][1].shape == (8, 4) and M.GRAD_NORM in metrics


# ---- the chunked logits path -------------------------------------------------------------------------------------
def test_the_chunked_probabilities_equal_the_whole_logits():
    """A tiny Qwen2 with 3,000 tokens: chunks of 0.1 MiB (4 positions) against the whole logits, at temperature 0.7."""
    model = _qwen()
    t = _batch(3000, prompts=[3, 5, 2], responses=[12, 1, 7])
    attn = t["attn"]
    pos = (attn.cumsum(1) - 1).clamp(min=0)
    whole = ResponseScorer(0.7, None).probabilities(model, t["ids"], attn, pos, 12)
    chunked_scorer = ResponseScorer(0.7, 0.1)
    chunked = chunked_scorer.probabilities(model, t["ids"], attn, pos, 12)
    assert chunked_scorer.heads and not whole[0].requires_grad
    for got, want in zip(chunked, whole, strict=True):
        torch.testing.assert_close(got, want, rtol=0, atol=1e-12)
    logits = model(input_ids=t["ids"], attention_mask=attn, position_ids=pos).logits[:, -13:-1].double() / 0.7
    torch.testing.assert_close(whole[1], (torch.softmax(logits, -1) ** 2).sum(-1), rtol=0, atol=1e-12)


# ---- settings ----------------------------------------------------------------------------------------------------
def test_bad_settings_are_one_line_errors_naming_the_key():
    with pytest.raises(ValueError, match=re.escape("off_policy_threshold masks a response by the sign of its")):
        ObjectiveSettings.preset("otb", off_policy_threshold=0.5)
    for sets, key in (
        (["objective.preset=otb", "rollout.group_size=1"], "rollout.group_size"),
        (["train.engine=trl", *EXPRESSIBLE, "objective.advantage=optimal_token_baseline"], "objective.advantage"),
    ):
        with pytest.raises(ConfigError) as err:
            load_run_config(TOY_RUN, sets)
        assert "\n" not in str(err.value) and key in str(err.value)
