"""POISE (arXiv 2605.07579): A_i = R_i − mean_{j≠i} g(z_j), g a ridge probe on the policy's own hidden states, refit
after every step on the newest responses, RLOO while it has no fit. By hand (the estimator, the probe's regression,
its buffer), the features against an unpadded forward, and in the loop: the probe hands its baseline, is read before
the update, never touches the policy's parameters or gradient, and changes the update from RLOO's once fitted."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch
from fake_loop import FakeBackend, FakeLM, TableTask, record_updates
from test_rollout_contract import tiny_model, tiny_tokenizer

from trainer import metric_names as M
from trainer.config import RolloutConfig, TrainConfig
from trainer.loop import Trainer, TrainerSettings
from trainer.objective import ADVANTAGES, ObjectiveSettings, compute_advantages, leave_one_out_targets
from trainer.value_probe import ProbeFeatures, ValueProbe, fit_probe, probe_layer, read_features


def T(*rows: list[float]) -> torch.Tensor:
    return torch.tensor(rows, dtype=torch.float64)


def F(prompt: list[list[float]], response: list[list[float]], entropy: list[float]) -> ProbeFeatures:
    return ProbeFeatures(torch.tensor(prompt), torch.tensor(response), torch.tensor(entropy))


# ---- the estimator by hand ---------------------------------------------------------------------------------------
def test_by_hand_each_response_gets_its_siblings_value():
    rewards, values = T([1, 0], [1, 1]), T([0.3, 0.8], [0.6, 0.2])
    adv = ADVANTAGES["poise"](rewards, 0.0, values)
    torch.testing.assert_close(adv, T([1 - 0.8, 0 - 0.3], [1 - 0.2, 1 - 0.6]), rtol=0, atol=1e-15)  # a flat group too
    three = ADVANTAGES["poise"](T([1, 0, 0]), 1e-6, T([0.5, 0.2, 0.8]))  # the mean of the other two; ε unused
    torch.testing.assert_close(three, T([1 - 0.5, 0 - 0.65, 0 - 0.35]), rtol=0, atol=1e-15)
    assert ADVANTAGES["poise"](T([1], [0]), 0.0, T([0.5], [0.5])).tolist() == [[0], [0]]  # no sibling: no signal
    assert not ADVANTAGES.meta("poise").get("zeroes_flat_groups", True)


def test_with_the_rewards_as_values_it_is_rloo_the_authors_bootstrap():
    rewards = T([1, 0, 0, 1], [0, 0, 0, 0], [1, 1, 0, 1])
    torch.testing.assert_close(ADVANTAGES["poise"](rewards, 0.0, rewards), ADVANTAGES["rloo"](rewards, 0.0))


def test_the_probes_targets_are_the_siblings_mean_reward():
    assert leave_one_out_targets(T([1, 0], [1, 1])).tolist() == [[0, 1], [1, 1]]
    torch.testing.assert_close(leave_one_out_targets(T([1, 0, 0])), T([0, 0.5, 0.5]))
    with pytest.raises(ValueError, match="at least 2 responses"):
        leave_one_out_targets(T([1]))


def test_compute_advantages_hands_the_values_to_poise_only():
    s = ObjectiveSettings.preset("poise")
    assert s.needs_values and not ObjectiveSettings.preset("grpo").needs_values
    assert compute_advantages(T([1, 0]), s, values=T([0.25, 0.75])).tolist() == [[0.25, -0.25]]
    with pytest.raises(ValueError, match="needs each response's value"):
        compute_advantages(T([1, 0]), s)


# ---- the probe's regression by hand ------------------------------------------------------------------------------
def test_by_hand_one_standardised_feature_and_ridge():
    """prompt −1, 1 (mean 0, population std 1: z = ∓1); response and entropy constant (σ set to 1: z = 0); y = 0, 1:
    ȳ = ½, Zᵀ(y − ȳ) = (1, 0, 0), ZᵀZ + 2I = diag(4, 2, 2), so w = (¼, 0, 0) and g = ½ ∓ ¼."""
    f = F([[-1.0], [1.0]], [[5.0], [5.0]], [2.0, 2.0])
    fit = fit_probe(f, torch.tensor([0.0, 1.0]), (0, 0), 2.0, (0.0, 1.0))
    assert fit.weight.tolist() == [0.25, 0.0, 0.0] and fit.intercept == 0.5
    assert fit.predict(f).tolist() == [0.25, 0.75]
    assert fit.predict(F([[3.0]], [[0.0]], [9.0])).tolist() == [1.0]  # z = 3: ½ + ¾, clipped to the range
    assert fit_probe(f, torch.tensor([0.0, 1.0]), (0, 0), 2.0, (0.3, 1.0)).predict(f).tolist() == [0.3, 0.75]


def test_by_hand_the_principal_component_keeps_the_variance_and_drops_the_rest():
    """Prompts (1, 1) and (3, 3): one principal direction ±(1, 1)/√2, projections ∓√2, standardised ∓1: the fit of
    the test above, whichever sign the SVD picks; the response's two constant columns add nothing."""
    f = F([[1.0, 1.0], [3.0, 3.0]], [[5.0, 7.0], [5.0, 7.0]], [2.0, 2.0])
    fit = fit_probe(f, torch.tensor([0.0, 1.0]), (1, 2), 2.0, (0.0, 1.0))
    assert fit.prompt.components is not None and fit.prompt.components.shape == (1, 2)
    assert fit.response.components is not None and fit.response.components.shape == (2, 2)  # min(2, rows 2, H 2)
    torch.testing.assert_close(fit.predict(f), T([0.25, 0.75])[0], rtol=0, atol=1e-12)


