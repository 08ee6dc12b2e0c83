"""Each switch TRL 1.16 has, equal to TRL's own loss and gradient on the same tensors (float64, 1e-6).

TRL's `GRPOTrainer._compute_loss` runs on a stand-in for the trainer: the attributes its `__init__` sets from the
`GRPOConfig` that harness's own mapping (`grpo_args`) builds, and a model whose only parameter is the logits, so
both sides see the same log-probabilities and entropies and every parameter gradient is compared. TRL computes the
rollout (vLLM) weight inside its generation step, which cannot run on given tensors: harness's weight goes into
TRL's loss, and the weight's four modes are checked against hand-computed numbers in test_objective_switches.py.
"""

from __future__ import annotations

import math
import types
from collections import defaultdict

import pytest
import torch

from harness.config.trl_args import grpo_args
from trainer.config import RolloutConfig, TrainConfig
from trainer.objective import ObjectiveSettings, policy_loss, token_entropy, token_logprobs
from trainer.objective.regularisers import EntropyCoefficient

trl = pytest.importorskip("trl")

B, T, V, MAX_LEN = 6, 7, 5, 7


class _Accelerator:
    num_processes = 1
    sync_gradients = True

    def gather(self, x):
        return x

    gather_for_metrics = gather

    def reduce(self, x, reduction="sum"):
        return x

    def pad_across_processes(self, x, dim=0, pad_index=0):
        return x


def _trl_trainer(args) -> types.SimpleNamespace:
    """What GRPOTrainer.__init__ keeps of `args` for `_compute_loss` (same names, same derivations)."""
    cls = trl.GRPOTrainer
    fake = types.SimpleNamespace(
        args=args,
        loss_type=args.loss_type,
        importance_sampling_level=args.importance_sampling_level,
        epsilon_low=args.epsilon,
        epsilon_high=args.epsilon_high if args.epsilon_high is not None else args.epsilon,
        beta=args.beta,
        max_completion_length=args.max_completion_length,
        top_entropy_quantile=args.top_entropy_quantile,
        off_policy_mask_threshold=args.off_policy_mask_threshold,
        use_vllm=args.use_vllm,
        vllm_importance_sampling_correction=args.vllm_importance_sampling_correction,
        vllm_importance_sampling_mode=args.vllm_importance_sampling_mode,
        entropy_coef=args.entropy_coef,
        use_adaptive_entropy=args.use_adaptive_entropy,
        _entropy_bonus_enabled=args.entropy_coef != 0.0 or args.use_adaptive_entropy,
        _last_world_entropy=float("inf"),
        _entropy_window_stats=None,
        aux_loss_enabled=False,
        current_gradient_accumulation_steps=1,
        accelerator=_Accelerator(),
        model=types.SimpleNamespace(training=True),
        _metrics={"train": defaultdict(list), "eval": defaultdict(list)},
        get_off_policy_mask=cls.get_off_policy_mask,
        get_gamma_weights=cls.get_gamma_weights,
    )
    fake.get_high_entropy_mask = types.MethodType(cls.get_high_entropy_mask, fake)
    return fake


def _tensors(seed: int):
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(B, T, V, generator=g, dtype=torch.float64) * 1.5
    ids = torch.randint(0, V, (B, T), generator=g)
    lengths = torch.tensor([7, 3, 5, 7, 1, 6])
    mask = (torch.arange(T) < lengths[:, None]).to(torch.float64)
    logp0 = token_logprobs(logits, ids)
    old = (logp0 + 0.3 * torch.randn(B, T, generator=g, dtype=torch.float64)) * mask  # π_old moved off π_θ
    rollout = (old + 0.2 * torch.randn(B, T, generator=g, dtype=torch.float64)) * mask
    adv = torch.tensor([1.2, -0.7, 0.4, -1.5, 0.9, -0.3], dtype=torch.float64)
    return logits, ids, mask, old, rollout, adv


def _settings(preset: str, **over) -> tuple[ObjectiveSettings, RolloutConfig, TrainConfig]:
    o = ObjectiveSettings.preset(preset, max_len=MAX_LEN, adv_eps=1e-4, **over)
    backend = "vllm" if o.rollout_correction is not None else "transformers"
    r = RolloutConfig(prompts_per_step=1, group_size=B, max_new_tokens=MAX_LEN, backend=backend)
    return o, r, TrainConfig(mini_batches=1, epochs=2)


