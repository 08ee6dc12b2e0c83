"""How a run reads as TRL's `GRPOTrainer` (`train.engine: trl`): the switch table, both ways.

`TABLE` is the table of docs/trl.md: every field of the objective, rollout and train settings, with the GRPOConfig
argument it becomes or why TRL cannot express it. `trl_problems` lists what cannot be expressed (the run config's
validation calls it, so a sweep fails before any job starts), `grpo_args` builds the arguments, and `settings_of`
reads a TRL run's arguments back as harness's settings, so that a plain TRL script's run is logged under the keys
harness's runs have. No TRL import: this is data, checked before TRL is ever loaded."""

from __future__ import annotations

from typing import Any

from trainer.config import RolloutConfig, TrainConfig
from trainer.objective.settings import OVERLONG_COMPONENT, POISE_FIELDS, SPO_FIELDS, ObjectiveSettings

TRL_REQUIREMENT = "trl>=1.16,<1.17"
"""The TRL versions harness is tested with (pyproject's `trl` extra): HarnessCallback reads two private members of
GRPOTrainer (`_calculate_rewards`, `_logs`), so a version outside the range is refused rather than misread."""
TRL_EXTRA = 'pip install -c constraints-cpu.txt -e ".[trl]"'
TRL_STD_EPS = 1e-4
"""What TRL adds to the reward std before dividing (fixed in its code)."""
OVERLONG_REWARD = "soft_overlong_punishment_reward"
"""The `__name__` of TRL's soft overlong punishment reward (trl.rewards.get_soft_overlong_punishment)."""

SCALE_REWARDS = {"group_std": "group", "batch_std": "batch", "group_mean": "none"}
MULTI_OBJECTIVE = {"gdpo": "normalize_then_sum"}
"""Advantages TRL computes with `multi_objective_aggregation` (one reward function per component) in place of
`scale_rewards`, which that aggregation ignores."""
LOSS_TYPES = {
    ("clip", "seq_mean_token_mean"): "grpo",
    ("clip", "token_mean"): "dapo",
    ("clip", "constant"): "dr_grpo",
    ("clip", "seq_mean_token_sum"): "luspo",
    ("cispo", "token_mean"): "cispo",
    ("sapo", "seq_mean_token_mean"): "sapo",
    ("vespo", "token_mean"): "vespo",
}
"""(surrogate, aggregation) → TRL's `loss_type`, which names both at once."""
IS_LEVELS = {"token": "token", "sequence": "sequence"}
ELSEWHERE = {
    "gmpo": "TRL's GMPO is trl.experimental.gmpo.GMPOTrainer, not a loss_type of the GRPOTrainer harness runs",
    "dppo_tv": "TRL has no DPPO",
    "dppo_kl": "TRL has no DPPO",
    "dro": "TRL has no DRO",
    "gpg": "TRL has no GPG loss",
}
"""Surrogates TRL's GRPOTrainer has no loss_type for, with why: refused by name, whatever the aggregation."""