def test_the_ridge_solution_solves_the_normal_equations():
    g = torch.Generator().manual_seed(0)
    f = ProbeFeatures(torch.randn(40, 6, generator=g), torch.randn(40, 5, generator=g), torch.rand(40, generator=g))
    y = torch.rand(40, generator=g).double()
    fit = fit_probe(f, y, (3, 2), 7.0, (-10.0, 10.0))
    z = fit._features(f)
    assert z.shape == (40, 3 + 2 + 1)
    torch.testing.assert_close(z.mean(0), torch.zeros(6, dtype=torch.float64), rtol=0, atol=1e-12)
    residual = z.T @ (z @ fit.weight + fit.intercept - y) + 7.0 * fit.weight  # ∇ of ‖Zw + b − y‖² / 2 + α‖w‖² / 2
    torch.testing.assert_close(residual, torch.zeros(6, dtype=torch.float64), rtol=0, atol=1e-10)


# ---- the probe across steps --------------------------------------------------------------------------------------
def _probe(**overrides) -> ValueProbe:
    fields = dict(poise_pca_dims=(0, 0), poise_ridge_alpha=2.0, poise_buffer_rows=4, poise_bootstrap_steps=2)
    return ValueProbe(ObjectiveSettings.preset("poise", **{**fields, **overrides}))


def test_rloo_until_the_bootstrap_ends_then_the_fit_of_the_steps_before():
    probe = _probe()
    f = F([[-1.0], [1.0]], [[5.0], [5.0]], [2.0, 2.0])  # one group of two
    r = T([1, 0])
    assert probe.values(f, r).tolist() == [[1, 0]]  # no fit: the rewards, so the baseline is RLOO's
    metrics = probe.observe(1, f, r, r, T([1, -1]))
    assert probe.fit is None and metrics[M.POISE_PROBE_FITTED] == 0 and M.POISE_VALUE_ABS_ERR not in metrics
    assert metrics[M.POISE_BUFFER_ROWS] == 2 and metrics[M.POISE_ADV_VAR_RATIO] == 4  # Var(±1) / Var(1, 0)
    r2 = T([0, 1])  # targets 1, 0: with step 1's (0, 1) the buffer's y = 0, 1, 1, 0 on z = −1, 1, −1, 1: w = 0
    probe.observe(2, f, r2, r2, T([-1, 1]))  # the bootstrap's last step: fit on both
    assert probe.fit is not None and probe.fit.predict(f).tolist() == [0.5, 0.5]
    values = probe.values(f, T([1, 1]))
    assert values.tolist() == [[0.5, 0.5]]
    metrics = probe.observe(3, f, T([1, 1]), values, T([0.5, 0.5]))  # targets 1, 1; predictions made before
    assert metrics[M.POISE_PROBE_FITTED] == 1 and metrics[M.POISE_VALUE_ABS_ERR] == 0.5
    assert M.POISE_VALUE_EXPLAINED_VAR not in metrics  # the targets do not vary: no explained variance
    assert metrics[M.POISE_BUFFER_ROWS] == 4  # step 1's group dropped: the newest 4 rows
    # refit on y = 1, 0 (step 2) and 1, 1 (step 3) at z = −1, 1, −1, 1: ȳ = ¾, Zᵀ(y − ȳ) = −1, ZᵀZ + 2 = 6: w = −⅙
    torch.testing.assert_close(probe.fit.predict(f), T([0.75 + 1 / 6, 0.75 - 1 / 6])[0], rtol=0, atol=1e-15)