def _both(o, r, t, seed: int = 0, steps: int = 1):
    """(harness's, TRL's) [(loss, gradient)] over `steps` optimiser steps on the same tensors."""
    logits, ids, mask, old, rollout, adv = _tensors(seed)
    g = torch.Generator().manual_seed(seed + 1000)
    ref = (token_logprobs(logits, ids) + 0.4 * torch.randn(B, T, generator=g, dtype=torch.float64)) * mask
    kw = grpo_args(o, r, t)
    args = trl.GRPOConfig(output_dir="unused", report_to="none", bf16=False, **{**kw, "use_cpu": True})
    fake = _trl_trainer(args)
    control = EntropyCoefficient.of(o)
    ours, theirs = [], []
    for _ in range(steps):
        z = logits.clone().requires_grad_(True)
        logp, entropy = token_logprobs(z, ids), token_entropy(z)
        out = policy_loss(
            logp,
            old,
            adv,
            mask,
            o,
            entropy=entropy if o.entropy_bonus else entropy.detach(),
            rollout_logp=rollout,
            entropy_coef=control.applied(),
            ref_logp=ref if o.kl_coef > 0 else None,
        )
        (grad,) = torch.autograd.grad(out.loss, z)
        ours.append((out.loss.detach(), grad))
        if "policy/entropy_trained" in out.metrics:
            control.update(float(out.metrics["policy/entropy_trained"]))

        z = logits.clone().requires_grad_(True)
        fake._get_per_token_logps_and_entropies = lambda model, *a, z=z, **k: (
            token_logprobs(z, ids),
            token_entropy(z),
            None,
        )
        inputs = {
            "prompt_ids": torch.zeros(B, 1, dtype=torch.long),
            "prompt_mask": torch.ones(B, 1, dtype=torch.long),
            "completion_ids": ids,
            "completion_mask": mask,
            "advantages": adv,
            "old_per_token_logps": old,
            "sampling_per_token_logps": rollout,
            "num_items_in_batch": mask.sum(),
            "ref_per_token_logps": ref,
        }
        if o.rollout_correction is not None:
            from trainer.objective.masks import ROLLOUT_CORRECTIONS

            fn = ROLLOUT_CORRECTIONS[o.rollout_correction]
            bounds = (o.rollout_correction_min, o.rollout_correction_max)
            inputs["importance_sampling_ratio"] = fn(old, rollout, mask, *bounds)
        loss = trl.GRPOTrainer._compute_loss(fake, None, inputs)
        (grad,) = torch.autograd.grad(loss, z)
        theirs.append((loss.detach(), grad))
    return ours, theirs


CASES = {
    "grpo": ("grpo", {}),
    "dapo_clip_higher": ("grpo", {"aggregation": "token_mean", "clip_high": 0.28}),
    "dr_grpo": ("dr_grpo", {}),
    "gspo": ("gspo", {"clip_low": 0.05, "clip_high": 0.08}),
    "cispo": ("cispo", {"clip_high": 0.2}),  # a cap of 1.2 that binds on these ratios
    "sapo": ("sapo", {}),
    "luspo": ("luspo", {"clip_low": 0.05, "clip_high": 0.08}),
    "vespo": ("vespo", {}),
    "entropy_bonus": ("grpo", {"entropy_coef": 0.05}),
    "top_entropy": ("grpo", {"top_entropy_quantile": 0.4}),
    "top_entropy_bonus_cispo": ("cispo", {"top_entropy_quantile": 0.4, "entropy_coef": 0.02}),
    "off_policy_mask": ("grpo", {"off_policy_threshold": 0.03}),
    "off_policy_mask_dapo": ("grpo", {"aggregation": "token_mean", "off_policy_threshold": 0.03}),
    "rollout_token_truncate": ("grpo", {"rollout_correction": "token_truncate", "rollout_correction_max": 1.1}),
    "rollout_token_mask": (
        "grpo",
        {"rollout_correction": "token_mask", "rollout_correction_min": 0.8, "rollout_correction_max": 1.2},
    ),
    "rollout_sequence_truncate": (
        "grpo",
        {"rollout_correction": "sequence_truncate", "rollout_correction_min": 0.7, "rollout_correction_max": 1.3},
    ),
    "rollout_sequence_mask": ("grpo", {"rollout_correction": "sequence_mask", "rollout_correction_max": 1.5}),
    "kl_k3": ("grpo", {"kl_coef": 0.3}),
    "kl_bias_correction": ("grpo", {"kl_coef": 0.3, "kl_gradient": "trl_bias_correction"}),
    "kl_bias_correction_dapo": (
        "grpo",
        {"aggregation": "token_mean", "kl_coef": 0.3, "kl_gradient": "trl_bias_correction"},
    ),
    "kl_bias_correction_gspo": (
        "gspo",
        {"clip_low": 0.05, "clip_high": 0.08, "kl_coef": 0.3, "kl_gradient": "trl_bias_correction"},
    ),
    "vespo_rollout_token_truncate": (
        "vespo",
        {"rollout_correction": "token_truncate", "rollout_correction_max": 1.1},
    ),
}


