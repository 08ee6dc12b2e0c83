"""Settings of the rollout stage and the training loop (the objective has its own, in objective/)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

STRICT = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False, use_attribute_docstrings=True)
"""Every settings model's config: unknown keys, a bool or float given for an int, and inf/nan are errors
(an infinite learning rate would otherwise fail mid-run with an unrelated index error)."""
MAX_STEPS = 1_000_000
"""The most steps a loop may be asked for (RL steps, the toy's SFT steps): far past any published GRPO-family run
(tens of thousands of steps at most), so the bound refuses only typos, such as 10^12 steps, which would otherwise
run until killed."""
MAX_EPOCHS = 1000
"""The most passes over one rollout batch (PPO-style recipes use 1 to a few dozen)."""
MAX_RESPONSES = 1 << 20
"""The most responses one step may sample (prompts_per_step × group_size), and the most prompts, samples per prompt,
mini-batches, length buckets or generation rounds asked for: published recipes sample thousands a step (DAPO: 512
prompts × 16), so the bound refuses only typos, which would otherwise fail inside a job, out of memory."""
MAX_NEW_TOKENS = 1 << 20
"""The largest generation budget: a million tokens, past any model's context."""
Seed = Annotated[int, Field(ge=0, lt=2**63)]
"""A seed: torch and numpy take it as a signed 64-bit integer."""
Device = Literal["auto", "cpu", "cuda"]
"""Where a model lives: auto = cuda when available, else cpu."""
Dtype = Literal["auto", "float32", "bfloat16", "float16"]
"""A model's weights' dtype: auto = bfloat16 on a CUDA device with bf16, else float32."""
Template = Literal["r1", "qwen_math", "none"]
"""A prompt template of trainer/data/templates.py (the Dr. GRPO template study)."""
HintName = Literal["scaf_grpo", "hinted_group"]
"""A hint scheme of trainer/hints.py (`HINT_SCHEMES`), for groups whose every response is wrong."""


class RolloutConfig(BaseModel):
    """How responses are sampled."""

    model_config = STRICT

    backend: Literal["transformers", "vllm"] = "transformers"
    """Generation backend: transformers (in-process, CPU or GPU) or vllm (a colocated vLLM engine on a CUDA
    host, the `vllm` extra; weights synced after every update)."""
    vllm_gpu_memory_utilization: float = Field(0.3, gt=0, lt=1)
    """vLLM only: the share of GPU memory its engine may take (the trainer needs the rest)."""
    capture: bool = True
    """transformers backend only, on a CUDA device: decode Llama- and Qwen2-architecture models with a fixed-shape
    step over a preallocated KV cache, captured as CUDA graphs (the uncaptured decode is bound by kernel launches on a
    GPU); false (or off) = never capture. Nothing is captured on CPU. The captured step sums the attention in another
    order, so its samples follow the same distribution but are not bitwise those of an uncaptured run: like
    `train.threads`, it is not part of a job's identity. Awaits a GPU run (docs/rollout.md)."""
    prompts_per_step: int = Field(16, ge=1, le=MAX_RESPONSES)
    """Groups (prompts) in each optimisation batch; with dynamic sampling, the number that must survive
    the filter."""
    group_size: int = Field(8, ge=1, le=MAX_RESPONSES)
    """G: responses sampled per prompt. prompts_per_step × group_size, the responses a step samples, is at most
    2^20 (1,048,576), as is each count of this section and of `train`: only a typo asks for more. 1 (one response
    per prompt: ReMax's, REINFORCE++'s setting) needs an advantage whose baseline is not the group's own rewards."""
    max_new_tokens: int = Field(128, ge=1, le=MAX_NEW_TOKENS)
    """Generation budget L_max; also the objective's max_len unless that is set."""
    temperature: float = Field(1.0, gt=0)
    """Sampling temperature; the trainer divides logits by it too, so π_old is the sampling policy."""
    top_p: float = Field(1.0, gt=0, le=1)
    """Nucleus sampling mass (1 = off). Below 1 the sampler's distribution differs from π_θ."""
    prompt_pool: int | None = Field(None, ge=1, le=MAX_RESPONSES)
    """A fixed pool of this many problems, drawn once from the task before training (with a stream of its own, from the
    seed) and deduplicated by problem id; every step then draws its prompts from the pool (`prompt_sampling`), without
    replacement while the pool holds enough. What a persistent per-prompt tracker needs to see a prompt again (SPO,
    arXiv 2509.13232, samples a finite training set) when the task's problem space is effectively infinite (the toy's).
    A pool entry keeps the group_size prompts it was drawn with (the toy's hidden digits). null (the default) = each
    step draws fresh problems from the task."""
    prompt_sampling: Literal["uniform", "value_priority"] = "uniform"
    """How a step draws from the pool: uniform, or value_priority (SPO's prioritized sampling: weight ∝
    √(v̂(1 − v̂)) + prompt_priority_eps, v̂ the prompt's tracked success rate; needs prompt_pool and an advantage with
    a per-prompt tracker, spo)."""
    prompt_priority_eps: float = Field(0.05, ge=0, allow_inf_nan=False)
    """ε of value_priority's weights, so that a solved or hopeless prompt is still drawn now and then (the authors'
    0.05). Only with value_priority."""
    hint: HintName | None = None
    """Hints for a group whose every response is wrong (a "learning cliff": zero advantage, no gradient), sampled by
    the policy from the task's hinted prompts and swapped into the group before its advantages (trainer/hints.py):
    scaf_grpo (Scaf-GRPO, arXiv 2510.19807: one response at each level of one failed sample's hint ladder, the first
    correct one replacing that sample) or hinted_group (HiLL's reasoner update, arXiv 2604.00698, with a fixed hint:
    the whole group drawn again under the hint, kept when its responses are mixed). A hinted response is trained
    on-policy under its hinted prompt; the judged metrics (train/accuracy, task/*) stay those of the responses drawn
    without hints, and hint/* logs the hints'. Needs a task that gives hints: the toy's hidden digits (shown where
    the `?` stood; task.toy_addition.hide_prob > 0). null (the default) = no hints."""
    hint_after_steps: int = Field(0, ge=0, le=MAX_STEPS)
    """Scaf-GRPO's guidance exemption period: no hint in the first N RL steps, hints from step N + 1 ("the initial 15%
    of training steps" in the paper; 50 in the authors' script). Less than train.steps; only with `hint`."""

    @model_validator(mode="after")
    def _pool(self) -> RolloutConfig:
        if self.prompt_sampling != "uniform" and self.prompt_pool is None:
            raise ValueError(
                f"rollout.prompt_sampling: {self.prompt_sampling} draws from a fixed pool of prompts: set "
                "rollout.prompt_pool"
            )
        if self.prompt_priority_eps != 0.05 and self.prompt_sampling != "value_priority":
            raise ValueError(
                f"rollout.prompt_priority_eps: {self.prompt_priority_eps:g} weighs value_priority's draws "
                f"(rollout.prompt_sampling: {self.prompt_sampling})"
            )
        return self

    @model_validator(mode="after")
    def _exemption_has_hints(self) -> RolloutConfig:
        if self.hint_after_steps and self.hint is None:
            raise ValueError(
                f"rollout.hint_after_steps: {self.hint_after_steps} delays hints, but rollout.hint is null (no hints)"
            )
        return self

    @model_validator(mode="after")
    def _responses(self) -> RolloutConfig:
        if self.prompts_per_step * self.group_size > MAX_RESPONSES:
            raise ValueError(
                f"prompts_per_step × group_size = {self.prompts_per_step * self.group_size} responses a step, over "
                f"the limit of {MAX_RESPONSES}"
            )
        return self


class TrainConfig(BaseModel):
    """The optimisation loop."""

    model_config = STRICT

    engine: Literal["harness", "trl"] = "harness"
    """Which trainer runs the job: harness's own loop (trainer.loop), or TRL's GRPOTrainer (the `trl` extra) with
    every switch mapped to its GRPOConfig (docs/trl.md; a switch TRL cannot express is an error)."""
    steps: int = Field(200, ge=0, le=MAX_STEPS)
    """RL steps (one rollout batch each), at most `MAX_STEPS`; 0 = an evaluation-only run (needs eval.every >= 1)."""
    lr: float = Field(5e-4, gt=0)
    """AdamW learning rate (the toy default; papers use ~1e-6 for 1.5B models)."""
    warmup_steps: int = Field(0, ge=0)
    """Linear warm-up of the learning rate over this many optimiser steps, then constant."""
    weight_decay: float = Field(0.0, ge=0)
    """AdamW decoupled weight decay."""
    betas: tuple[Annotated[float, Field(ge=0, lt=1)], Annotated[float, Field(ge=0, lt=1)]] = Field(
        (0.9, 0.999), strict=False
    )
    """AdamW betas, each in [0, 1) (a YAML list is read as the pair)."""
    max_grad_norm: float | None = Field(1.0, gt=0)
    """Clip the global gradient norm to this (null = no clipping; the norm is logged either way)."""
    mini_batches: int = Field(1, ge=1, le=MAX_RESPONSES)
    """Optimiser steps per pass over a rollout batch. 1 with epochs 1 is the on-policy default; clipping
    (clip-higher, GSPO) only acts when mini_batches × epochs > 1."""
    epochs: int = Field(1, ge=1, le=MAX_EPOCHS)
    """Passes over each rollout batch (at most `MAX_EPOCHS`)."""
    micro_batch_size: int | None = Field(None, ge=1, le=MAX_RESPONSES)
    """Responses per forward/backward (gradient accumulation); null = a whole mini-batch at once. The
    loss and gradient do not depend on it. On a CUDA out-of-memory error it is halved (and kept) and the
    mini-batch redone, down to 1 (policy/micro_batch_size logs the size in use)."""
    length_buckets: int = Field(4, ge=1, le=MAX_RESPONSES)
    """Forward/backward batches per mini-batch, of responses sorted by length, each padded only to its own
    longest response: less padding to compute through. The loss and gradient do not depend on it (only the order
    of float sums does), so, like `threads`, it is not part of a job's identity."""
    logits_chunk_mb: float | None = Field(64.0, gt=0)
    """The most memory, in MiB, that one chunk of the update's logits may take (float32, or the model's dtype when
    wider): log-probabilities and entropies come from the decoder's last hidden states a chunk of positions at a time,
    in the forward and again in the backward, never from the whole [responses, tokens, vocabulary] logits (at Qwen's
    151,936 tokens, 64 MiB is 110 positions). A forward/backward batch whose logits fit in one chunk, or a model whose
    logits are not its output layer on those hidden states (a soft cap, a scale), is computed whole; null = always
    whole. The loss and gradient do not depend on it (only the order of float sums does), so it is not part of a job's
    identity. On a large GPU, a few hundred MiB make fewer, more efficient matrix products."""
    max_gen_rounds: int = Field(8, ge=1, le=MAX_RESPONSES)
    """Dynamic sampling: generation rounds allowed per step to fill the batch before the run fails."""
    reference_kl: bool = True
    """Track KL to the initial policy (policy/kl) every step; always on when the objective reads the reference
    (kl_coef or kl_reward_coef > 0). Otherwise it costs a forward of the initial policy per step and changes no
    gradient: off is the same job (the same id). Under `reference_sync_steps`, the KL to the refreshed reference."""
    reference_sync_steps: int | None = Field(None, ge=1, le=MAX_STEPS)
    """Refresh the reference policy from the policy every N RL steps, after the step's update: π_ref ← α·π_θ +
    (1 − α)·π_ref parameter by parameter, α = `reference_mixup_alpha` (TR-DPO, Gorbatovski et al. 2024, arXiv
    2404.09656; TRL's `sync_ref_model` with `ref_model_sync_steps`, which counts optimiser steps: N × mini_batches ×
    epochs of them). α = 1 copies the policy: RPG's iterative reference update (arXiv 2505.17508). The KL in the loss
    and in the reward, and `policy/kl`, then measure against the refreshed reference. Needs a reference (a KL term, or
    `reference_kl`); set together with `reference_mixup_alpha`. null = off (the default): the reference stays the
    initial policy. See trainer/reference.py."""
    reference_mixup_alpha: float | None = Field(None, gt=0, le=1)
    """α of the refresh, in (0, 1]: the policy's weight in the new reference (TR-DPO's soft update; TRL's
    `ref_model_mixup_alpha`, default 0.6 there); 1 = the hard update. Set exactly when `reference_sync_steps` is."""
    log_text: bool = True
    """Store each response's text in the rollout table (for the dashboard's rollout viewer)."""
    device: Device = "auto"
    """Where the policy lives: auto = cuda when available, else cpu."""
    threads: int | None = Field(None, ge=1)
    """torch CPU threads (null = torch's default)."""

    @model_validator(mode="after")
    def _check(self) -> TrainConfig:
        if self.warmup_steps > self.steps * self.mini_batches * self.epochs:
            raise ValueError("warmup_steps exceeds the number of optimiser steps")
        if (self.reference_sync_steps is None) != (self.reference_mixup_alpha is None):
            raise ValueError("reference_sync_steps and reference_mixup_alpha are set together or not at all")
        return self

    def refresh_problem(self, objective_reads_reference: bool) -> str | None:
        """Why `reference_sync_steps` cannot be set here: a run whose objective reads no reference (no KL term) and
        that does not track `policy/kl` holds no reference to refresh. None when it can, or when it is off."""
        if self.reference_sync_steps is None or objective_reads_reference or self.reference_kl:
            return None
        return (
            f"train.reference_sync_steps: {self.reference_sync_steps} refreshes the reference policy, but this run "
            "has none (objective.kl_coef and objective.kl_reward_coef are 0 and train.reference_kl is false)"
        )