def test_the_buffer_keeps_whole_groups_newest_first():
    probe = _probe(poise_buffer_rows=5)
    f = F([[0.0], [1.0]], [[0.0], [0.0]], [0.0, 0.0])
    for step in range(1, 5):
        probe.observe(step, f, T([step % 2, 1]), T([0, 0]), T([0, 0]))
        assert probe.rows == min(2 * step, 4) == sum(len(g[0]) for g in probe.groups)


def test_the_explained_variance_is_the_authors_brier_skill():
    probe = _probe(poise_bootstrap_steps=1)
    f = F([[0.0], [1.0], [0.0], [1.0]], [[0.0]] * 4, [0.0] * 4)
    probe.observe(1, f, T([1, 0], [0, 0]), T([0, 0], [0, 0]), T([0, 0], [0, 0]))
    values = T([0.25, 0.75], [0.5, 0.5])
    m = probe.observe(2, f, T([1, 0], [0, 1]), values, T([0, 0], [0, 0]))  # targets 0, 1, 1, 0 (mean ½, var ¼)
    assert m[M.POISE_VALUE_ABS_ERR] == (0.25 + 0.25 + 0.5 + 0.5) / 4
    assert m[M.POISE_VALUE_EXPLAINED_VAR] == pytest.approx(1 - ((0.0625 * 2 + 0.25 * 2) / 4) / 0.25)


# ---- the features, against an unpadded forward -------------------------------------------------------------------
@pytest.mark.parametrize("depth", [0.5, 1.0])
def test_the_features_are_the_pooled_states_and_entropy_of_each_unpadded_sequence(depth):
    tokenizer = tiny_tokenizer()
    model = tiny_model(tokenizer).double()
    prompts = [[5, 6, 7, 8, 9, 10, 11], [12, 13]]
    responses = [[20, 21, 22], [23, 24, 25, 26, 27]]
    P, W, pool, temperature = 7, 5, 3, 0.7
    ids = torch.zeros((2, P + W), dtype=torch.long)
    attn = torch.zeros((2, P + W), dtype=torch.long)
    for i, (p, r) in enumerate(zip(prompts, responses)):  # as Trainer._tensors lays them out
        ids[i, P - len(p) : P + len(r)] = torch.tensor(p + r)
        attn[i, P - len(p) : P + len(r)] = 1
    with torch.no_grad():
        f = read_features(model, ids, attn, P, W, depth, pool, temperature)
        for i, (p, r) in enumerate(zip(prompts, responses)):
            out = model(input_ids=torch.tensor([p + r]), output_hidden_states=True)
            h = out.hidden_states[probe_layer(depth, model.config.num_hidden_layers)][0]
            assert probe_layer(depth, 2) == (1 if depth == 0.5 else 2)
            torch.testing.assert_close(f.prompt[i].double(), h[max(0, len(p) - pool) : len(p)].mean(0).float().double())
            torch.testing.assert_close(f.response[i].double(), h[len(p) + len(r) - pool : len(p) + len(r)].mean(0))
            logits = out.logits[0, len(p) - 1 : len(p) + len(r) - 1] / temperature
            entropy = torch.logsumexp(logits, -1) - (logits.softmax(-1) * logits).sum(-1)
            assert f.entropy[i].item() == pytest.approx(entropy.mean().item(), rel=1e-5)


# ---- the loop ----------------------------------------------------------------------------------------------------
class HiddenLM(FakeLM):
    """FakeLM with hidden states: the embeddings, then tanh of them (one 'layer')."""

    def forward(self, input_ids, attention_mask=None, position_ids=None, logits_to_keep=0, output_hidden_states=False):
        e = self.emb(input_ids)
        logits = self.out(e)
        return SimpleNamespace(
            logits=logits[:, -logits_to_keep:] if logits_to_keep else logits,
            hidden_states=(e, torch.tanh(e)) if output_hidden_states else None,
        )


REWARDS = {"p0": [1.0, 0.0], "p1": [1.0, 1.0]}


def _loop(objective: ObjectiveSettings, steps: int = 1):
    settings = TrainerSettings(
        objective,
        RolloutConfig(prompts_per_step=2, group_size=2, max_new_tokens=8, temperature=0.7),
        TrainConfig(steps=steps, device="cpu", reference_kl=False, micro_batch_size=1),
        0,
    )
    tr = Trainer(HiddenLM(), TableTask(REWARDS), FakeBackend(), 0, settings)
    return tr, record_updates(tr)


def _poise(**overrides) -> ObjectiveSettings:
    return ObjectiveSettings.preset("poise", max_len=8, poise_bootstrap_steps=1, poise_pca_dims=(2, 2), **overrides)