@pytest.mark.parametrize("case", CASES)
def test_loss_and_gradient_equal_trls(case):
    preset, over = CASES[case]
    (ours,), (theirs,) = _both(*_settings(preset, **over))
    torch.testing.assert_close(ours[0], theirs[0], rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(ours[1], theirs[1], rtol=1e-6, atol=1e-6)
    assert ours[1].abs().sum() > 0  # something was trained


def test_the_cases_make_each_switch_act():
    """A switch equal to TRL's only where it does nothing would prove nothing: each case's switch changes the
    loss or gradient from its base's on these tensors."""
    for case, (preset, over) in CASES.items():
        if not over or case in {"gspo", "luspo", "cispo"}:
            continue
        base = {k: v for k, v in over.items() if k in {"aggregation", "clip_high", "clip_low"}}
        if over.get("kl_gradient"):  # the bias correction against TRL's plain KL
            base = {**base, "kl_coef": over["kl_coef"]}
        if base == over:
            continue
        (a,), _ = _both(*_settings(preset, **over))
        (b,), _ = _both(*_settings(preset, **base))
        assert not torch.allclose(a[1], b[1]), case


def test_the_clip_ranges_bind_on_these_tensors():
    """gspo, luspo and cispo's clip or cap acts on these ratios: a wide range gives another gradient."""
    for preset, tight, wide in (
        ("gspo", {"clip_low": 0.05, "clip_high": 0.08}, {"clip_low": 0.9, "clip_high": 9.0}),
        ("luspo", {"clip_low": 0.05, "clip_high": 0.08}, {"clip_low": 0.9, "clip_high": 9.0}),
        ("cispo", {"clip_high": 0.2}, {"clip_high": 9.0}),
    ):
        (a,), _ = _both(*_settings(preset, **tight))
        (b,), _ = _both(*_settings(preset, **wide))
        assert not torch.allclose(a[1], b[1]), preset


def test_adaptive_entropy_control_equals_trls_over_steps():
    """Skywork-OR1's adaptive coefficient: the bonus is off at the first step (no entropy measured yet), then on
    while the entropy is at or below the target, the coefficient moving by Δ each step, as TRL's."""
    o, r, t = _settings("grpo", entropy_coef=0.1, entropy_target=5.0, entropy_coef_step=0.05, entropy_coef_max=0.12)
    ours, theirs = _both(o, r, t, steps=3)
    for (la, ga), (lb, gb) in zip(ours, theirs):
        torch.testing.assert_close(la, lb, rtol=1e-6, atol=1e-6)
        torch.testing.assert_close(ga, gb, rtol=1e-6, atol=1e-6)
    assert not torch.allclose(ours[0][1], ours[1][1])  # the bonus came in at step 2


def test_entropy_coefficient_by_hand():
    c = EntropyCoefficient(0.1, target=0.5, step=0.05, maximum=0.12)
    assert c.applied() == 0.0  # nothing measured yet
    c.update(0.4)
    assert (c.value, c.applied()) == (0.12, 0.12)  # below target: up by Δ, capped at the maximum
    c.update(0.6)
    assert math.isclose(c.value, 0.07) and c.applied() == 0.0  # above: down by Δ, and off
    c.update(0.6)
    c.update(0.6)
    assert c.value == 0.0  # floored at 0
    fixed = EntropyCoefficient(0.3)
    fixed.update(9.0)
    assert fixed.applied() == 0.3