TABLE: dict[str, str] = {
    "objective.advantage": "`scale_rewards`: group_std → group, batch_std → batch, group_mean → none; gdpo → "
    "`multi_objective_aggregation=normalize_then_sum` (GDPO); the other estimators have none (error: gdpo_tokens, "
    "verl's per-token whitening, too)",
    "objective.adv_eps": "TRL adds a fixed 1e-4 to the std: must be 1e-4 when the advantage divides by a std (error)",
    "objective.reward_range": "unused (ngrpo, bnpo and poise only, which TRL has not)",
    "objective.bnpo_params": "unused (bnpo only, which TRL has not)",
    "objective.bnpo_max_weight": "unused (bnpo only, which TRL has not)",
    "objective.stratum_key": "TRL normalises over whole groups, with no strata (Stratified GRPO): set is an error",
    "objective.stratum_blend": "unused (stratified only, which TRL has not)",
    "objective.poise_depth": "unused (poise only, which TRL has not: its value probe on the policy's hidden states)",
    "objective.poise_pool_tokens": "unused (poise only, which TRL has not)",
    "objective.poise_pca_dims": "unused (poise only, which TRL has not)",
    "objective.poise_ridge_alpha": "unused (poise only, which TRL has not)",
    "objective.poise_buffer_rows": "unused (poise only, which TRL has not)",
    "objective.poise_bootstrap_steps": "unused (poise only, which TRL has not)",
    "objective.spo_rho_min": "unused (spo only, which TRL has not: its per-prompt value tracker)",
    "objective.spo_rho_max": "unused (spo only, which TRL has not)",
    "objective.spo_d_half": "unused (spo only, which TRL has not)",
    "objective.spo_init_samples": "unused (spo only, which TRL has not)",
    "objective.spo_rho": "unused (spo only, which TRL has not)",
    "objective.reward_components": "one reward function each (harness's engine: the task's reward, `task_<name>` for "
    "a component the task grades, TRL's soft overlong punishment for overlong), TRL normalising each on its own "
    "(`multi_objective_aggregation=normalize_then_sum`); the task's reward function comes first at weight 0 when not "
    "named, and its correctness last at weight 0, each adding 0 to the advantage",
    "objective.reward_weights": "`reward_weights` of those reward functions (1 each when null)",
    "objective.aggregation": "`loss_type`, with the surrogate: clip with seq_mean_token_mean → grpo, token_mean → "
    "dapo, constant → dr_grpo, seq_mean_token_sum → luspo; cispo with token_mean → cispo; sapo with "
    "seq_mean_token_mean → sapo; vespo with token_mean → vespo; any other pair has none (error)",
    "objective.surrogate": "`loss_type` (see objective.aggregation); gmpo is TRL's experimental GMPOTrainer, another "
    "trainer than the GRPOTrainer harness's engine runs, and TRL has no dppo_tv, dppo_kl, dro or gpg (error)",
    "objective.dppo_bounds": "TRL has no DPPO (objective.surrogate dppo_tv, dppo_kl is an error)",
    "objective.dppo_ratio_cap": "TRL has no DPPO",
    "objective.dro_beta": "TRL has no DRO (objective.surrogate dro is an error)",
    "objective.max_len": "TRL's dr_grpo divides by `max_completion_length`: must equal rollout.max_new_tokens (error)",
    "objective.ratio": "`importance_sampling_level`: token, sequence; sequence_token has none, sequence_product is "
    "TRL's RLOOTrainer's, another trainer (error)",
    "objective.clip_low": "`epsilon`",
    "objective.clip_high": "`epsilon_high`; under cispo `epsilon_high` = 1 + clip_high (TRL's cap is the weight's "
    "bound itself)",
    "objective.sapo_temperature": "`sapo_temperature_pos`, `sapo_temperature_neg`",
    "objective.vespo_k": "`vespo_k_pos`, `vespo_k_neg`",
    "objective.vespo_lambda": "`vespo_lambda_pos`, `vespo_lambda_neg`",
    "objective.kl_cov_ratio": "TRL has no KL-Cov (objective.surrogate kl_cov is an error)",
    "objective.kl_cov_coef": "TRL has no KL-Cov",
    "objective.clip_cov_ratio": "TRL has no Clip-Cov: set is an error",
    "objective.clip_cov_bounds": "TRL has no Clip-Cov",
    "objective.entropy_coef": "`entropy_coef` (TRL's bonus is the token mean of each micro-batch divided by the "
    "accumulation steps, harness's the mean over the optimisation batch's trained tokens: the same with one "
    "micro-batch per step or equal token counts)",
    "objective.entropy_target": "`use_adaptive_entropy=True`, `entropy_target`, `entropy_coef_min=0` (the bonus as "
    "`entropy_coef`'s)",
    "objective.entropy_coef_step": "`entropy_coef_delta`",
    "objective.entropy_coef_max": "`entropy_coef_max`",
    "objective.top_entropy_quantile": "`top_entropy_quantile` (TRL takes the quantile over each micro-batch, "
    "harness over the optimisation batch: the same when they coincide)",
    "objective.off_policy_threshold": "`off_policy_mask_threshold`",
    "objective.rollout_correction": "`vllm_importance_sampling_correction=True`, `vllm_importance_sampling_mode`; "
    "TRL corrects only vLLM's log-probabilities: needs rollout.backend vllm (error); with VESPO only token_truncate "
    "or token_mask (error)",
    "objective.rollout_correction_min": "`vllm_importance_sampling_clip_min`",
    "objective.rollout_correction_max": "`vllm_importance_sampling_clip_max`",
    "objective.rollout_correction_batch_normalize": "TRL's importance weights are not normalised by their batch "
    "mean (verl's `rollout_is_batch_normalize`): true is an error",
    "objective.rollout_rejection": "TRL has no rejection by a divergence between rollout and trainer (verl's "
    "`rollout_rs`; its `vllm_importance_sampling_mode` masks zero the weight and keep the token in the normalisers): "
    "set is an error",
    "objective.rollout_rejection_min": "unused (rollout_rejection only, which TRL has not)",
    "objective.rollout_rejection_max": "unused (rollout_rejection only, which TRL has not)",
    "objective.dual_clip": "`delta` (INTELLECT-2's cap on the ratio: the same loss and gradient when c > 1 + "
    "clip_high; error otherwise)",
    "objective.kl_coef": "`beta`",
    "objective.kl_estimator": "TRL's KL is k3: k1, k2 or abs with kl_coef > 0 is an error",
    "objective.kl_gradient": "`use_bias_correction_kl`: trl_bias_correction → True, estimator → False; "
    "k2_straight_through and openrlhf_unbiased_gradient with kl_coef > 0 are errors",
    "objective.kl_target": "TRL's `beta` is fixed: an adaptive KL coefficient is an error",
    "objective.kl_horizon": "unused (the adaptive KL coefficient only, which TRL has not)",
    "objective.kl_reward_coef": "TRL's GRPOTrainer has no KL in the reward (its RLOOTrainer's `beta` is one, "
    "another trainer): > 0 is an error",
    "objective.kl_reward_estimator": "unused (the KL in the reward only, which TRL's GRPOTrainer has not)",
    "objective.overlong_filter": "`mask_truncated_completions`",
    "objective.overlong_penalty": "TRL's `get_soft_overlong_punishment(max_len, overlong_cache_len)` as a second "
    "reward function",
    "objective.overlong_cache_len": "`soft_punish_cache` of that reward function",
    "objective.length_reward": "TRL's `get_cosine_scaled_reward` grades correctness itself, with math_verify against "
    "a `solution` column, not with the task's grader, and has no value for a truncated response: cosine is an error",
    "objective.cosine_correct": "unused (length_reward cosine only, which TRL cannot take from the task's grader)",
    "objective.cosine_wrong": "unused (length_reward cosine only)",
    "objective.cosine_exceed": "unused (length_reward cosine only)",
    "objective.dynamic_sampling": "TRL has no dynamic sampling: true is an error",
    "objective.dynamic_sampling_key": "unused (dynamic sampling only)",
    "objective.dynamic_sampling_drop": "unused (dynamic sampling only)",
    "objective.pf_ppo_reweight": "TRL trains every response it samples once (no PF-PPO resampling, verl's "
    "`algorithm.use_pf_ppo`): set is an error",
    "objective.pf_ppo_weight_pow": "unused (pf_ppo_reweight pow only, which TRL has not)",
    "objective.ngrpo_single": "unused (ngrpo only, which TRL has not)",
    "objective.median_pivot": "TRL samples num_generations per prompt and trains on all of them (no median pivot): "
    "true is an error",
    "objective.positive_weight": "TRL weighs every response the same (no NSR / W-REINFORCE weight): set is an error",
    "objective.drop_correct": "TRL trains on every response it samples (no NSR batch subset): true is an error",
    "rollout.backend": "transformers → `use_vllm=False`; vllm → `use_vllm=True`, `vllm_mode=colocate`",
    "rollout.vllm_gpu_memory_utilization": "`vllm_gpu_memory_utilization`",
    "rollout.capture": "unused by TRL's sampling (its own `generate` or vLLM); harness's backend, which evaluates "
    "under this engine, captures as under harness's",
    "rollout.prompts_per_step": "`generation_batch_size` = prompts_per_step × group_size; prompts in harness's order, "
    "each sample its own prompt (the toy's noisy copies)",
    "rollout.group_size": "`num_generations`",
    "rollout.prompt_pool": "TRL draws from its train dataset, which harness builds from the task: a fixed pool is "
    "not expressed (set is an error)",
    "rollout.prompt_sampling": "TRL samples its dataset uniformly (its RepeatSampler): value_priority is an error",
    "rollout.prompt_priority_eps": "unused (value_priority only, which TRL has not)",
    "rollout.hint": "TRL samples each prompt's group once and trains on it: no hinted responses swapped into an "
    "all-wrong group (Scaf-GRPO, HiLL's reasoner update; set is an error)",
    "rollout.hint_after_steps": "unused (rollout.hint only, which TRL has not)",
    "rollout.max_new_tokens": "`max_completion_length`",
    "rollout.temperature": "`temperature` (with `top_k=0`, `min_p=None`, `repetition_penalty=1`)",
    "rollout.top_p": "`top_p`",
    "train.engine": "trl: this table",
    "train.steps": "`max_steps` = steps × mini_batches × epochs (TRL counts optimiser steps)",
    "train.lr": "`learning_rate`",
    "train.warmup_steps": "`warmup_steps`, `lr_scheduler_type=constant_with_warmup` (its warm-up starts at lr 0, "
    "harness's at lr/warmup_steps)",
    "train.weight_decay": "`weight_decay` (`optim=adamw_torch`, `adam_epsilon=1e-8` as torch's AdamW)",
    "train.betas": "`adam_beta1`, `adam_beta2`",
    "train.max_grad_norm": "`max_grad_norm` (null → 0: no clipping)",
    "train.mini_batches": "`steps_per_generation` = mini_batches × accumulation steps; the rollout batch must split "
    "evenly (error)",
    "train.epochs": "`num_iterations`",
    "train.micro_batch_size": "`per_device_train_batch_size`, `gradient_accumulation_steps` = mini-batch / "
    "micro-batch (must divide: error)",
    "train.length_buckets": "unused (TRL pads each micro-batch to its longest response)",
    "train.logits_chunk_mb": "unused (TRL computes its log-probabilities its own way)",
    "train.max_gen_rounds": "unused (dynamic sampling only)",
    "train.reference_kl": "TRL computes the KL only when beta > 0: true with kl_coef 0 is an error",
    "train.reference_sync_steps": "`sync_ref_model=True`, `ref_model_sync_steps` = reference_sync_steps × "
    "mini_batches × epochs (TRL counts optimiser steps); TRL syncs only a reference it uses: set with kl_coef 0 is an "
    "error",
    "train.reference_mixup_alpha": "`ref_model_mixup_alpha`",
    "train.log_text": "the rollout table's prompt and response columns (HarnessCallback)",
    "train.device": "cpu → `use_cpu=True`; auto, cuda → TRL's (accelerate's) choice",
    "train.threads": "torch CPU threads, as under harness's engine",
}


