"""Metric names: the contract between trainer, tracker, dashboard and report.

Every module that logs or reads a metric takes its name from here.
"""

# rollouts
REWARD_MEAN = "train/reward_mean"
ACCURACY = "train/accuracy"
LENGTH_MEAN = "train/length_mean"
LENGTH_CORRECT_MEAN = "train/length_correct_mean"  # not logged when a step has no correct response
LENGTH_INCORRECT_MEAN = "train/length_incorrect_mean"  # not logged when a step has no incorrect one
TRUNCATED_FRAC = "train/truncated_frac"
TOKENS_GENERATED = "train/tokens_generated"  # cumulative response tokens sampled so far, dropped groups included
GRADE_TIMEOUTS = "train/grade_timeouts"  # answers whose grading ran out of its time budget (graded wrong)

# groups
GROUPS_ALL_CORRECT_FRAC = "train/groups_all_correct_frac"
GROUPS_ALL_WRONG_FRAC = "train/groups_all_wrong_frac"
GROUPS_MIXED_FRAC = "train/groups_mixed_frac"
GEN_ROUNDS = "train/gen_rounds"
GROUPS_DROPPED = "train/groups_dropped"
# PF-PPO (objective.pf_ppo_reweight only; arXiv 2409.06957): the optimisation batch resampled with replacement by
# reward. distinct_frac: the share of the responses to be trained drawn at least once; reward_mean: the mean (shaped)
# reward of the batch as resampled, against train/reward_mean, that of every response sampled.
PF_PPO_DISTINCT_FRAC = "train/pf_ppo_distinct_frac"
PF_PPO_REWARD_MEAN = "train/pf_ppo_reward_mean"

# policy (computed with the loss, see trainer.objective)
ENTROPY = "policy/entropy"
# Clip fractions: where clipping acted (r < 1 − ε_low with A < 0, or r > 1 + ε_high with A > 0; dual clipping is
# policy/dual_clip_frac's). Each is a share within one optimiser step's mini-batch (its micro-batches pooled: summed
# counts over the mini-batch's own totals), then the mean over the rollout step's mini_batches × epochs optimiser
# steps, each weighing the same. low, high and clip_frac (= low + high) count in the ratio's own unit: loss tokens
# (mask 1) under `objective.ratio: token`, responses with a loss token under sequence and sequence_token.
CLIP_FRAC_LOW = "policy/clip_frac_low"
CLIP_FRAC_HIGH = "policy/clip_frac_high"
CLIP_FRAC = "policy/clip_frac"
# Share of loss tokens clipped under every ratio (the unit GSPO, arXiv 2507.18071, compares with GRPO): under
# sequence and sequence_token, every loss token of a response whose sequence ratio is clipped; = clip_frac under token.
CLIP_FRAC_TOKENS = "policy/clip_frac_tokens"
# Share of responses (with a loss token) with a clipped token: under sequence and sequence_token, those whose
# sequence ratio is clipped (= clip_frac); under token, those with at least one clipped token.
CLIP_FRAC_SEQS = "policy/clip_frac_seqs"
DUAL_CLIP_FRAC = "policy/dual_clip_frac"
# Under CISPO, clip_frac_high counts the tokens whose weight the cap lowered (any advantage sign); SAPO and VESPO
# clip nothing (their clip fractions are 0).
# Only in runs with the switch that defines them:
ENTROPY_TRAINED = "policy/entropy_trained"  # token mean over the trained tokens (top_entropy_quantile, entropy bonus)
ENTROPY_COEF = "policy/entropy_coef"  # the entropy bonus's coefficient applied (adaptive: before this step's update)
OFF_POLICY_MASKED_FRAC = "policy/off_policy_masked_frac"  # responses the off-policy mask left out
ROLLOUT_WEIGHT_MEAN = "policy/rollout_weight_mean"  # the rollout correction's mean weight over loss tokens
ROLLOUT_REJECTED_FRAC = "policy/rollout_rejected_frac"  # loss tokens the rollout rejection took out of the loss
COV_SELECTED_FRAC = "policy/cov_selected_frac"  # loss tokens Clip-Cov cut or KL-Cov penalised
KL = "policy/kl"
KL_COEF = "policy/kl_coef"  # the loss's KL coefficient applied this step, when adaptive (objective.kl_target)
# The refreshed reference (train.reference_sync_steps only): the step of its last refresh (0 before the first), every
# step; at a refresh, the L2 norm of its parameters' move, α·‖θ − θ_ref‖ over all parameters.
REF_REFRESH_STEP = "policy/ref_refresh_step"
REF_REFRESH_DISTANCE = "policy/ref_refresh_distance"
LOSS = "policy/loss"
GRAD_NORM = "policy/grad_norm"
LR = "policy/lr"
MICRO_BATCH = "policy/micro_batch_size"  # responses per forward/backward (halved on CUDA out-of-memory)
RATIO_MEAN = "policy/ratio_mean"
RATIO_MIN = "policy/ratio_min"
RATIO_MAX = "policy/ratio_max"