def test_the_loop_hands_the_probes_values_to_the_advantage():
    tr, seen = _loop(_poise())
    assert isinstance(tr.probe, ValueProbe) and _loop(ObjectiveSettings.preset("grpo"))[0].probe is None
    handed = []

    def values(f, rewards):
        handed.append((len(f), rewards.tolist()))
        return T([0.25, 0.75], [0.5, 0.5])

    tr.probe.values = values
    metrics = tr.step(1)
    assert handed == [(4, [[1, 0], [1, 1]])]  # every kept response's features, the rewards the advantage sees
    assert seen == [[1 - 0.75, 0 - 0.25, 1 - 0.5, 1 - 0.5]]
    assert metrics[M.POISE_BUFFER_ROWS] == 4 and tr.probe.fit is not None  # step 1 ends the bootstrap: fitted


def test_rloo_during_the_bootstrap_then_the_fitted_probe_changes_the_update():
    tr, seen = _loop(_poise(), steps=2)
    m1 = tr.step(1)
    assert seen[0] == [1, -1, 0, 0] and m1[M.POISE_PROBE_FITTED] == 0  # RLOO: R − the sibling's reward
    features = tr._probe_features(tr.collect(2)[1])
    assert tr.probe.fit is not None
    expected = ADVANTAGES["poise"](T([1, 0], [1, 1]), 0.0, tr.probe.fit.predict(features).view(2, 2))
    m2 = tr.step(2)
    torch.testing.assert_close(torch.tensor(seen[1], dtype=torch.float64), expected.flatten().float().double())
    assert seen[1] != seen[0] and m2[M.POISE_PROBE_FITTED] == 1 and M.POISE_VALUE_ABS_ERR in m2
    assert all(math.isfinite(v) for v in m2.values())


def test_the_probe_reads_the_policy_before_the_update_and_never_touches_its_parameters_or_gradient():
    tr, _ = _loop(_poise())
    reads = []
    read = tr._probe_features

    def spy(s):
        before = [p.detach().clone() for p in tr.policy.parameters()]
        out = read(s)
        assert all(p.grad is None for p in tr.policy.parameters())  # no graph, no gradient left behind
        assert all(torch.equal(a, b) for a, b in zip(before, tr.policy.parameters()))
        reads.append(before)
        return out

    tr._probe_features = spy
    observe = tr.probe.observe

    def observe_spy(*args):
        before = [p.detach().clone() for p in tr.policy.parameters()]
        out = observe(*args)  # the refit
        assert all(torch.equal(a, b) for a, b in zip(before, tr.policy.parameters()))
        assert all(p.grad is None for p in tr.policy.parameters())
        return out

    tr.probe.observe = observe_spy
    tr.step(1)
    assert len(reads) == 1 and not all(torch.equal(a, b) for a, b in zip(reads[0], tr.policy.parameters()))
    optimised = {id(p) for group in tr.optimiser.param_groups for p in group["params"]}
    assert optimised == {id(p) for p in tr.policy.parameters()}  # the probe has no parameter an optimiser steps


def test_the_features_do_not_depend_on_the_micro_batch():
    tr, _ = _loop(_poise())
    kept = tr.collect(1)[1]
    one = tr._probe_features(kept)
    tr.micro_size = None
    whole = tr._probe_features(kept)
    for a, b in zip((one.prompt, one.response, one.entropy), (whole.prompt, whole.response, whole.entropy)):
        torch.testing.assert_close(a, b)


def test_metric_names_are_known():
    for name in (
        M.POISE_VALUE_ABS_ERR,
        M.POISE_VALUE_EXPLAINED_VAR,
        M.POISE_ADV_VAR_RATIO,
        M.POISE_PROBE_FITTED,
        M.POISE_BUFFER_ROWS,
    ):
        assert name in M.ALL


def test_the_preset_is_the_authors_qwen3_recipe():
    s = ObjectiveSettings.preset("poise")
    assert (s.poise_pool_tokens, s.poise_pca_dims, s.poise_ridge_alpha) == (10, (32, 64), 100.0)
    assert (s.poise_buffer_rows, s.poise_bootstrap_steps, s.reward_range) == (4096, 16, (0.0, 1.0))
    assert probe_layer(s.poise_depth, 36) == 20  # the output of decoder layer 19 (0-based) of Qwen3-4B's 36
    assert (s.aggregation, s.clip_low, s.clip_high, s.dual_clip, s.kl_coef) == ("token_mean", 0.2, 0.28, 10.0, 0.0)