def trl_install_problem() -> str | None:
    """Why TRL cannot be used here (missing, or outside `TRL_REQUIREMENT`), naming the extra; None when it can.
    Reads the installed version's metadata only: importing TRL takes seconds."""
    from importlib.metadata import PackageNotFoundError, version

    from packaging.requirements import Requirement

    try:
        found = version("trl")
    except PackageNotFoundError:
        return f"needs TRL, which is not installed: {TRL_EXTRA}"
    if found not in Requirement(TRL_REQUIREMENT).specifier:
        return f"is tested with {TRL_REQUIREMENT}, found trl {found}: {TRL_EXTRA}"
    return None


def trl_problems(o: ObjectiveSettings, r: RolloutConfig, t: TrainConfig) -> list[str]:
    """Each setting TRL cannot express, as `key: value (why; what to set)`; empty when every switch maps."""
    out = []
    if o.advantage == "gdpo_tokens":
        out.append(
            "objective.advantage: gdpo_tokens (TRL's normalize_then_sum whitens over responses, not tokens: "
            "advantage gdpo)"
        )
    elif o.advantage not in SCALE_REWARDS and o.advantage not in MULTI_OBJECTIVE:
        out.append(f"objective.advantage: {o.advantage} (TRL's scale_rewards is group, batch or none)")
    elif SCALE_REWARDS.get(o.advantage) != "none" and o.adv_eps != TRL_STD_EPS:
        out.append(f"objective.adv_eps: {o.adv_eps:g} (TRL adds a fixed 1e-4 to the std: set objective.adv_eps=1e-4)")
    if o.surrogate in ELSEWHERE:
        out.append(f"objective.surrogate: {o.surrogate} ({ELSEWHERE[o.surrogate]})")
    elif (o.surrogate, o.aggregation) not in LOSS_TYPES:
        out.append(
            f"objective.aggregation: {o.aggregation} with objective.surrogate {o.surrogate} "
            "(TRL's loss_type has no equivalent)"
        )
    if o.clip_cov_ratio is not None:
        out.append(f"objective.clip_cov_ratio: {o.clip_cov_ratio:g} (TRL has no Clip-Cov)")
    if o.rollout_correction is not None and r.backend != "vllm":
        out.append(
            f"objective.rollout_correction: {o.rollout_correction} (TRL corrects only vLLM's log-probabilities: "
            "set rollout.backend=vllm)"
        )
    if o.rollout_correction_batch_normalize:
        out.append(
            "objective.rollout_correction_batch_normalize: true (TRL does not normalise its importance weights by "
            "their batch mean)"
        )
    if o.rollout_rejection is not None:
        out.append(
            f"objective.rollout_rejection: {o.rollout_rejection} (TRL has no rejection by a divergence between "
            "rollout and trainer)"
        )
    if o.surrogate == "vespo" and o.rollout_correction not in (None, "token_truncate", "token_mask"):
        out.append(
            f"objective.rollout_correction: {o.rollout_correction} with objective.surrogate vespo (TRL's VESPO takes "
            "only token_truncate or token_mask)"
        )
    if o.aggregation == "constant" and o.max_len != r.max_new_tokens:
        out.append(
            f"objective.max_len: {o.max_len} (TRL's dr_grpo divides by max_completion_length, "
            f"rollout.max_new_tokens = {r.max_new_tokens})"
        )
    if o.ratio not in IS_LEVELS:
        elsewhere = "; Π_t r_t is its RLOOTrainer's, another trainer" if o.ratio == "sequence_product" else ""
        out.append(f"objective.ratio: {o.ratio} (TRL's importance_sampling_level is token or sequence{elsewhere})")
    if o.dual_clip is not None and o.dual_clip <= 1 + o.clip_high:
        out.append(
            f"objective.dual_clip: {o.dual_clip:g} (TRL's delta equals a dual clip only above 1 + clip_high "
            f"= {1 + o.clip_high:g})"
        )
    if o.kl_coef > 0 and o.kl_estimator != "k3":
        out.append(f"objective.kl_estimator: {o.kl_estimator} (TRL's KL is k3)")
    if o.kl_reward_coef > 0:
        out.append(f"objective.kl_reward_coef: {o.kl_reward_coef:g} (TRL's GRPOTrainer has no KL in the reward)")
    if o.kl_coef > 0 and o.kl_gradient not in ("estimator", "trl_bias_correction"):
        out.append(f"objective.kl_gradient: {o.kl_gradient} (TRL's use_bias_correction_kl is on or off)")
    if o.kl_target is not None:
        out.append(f"objective.kl_target: {o.kl_target:g} (TRL's beta is fixed: no adaptive KL coefficient)")
    if o.dynamic_sampling:
        out.append("objective.dynamic_sampling: true (TRL has no dynamic sampling)")
    if o.length_reward is not None:
        out.append(
            f"objective.length_reward: {o.length_reward} (TRL's get_cosine_scaled_reward grades with math_verify "
            "against a solution column, not the task's grader)"
        )
    if o.pf_ppo_reweight is not None:
        out.append(
            f"objective.pf_ppo_reweight: {o.pf_ppo_reweight} (TRL trains every response it samples once: no PF-PPO)"
        )
    if o.median_pivot:
        out.append("objective.median_pivot: true (TRL trains on every response it samples: no MC-GRPO pivot)")
    if o.drop_correct:
        out.append("objective.drop_correct: true (TRL trains on every response it samples: no NSR)")
    if o.positive_weight is not None:
        out.append(f"objective.positive_weight: {o.positive_weight:g} (TRL weighs every response the same: no NSR)")
    if o.stratum_key is not None:
        out.append(f"objective.stratum_key: {o.stratum_key} (TRL normalises over whole groups: no strata)")
    if r.prompt_pool is not None:
        out.append(f"rollout.prompt_pool: {r.prompt_pool} (TRL draws from its train dataset: no fixed pool)")
    if r.hint is not None:
        out.append(f"rollout.hint: {r.hint} (TRL trains on the group it sampled: no hints for all-wrong groups)")
    if t.reference_kl and o.kl_coef == 0:
        out.append("train.reference_kl: true (TRL computes the KL only when beta > 0: set train.reference_kl=false)")
    if t.reference_sync_steps is not None and o.kl_coef == 0:
        out.append(
            f"train.reference_sync_steps: {t.reference_sync_steps} (TRL syncs its reference only when beta > 0: "
            "set objective.kl_coef)"
        )
    batch = r.prompts_per_step * r.group_size
    if batch % t.mini_batches:
        out.append(f"train.mini_batches: {t.mini_batches} (TRL splits the {batch} responses of a step evenly)")
    elif t.micro_batch_size is not None and (batch // t.mini_batches) % t.micro_batch_size:
        out.append(
            f"train.micro_batch_size: {t.micro_batch_size} (TRL accumulates whole micro-batches: it must divide "
            f"the mini-batch of {batch // t.mini_batches})"
        )
    return out


def grpo_args(o: ObjectiveSettings, r: RolloutConfig, t: TrainConfig) -> dict[str, Any]:
    """GRPOConfig's keyword arguments for these settings (the switches only: where the run writes, its seed and its
    logging are the engine's); the settings must have no `trl_problems`."""
    mini = r.prompts_per_step * r.group_size // t.mini_batches
    micro = t.micro_batch_size or mini
    accumulation = mini // micro
    sapo, vk, vl = o.sapo_temperature or (1.0, 1.05), o.vespo_k or (2.0, 3.0), o.vespo_lambda or (3.0, 2.0)
    return {
        "scale_rewards": SCALE_REWARDS.get(o.advantage, "group"),  # normalize_then_sum ignores it
        "multi_objective_aggregation": MULTI_OBJECTIVE.get(o.advantage, "sum_then_normalize"),
        "loss_type": LOSS_TYPES[o.surrogate, o.aggregation],
        "importance_sampling_level": IS_LEVELS[o.ratio],
        "epsilon": o.clip_low,
        "epsilon_high": 1 + o.clip_high if o.surrogate == "cispo" else o.clip_high,
        "delta": o.dual_clip,
        "sapo_temperature_pos": sapo[0],
        "sapo_temperature_neg": sapo[1],
        "vespo_k_pos": vk[0],
        "vespo_k_neg": vk[1],
        "vespo_lambda_pos": vl[0],
        "vespo_lambda_neg": vl[1],
        "entropy_coef": o.entropy_coef,
        "use_adaptive_entropy": o.entropy_target is not None,
        **(
            {
                "entropy_target": o.entropy_target,
                "entropy_coef_delta": o.entropy_coef_step,
                "entropy_coef_max": o.entropy_coef_max,
                "entropy_coef_min": 0.0,
            }
            if o.entropy_target is not None
            else {}
        ),
        "top_entropy_quantile": o.top_entropy_quantile,
        "off_policy_mask_threshold": o.off_policy_threshold,
        "vllm_importance_sampling_correction": o.rollout_correction is not None,
        **(
            {
                "vllm_importance_sampling_mode": o.rollout_correction,
                "vllm_importance_sampling_clip_min": o.rollout_correction_min,
                "vllm_importance_sampling_clip_max": o.rollout_correction_max,
            }
            if o.rollout_correction is not None
            else {}
        ),
        "beta": o.kl_coef,
        "use_bias_correction_kl": o.kl_gradient == "trl_bias_correction",
        "sync_ref_model": t.reference_sync_steps is not None,
        **(
            {
                "ref_model_sync_steps": t.reference_sync_steps * t.mini_batches * t.epochs,
                "ref_model_mixup_alpha": t.reference_mixup_alpha,
            }
            if t.reference_sync_steps is not None
            else {}
        ),
        "mask_truncated_completions": o.overlong_filter,
        "use_vllm": r.backend == "vllm",
        **(
            {"vllm_mode": "colocate", "vllm_gpu_memory_utilization": r.vllm_gpu_memory_utilization}
            if r.backend == "vllm"
            else {}
        ),
        "num_generations": r.group_size,
        "per_device_train_batch_size": micro,
        "gradient_accumulation_steps": accumulation,
        "steps_per_generation": t.mini_batches * accumulation,
        "num_iterations": t.epochs,
        "max_completion_length": r.max_new_tokens,
        "temperature": r.temperature,
        "top_p": r.top_p,
        "top_k": 0,
        "min_p": None,
        "repetition_penalty": 1.0,
        "max_steps": t.steps * t.mini_batches * t.epochs,
        "learning_rate": t.lr,
        "lr_scheduler_type": "constant_with_warmup",
        "warmup_steps": t.warmup_steps,
        "optim": "adamw_torch",
        "adam_beta1": t.betas[0],
        "adam_beta2": t.betas[1],
        "adam_epsilon": 1e-8,
        "weight_decay": t.weight_decay,
        "max_grad_norm": t.max_grad_norm if t.max_grad_norm is not None else 0.0,
        "use_cpu": t.device == "cpu",
    }


def _reward_name(f: Any) -> str:
    """A reward function's name as TRL names it: a callable's `__name__`, a model's name or path's last part."""
    name = getattr(f, "__name__", None)
    if name is None:
        config = getattr(f, "config", None)
        name = str(getattr(config, "_name_or_path", f)).split("/")[-1]
    return name


def overlong_reward_args(o: ObjectiveSettings) -> tuple[int, int] | None:
    """(max_completion_len, soft_punish_cache) of TRL's soft overlong punishment for these settings, None if off."""
    if not o.overlong_penalty:
        return None
    assert o.max_len is not None and o.overlong_cache_len is not None  # the settings' validation requires both
    return o.max_len, o.overlong_cache_len


def settings_of(args: Any, max_steps: int, reward_funcs: list[Any]) -> dict[str, dict[str, Any]]:
    """A TRL run's GRPOConfig `args` (and its computed `max_steps`, its reward functions) as harness's objective,
    rollout and train settings, for logging a plain TRL run under harness's keys. A TRL loss or level without a
    harness equivalent is written `trl:<name>`."""
    overlong = next((f for f in reward_funcs if getattr(f, "__name__", "") == OVERLONG_REWARD), None)
    inverse = lambda table, value: next((k for k, v in table.items() if v == value), f"trl:{value}")  # noqa: E731
    scale = {True: "group", False: "none"}.get(args.scale_rewards, args.scale_rewards)
    surrogate, aggregation = next(
        (pair for pair, name in LOSS_TYPES.items() if name == args.loss_type), ("clip", f"trl:{args.loss_type}")
    )
    high = args.epsilon_high if args.epsilon_high is not None else args.epsilon
    adaptive = bool(getattr(args, "use_adaptive_entropy", False))
    correction = bool(args.use_vllm and getattr(args, "vllm_importance_sampling_correction", False))
    per_generation = args.steps_per_generation * args.num_iterations // args.gradient_accumulation_steps
    # TRL settings harness has no switch for are logged as `trl:` names where they change the objective
    aggregate = getattr(args, "multi_objective_aggregation", "sum_then_normalize")  # normalize_then_sum ignores scale
    summed_first = aggregate == "sum_then_normalize"
    advantage = inverse(SCALE_REWARDS, scale) if summed_first else inverse(MULTI_OBJECTIVE, aggregate)
    components = [OVERLONG_COMPONENT if n == OVERLONG_REWARD else n for n in map(_reward_name, reward_funcs)]
    gdpo = advantage in MULTI_OBJECTIVE
    corrected = bool(args.beta and getattr(args, "use_bias_correction_kl", False))
    synced = bool(args.beta and getattr(args, "sync_ref_model", False))  # TRL refuses it with beta 0
    every, rest = divmod(args.ref_model_sync_steps, max(per_generation, 1)) if synced else (None, 0)
    # TRL's delta caps the ratio of every token: a dual clip only above 1 + ε_high, where no positive token reaches it
    dual = args.delta if args.delta is None or args.delta > 1 + high else f"trl:delta={args.delta:g}"
    return {
        "objective": {
            "advantage": advantage,
            "adv_eps": TRL_STD_EPS,
            "reward_range": None,
            "bnpo_params": None,
            "bnpo_max_weight": None,
            "ngrpo_single": "virtual",
            "dynamic_sampling_drop": "flat",
            "stratum_key": None,
            "stratum_blend": 1.0,
            **dict.fromkeys(POISE_FIELDS),
            **dict.fromkeys((*SPO_FIELDS, "spo_rho")),
            "reward_components": components if gdpo else None,  # each reward function one component
            "reward_weights": list(args.reward_weights) if gdpo and args.reward_weights is not None else None,
            "aggregation": aggregation,
            "surrogate": surrogate,
            "max_len": args.max_completion_length,
            "ratio": inverse(IS_LEVELS, args.importance_sampling_level),
            "clip_low": args.epsilon,
            "clip_high": high - 1 if surrogate == "cispo" else high,
            "dual_clip": dual,
            "sapo_temperature": [args.sapo_temperature_pos, args.sapo_temperature_neg] if surrogate == "sapo" else None,
            "vespo_k": [args.vespo_k_pos, args.vespo_k_neg] if surrogate == "vespo" else None,
            "vespo_lambda": [args.vespo_lambda_pos, args.vespo_lambda_neg] if surrogate == "vespo" else None,
            "kl_cov_ratio": None,
            "kl_cov_coef": None,
            "dppo_bounds": None,
            "dppo_ratio_cap": None,
            "dro_beta": None,
            "clip_cov_ratio": None,
            "clip_cov_bounds": None,
            "entropy_coef": args.entropy_coef,
            "entropy_target": args.entropy_target if adaptive else None,
            "entropy_coef_step": args.entropy_coef_delta if adaptive else None,
            "entropy_coef_max": args.entropy_coef_max if adaptive else None,
            "top_entropy_quantile": args.top_entropy_quantile,
            "off_policy_threshold": args.off_policy_mask_threshold,
            "rollout_correction": args.vllm_importance_sampling_mode if correction else None,
            "rollout_correction_min": args.vllm_importance_sampling_clip_min if correction else None,
            "rollout_correction_max": args.vllm_importance_sampling_clip_max if correction else None,
            "rollout_correction_batch_normalize": False,
            "rollout_rejection": None,
            "rollout_rejection_min": None,
            "rollout_rejection_max": None,
            "kl_coef": args.beta,
            "kl_estimator": "k3",
            "kl_gradient": "trl_bias_correction" if corrected else "estimator",
            "kl_target": None,
            "kl_horizon": None,
            "kl_reward_coef": 0.0,
            "kl_reward_estimator": "k1",
            "overlong_filter": bool(args.mask_truncated_completions),
            "overlong_penalty": overlong is not None,
            "overlong_cache_len": getattr(overlong, "soft_punish_cache", None),
            "length_reward": None,  # TRL's cosine reward is its own reward function, read from math_verify's grade
            "cosine_correct": None,
            "cosine_wrong": None,
            "cosine_exceed": None,
            "pf_ppo_reweight": None,
            "pf_ppo_weight_pow": None,
            "dynamic_sampling": False,
            "median_pivot": False,
            "drop_correct": False,
            "positive_weight": None,
        },
        "rollout": {
            "backend": "vllm" if args.use_vllm else "transformers",
            "prompts_per_step": args.generation_batch_size // args.num_generations,
            "group_size": args.num_generations,
            "max_new_tokens": args.max_completion_length,
            "temperature": args.temperature,
            "top_p": args.top_p,
        },
        "train": {
            "engine": "trl",
            "steps": max_steps // max(per_generation, 1),
            "lr": args.learning_rate,
            "warmup_steps": args.warmup_steps,
            "weight_decay": args.weight_decay,
            "betas": [args.adam_beta1, args.adam_beta2],
            "max_grad_norm": args.max_grad_norm or None,
            "mini_batches": args.steps_per_generation // args.gradient_accumulation_steps,
            "epochs": args.num_iterations,
            "micro_batch_size": args.per_device_train_batch_size,
            # a sync between two generations' optimiser steps has no harness equivalent: named as TRL's
            "reference_sync_steps": every if not rest else f"trl:ref_model_sync_steps={args.ref_model_sync_steps}",
            "reference_mixup_alpha": args.ref_model_mixup_alpha if synced else None,
        },
    }