# The KL penalty in the reward (objective.kl_reward_coef > 0 only): the mean over the kept responses of β Σ_t kl_t,
# what the advantage's reward lost; train/reward_mean and train/accuracy stay the task's own.
KL_REWARD_PENALTY = "reward/kl_penalty_mean"
# The mean over the kept responses of each one's token-mean kl_t (π_old against π_ref, before the update): what the
# adaptive controller of the reward's β tracks (verl's `actor/reward_kl_penalty`).
KL_REWARD_MEAN = "reward/kl_mean"
KL_REWARD_COEF = "reward/kl_coef"  # the reward's KL coefficient applied this step, when adaptive (objective.kl_target)

# advantages
ADV_MEAN = "adv/mean"
ADV_ABS_MEAN = "adv/abs_mean"
ADV_ZERO_FRAC = "adv/zero_frac"
# Share of the trained responses whose advantage has the opposite sign to R_i − mean_g R (MC-GRPO's "sign flips",
# arXiv 2601.22582): 0 under group_std, group_mean and batch_std; the median can reverse a response between the two.
ADV_SIGN_FLIP_FRAC = "adv/sign_flip_frac"
# The mean task reward of the step's greedy (temperature-0) responses, one per kept prompt, not trained on: ReMax's
# baseline (advantage remax only; arXiv 2310.10505). Compare with train/reward_mean, the sampled responses'.
GREEDY_REWARD_MEAN = "adv/greedy_reward_mean"

# POISE's value probe (advantage poise only; arXiv 2605.07579, trainer/value_probe.py). value_abs_err: the mean over
# the kept responses of |g(z_i) − y_i|, the probe's prediction from response i's hidden states against its target (the
# mean reward of i's siblings), made before the probe saw this step; value_explained_var: 1 − mean (g − y)² / Var(y)
# (the authors' Brier skill: 0 = no better than the targets' mean, 1 = exact); both from the probe's first fit on
# (poise/probe_fitted: 0 during its bootstrap, whose baseline is RLOO's). adv_var_ratio: Var(A) / Var(R) over the kept
# responses, the advantage's variance against that of REINFORCE without a baseline (A = R): below 1, the baseline
# removes variance. buffer_rows: the responses the probe is refit on.
POISE_VALUE_ABS_ERR = "poise/value_abs_err"
POISE_VALUE_EXPLAINED_VAR = "poise/value_explained_var"
POISE_ADV_VAR_RATIO = "poise/adv_var_ratio"
POISE_PROBE_FITTED = "poise/probe_fitted"
POISE_BUFFER_ROWS = "poise/buffer_rows"

# SPO's value tracker (advantage spo only; arXiv 2509.13232, trainer/value_tracker.py). value_abs_err: the mean over the
# kept responses of |v̂(x_i) − R_i|, the tracked success rate of response i's prompt before this step against its
# reward; value_mean: the mean v̂ the advantage subtracted; tracked_frac: the share of kept responses whose prompt had
# been initialised or seen before this step (the rest got the prior ½); rho_mean: the mean forgetting factor ρ applied
# to this step's prompts; tracked_prompts: the prompts the tracker holds after the step.
SPO_VALUE_ABS_ERR = "spo/value_abs_err"
SPO_VALUE_MEAN = "spo/value_mean"
SPO_TRACKED_FRAC = "spo/tracked_frac"
SPO_RHO_MEAN = "spo/rho_mean"
SPO_TRACKED_PROMPTS = "spo/tracked_prompts"

# Hints for all-wrong groups (rollout.hint only; trainer/hints.py), every step, 0 during the exemption
# (rollout.hint_after_steps). groups_triggered_frac: the share of the step's generated groups for which hinted
# responses were drawn (every response wrong, a sample with a hint); groups_hinted_frac: the share whose responses
# hinted ones replaced; responses_frac: the share of the trained responses that are hinted. Only when defined:
# accuracy, the share of the step's hinted draws that are correct; reliance, HiLL's hint reliance (arXiv 2604.00698,
# its code's sign) averaged over the correct hinted responses swapped in, mean_t log π(o_t | q) − log π(o_t | q ⊕ h) in
# nats per token under the policy that sampled them: negative when they are less likely without the hint.
# train/accuracy and task/* stay those of the responses drawn without hints.
HINT_GROUPS_TRIGGERED_FRAC = "hint/groups_triggered_frac"
HINT_GROUPS_HINTED_FRAC = "hint/groups_hinted_frac"
HINT_RESPONSES_FRAC = "hint/responses_frac"
HINT_ACCURACY = "hint/accuracy"
HINT_RELIANCE = "hint/reliance"

# cost
GENERATE_S = "time/generate_s"
# The rollout backend's `generate` calls of a step (prefill and decode), over their token steps: each call's
# longest response (a decode runs until its last row ends). What the GPU check compares with the bare backend.
DECODE_STEP_S = "time/decode_step_s"
UPDATE_S = "time/update_s"
STEP_S = "time/step_s"
TOKENS_PER_S = "throughput/tokens_per_s"


def eval_metric(benchmark: str, what: str) -> str:
    """`eval/<benchmark>/<what>`, e.g. eval_metric("math500", "accuracy")."""
    return f"eval/{benchmark}/{what}"


def task_metric(what: str) -> str:
    """`task/<what>`: metrics a task adds on top of the common ones."""
    return f"task/{what}"


# Logged at every training step (the length splits only when defined).
TRAINING = (
    REWARD_MEAN,
    ACCURACY,
    LENGTH_MEAN,
    LENGTH_CORRECT_MEAN,
    LENGTH_INCORRECT_MEAN,
    TRUNCATED_FRAC,
    TOKENS_GENERATED,
    GRADE_TIMEOUTS,
    GROUPS_ALL_CORRECT_FRAC,
    GROUPS_ALL_WRONG_FRAC,
    GROUPS_MIXED_FRAC,
    GEN_ROUNDS,
    GROUPS_DROPPED,
    ENTROPY,
    CLIP_FRAC_LOW,
    CLIP_FRAC_HIGH,
    CLIP_FRAC,
    CLIP_FRAC_TOKENS,
    CLIP_FRAC_SEQS,
    KL,
    LOSS,
    GRAD_NORM,
    LR,
    ADV_MEAN,
    ADV_ABS_MEAN,
    ADV_ZERO_FRAC,
    ADV_SIGN_FLIP_FRAC,
    GENERATE_S,
    DECODE_STEP_S,
    UPDATE_S,
    STEP_S,
    TOKENS_PER_S,
)

# Every fixed name above (the training loop logs each of them; a few only in some runs).
ALL = frozenset(v for k, v in dict(globals()).items() if k.isupper() and isinstance(v, str))


def is_known(name: str) -> bool:
    """A metric some run may log: a fixed name above, eval/<benchmark>/<what> or task/<what>."""
    parts = name.split("/")
    return (
        name in ALL
        or (parts[0] == "eval" and len(parts) == 3 and all(parts))
        or (parts[0] == "task" and len(parts) == 2 and bool(parts[1]))
    )
