"""`HarnessCallback`: harness's metrics, MLflow layout and rollout table from any TRL `GRPOTrainer` run.

    from harness.integrations.trl import HarnessCallback

    trainer = GRPOTrainer(model=model, reward_funcs=[accuracy, fmt], args=GRPOConfig(..., logging_steps=1),
                          train_dataset=data)
    trainer.add_callback(HarnessCallback(trainer, correct_reward="accuracy", experiment="my-trl", sweep="loss_types"))
    trainer.train()

It changes nothing that TRL trains: it reads the rewards TRL computed and the token ids TRL sampled (it wraps
`GRPOTrainer._calculate_rewards` and returns its result untouched) and TRL's own logs (entropy, clip fractions,
KL, loss, gradient norm, learning rate). Every rollout step (one generation batch) becomes one MLflow step with
harness's metric names (trainer/metric_names.py), so `harness dashboard` and `harness report` read the run like
their own: the run's settings are logged as harness's keys (`harness.config.trl_args.settings_of`), the seed, arm
and machine (CPU, torch, threads, the base model's sha256) as tags, and a per-rollout table (`rollouts.parquet`) at
the end.

A response is correct when the reward function `correct_reward` (default: the first) gave it more than
`correct_above`. Its logged reward is TRL's weighted sum of the reward functions, or with `logged_reward` the plain sum
of those named (harness's engine: the task's reward and the overlong punishment, whatever GDPO's weights). Its length
is its token count (EOS included) and it is truncated when it ends without EOS, both as TRL counts them. Policy
metrics need TRL to log every step (`logging_steps=1`); otherwise they are logged at TRL's logging steps only.
"""

from __future__ import annotations

import contextlib
import json
import math
import time
from collections.abc import Callable
from typing import Any

import torch
from transformers import TrainerCallback

from harness.config.run_config import digest
from harness.config.trl_args import TRL_REQUIREMENT, settings_of, trl_install_problem
from harness.runs.layout import (
    ARM_LABEL_TAG,
    ARM_TAG,
    CONFIG_HASH_TAG,
    JOB_ID_TAG,
    NAME_TAG,
    PRESET_TAG,
    SEED_TAG,
    SWEEP_ID_TAG,
    default_tracking_uri,
    machine_tags,
)
from harness.runs.writer import RunTracker, prepare_store
from trainer import metric_names as M
from trainer.loop import outcome_metrics
from trainer.models.fingerprint import Machine, gpu_name, weights_sha256
from trainer.objective.advantages import advantage_metrics
from trainer.objective.sampling import group_outcome_metrics, sign_flip_metrics

TRL_LOGS = {
    "entropy": M.ENTROPY,
    "clip_ratio/low_mean": M.CLIP_FRAC_LOW,
    "clip_ratio/high_mean": M.CLIP_FRAC_HIGH,
    "clip_ratio/region_mean": M.CLIP_FRAC,
    "kl": M.KL,
    "loss": M.LOSS,
    "grad_norm": M.GRAD_NORM,
    "learning_rate": M.LR,
}
"""TRL's logged names → harness's (TRL's clip fractions count the same tokens as harness's: r beyond the clip range
on the side where the advantage's sign makes it bind)."""

TRL_LOGS_BY_LEVEL = {
    "token": {"clip_ratio/region_mean": M.CLIP_FRAC_TOKENS},
    "sequence": {"clip_ratio/region_mean": M.CLIP_FRAC_SEQS},
}
"""TRL's names → more of harness's, by `importance_sampling_level`. TRL's `clip_ratio/*`, like harness's low, high and
`policy/clip_frac`, count in the ratio's own unit: loss tokens at level token, so region_mean is also
`policy/clip_frac_tokens`; responses at level sequence, so it is also `policy/clip_frac_seqs` (TRL divides by every
response, one masked whole by `mask_truncated_completions` included; harness by those with a loss token). TRL logs no
share of tokens at level sequence nor of responses at level token: its runs have no `policy/clip_frac_tokens` at
level sequence and no `policy/clip_frac_seqs` at level token. TRL averages its micro-batches' shares, where harness
pools an optimiser step's micro-batches."""


def trl_logs(level: str) -> list[tuple[str, str]]:
    """(TRL's logged name, harness's) pairs of a run at `importance_sampling_level` `level`; a TRL name may feed two."""
    return [*TRL_LOGS.items(), *TRL_LOGS_BY_LEVEL.get(level, {}).items()]


def check_trl() -> None:
    """A one-line ImportError naming the extra when TRL is missing or outside `TRL_REQUIREMENT`."""
    problem = trl_install_problem()
    if problem:
        raise ImportError(f"train.engine trl and HarnessCallback {problem}")


def ended_without_eos(trainer: Any, ids: list[int]) -> bool:
    """Whether a completion (its token ids) ended without EOS, as TRL counts it: its last token is neither an EOS
    of the trainer nor the pad token."""
    return not ids or ids[-1] not in {*trainer.eos_token_ids, trainer._tokenizer.pad_token_id}


class HarnessCallback(TrainerCallback):
    """Logs a `GRPOTrainer`'s run to MLflow as harness logs its own (see the module's docstring).

    `experiment`, `sweep` (runs sharing it form one sweep for the dashboard and `harness report SWEEP`), `arm_label`
    (the arm's name on the pages; default: its differing settings), `run_name` and `tracking_uri` (default:
    $MLFLOW_TRACKING_URI, else results/mlflow.db) place a run of one's own script. harness's TRL engine passes
    `tracker` (an open run, which it ends) and `on_step(step, metrics)`, called once each rollout step is logged."""

    def __init__(
        self,
        trainer: Any,
        *,
        correct_reward: str | None = None,
        correct_above: float = 0.0,
        logged_reward: tuple[str, ...] | None = None,
        experiment: str = "trl",
        sweep: str = "",
        arm_label: str = "",
        run_name: str | None = None,
        tracking_uri: str | None = None,
        log_text: bool = True,
        tracker: RunTracker | None = None,
        on_step: Callable[[int, dict[str, float]], None] | None = None,
    ):
        check_trl()
        for member in ("_calculate_rewards", "_logs", "reward_func_names", "num_generations", "eos_token_ids"):
            if not hasattr(trainer, member):
                raise TypeError(f"HarnessCallback needs a trl GRPOTrainer ({TRL_REQUIREMENT}); {member} is missing")
        names = list(trainer.reward_func_names)
        if correct_reward is not None and correct_reward not in names:
            raise ValueError(f"correct_reward: no reward function {correct_reward!r}; the trainer has {names}")
        self.correct_index = names.index(correct_reward) if correct_reward is not None else 0
        unknown = [n for n in logged_reward or () if n not in names]
        if unknown:
            raise ValueError(f"logged_reward: no reward function {unknown[0]!r}; the trainer has {names}")
        self.logged = None if logged_reward is None else [names.index(n) for n in logged_reward]
        self.trainer, self.correct_above, self.log_text = trainer, correct_above, log_text
        self.place = {"experiment": experiment, "sweep": sweep, "arm_label": arm_label, "run_name": run_name}
        self.tracking_uri = tracking_uri
        self.tracker, self.owns_tracker, self.on_step = tracker, tracker is None, on_step
        self.step, self.tokens_generated, self.step_tokens = 0, 0, 0
        self.metrics: dict[str, float] = {}
        self.policy: dict[str, list[float]] = {}
        self.logs = trl_logs("token")
        self.rows: list[dict[str, Any]] = []
        self.started = self.generated = 0.0
        self.open_step = False
        self.refreshed_at = 0  # the rollout step of TRL's last reference refresh (`sync_ref_model`), as harness's
        self.refresh_move: float | None = None  # that refresh's ‖Δθ_ref‖, until its rollout step is logged
        calculate = trainer._calculate_rewards

        def calculate_rewards(inputs, prompts, completions, completion_ids_list):
            rewards = calculate(inputs, prompts, completions, completion_ids_list)
            if trainer.model.training:  # TRL's own evaluation generates too
                self._record(inputs, prompts, completions, completion_ids_list, rewards)
            return rewards

        trainer._calculate_rewards = calculate_rewards
        if self.owns_tracker:
            train = trainer.train

            def guarded_train(*args, **kwargs):
                try:
                    return train(*args, **kwargs)
                except BaseException as exc:
                    if self.tracker is not None:
                        with contextlib.suppress(Exception):  # the table is kept where it can be, as harness keeps it
                            self.tracker.log_table("rollouts", self.rollout_table())
                        self.tracker.__exit__(type(exc), exc, exc.__traceback__)  # FAILED, with the reason
                    raise

            trainer.train = guarded_train

    # ---- the run --------------------------------------------------------------------------
    def on_train_begin(self, args, state, control, **kwargs):
        if self.owns_tracker and self._main:
            self.tracker = self._open_run(args, state.max_steps)
        self.logs = trl_logs(args.importance_sampling_level)
        self.per_generation = max(
            1, args.steps_per_generation * args.num_iterations // args.gradient_accumulation_steps
        )

    def on_step_begin(self, args, state, control, **kwargs):
        if state.global_step % self.per_generation == 0:
            self.started = time.perf_counter()

    def on_optimizer_step(self, args, state, control, **kwargs):
        """When TRL's reference refresh is due at this optimiser step, measure its move now: `SyncRefModelCallback`
        (added by the trainer, before this callback) mixes the reference at the step's end, after this."""
        if _refreshes(self.trainer, args) and (state.global_step + 1) % args.ref_model_sync_steps == 0:
            self.refresh_move = reference_move(
                self.trainer.accelerator.unwrap_model(self.trainer.model),
                self.trainer.ref_model,
                args.ref_model_mixup_alpha,
            )
            self.refreshed_at = self.step

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step % self.per_generation == 0 and not control.should_log:
            self._finish_step()

    def on_log(self, args, state, control, logs=None, **kwargs):
        for key, name in self.logs:
            if logs and isinstance(logs.get(key), (int, float)):
                self.policy.setdefault(name, []).append(float(logs[key]))
        if self.open_step and state.global_step % self.per_generation == 0:
            self._finish_step()

    def on_train_end(self, args, state, control, **kwargs):
        if self.open_step:
            self._finish_step()
        if self.owns_tracker and self.tracker is not None and self._main:
            self.tracker.log_table("rollouts", self.rollout_table())
            self.tracker.__exit__(None, None, None)

    # ---- one rollout step ---------------------------------------------------------------------
    @property
    def _main(self) -> bool:
        return bool(self.trainer.accelerator.is_main_process)

    def _record(self, inputs, prompts, completions, completion_ids, rewards: torch.Tensor) -> None:
        """One generation batch: its outcome metrics now, its policy metrics when TRL logs them."""
        t = self.trainer
        local = [
            (len(ids), ended_without_eos(t, ids), str(row.get("problem_id", "")), p, c)
            for ids, row, p, c in zip(completion_ids, inputs, prompts, completions)
        ]
        if t.accelerator.num_processes > 1:  # TRL's rewards are gathered across processes: so are these
            from accelerate.utils import gather_object

            local = gather_object(local)
        rewards = rewards.detach().cpu().double()
        weights = t.reward_weights.detach().cpu().double()
        total = (rewards * weights).nansum(dim=1) if self.logged is None else rewards[:, self.logged].nansum(dim=1)
        correct = torch.nan_to_num(rewards[:, self.correct_index], nan=-math.inf) > self.correct_above
        lengths = torch.tensor([n for n, *_ in local])
        truncated = torch.tensor([cut for _, cut, *_ in local])
        G = t.num_generations
        self.step += 1
        self.open_step = True
        self.generated = time.perf_counter()
        self.step_tokens = int(lengths.sum())
        self.tokens_generated += self.step_tokens
        self.metrics.update(
            {
                **outcome_metrics(lengths, correct, truncated, total),
                **group_outcome_metrics(correct.view(-1, G)),
                M.TOKENS_GENERATED: float(self.tokens_generated),
                M.GEN_ROUNDS: 1.0,  # TRL has no dynamic sampling: one generation per step, no group dropped
                M.GROUPS_DROPPED: 0.0,
                M.MICRO_BATCH: float(t.args.per_device_train_batch_size),
                M.GENERATE_S: self.generated - self.started,
            }
        )
        names = list(t.reward_func_names)
        for k, (n, cut, problem, prompt, completion) in enumerate(local):
            row = {
                "step": self.step,
                "prompt_id": problem or digest(_text(prompt)),  # the same problem, the same id, every step
                "sample_index": k % G,
                "round": 1,
                "reward": total[k].item(),
                "shaped_reward": total[k].item(),
                "correct": bool(correct[k]),
                "length": n,
                "truncated": bool(cut),
                "advantage": math.nan,
                "kept": True,
                **{f"reward_{name}": rewards[k, i].item() for i, name in enumerate(names)},
            }
            if self.log_text:
                row["prompt"], row["response"] = _text(prompt), _text(completion)
            self.rows.append(row)

    def add_metrics(self, metrics: dict[str, float]) -> None:
        """Metrics of the rollout step being generated from elsewhere (harness's engine: the task's own, from its reward
        function), logged with it."""
        self.metrics.update(metrics)

    def _finish_step(self) -> None:
        """Log the rollout step: its outcome, TRL's policy metrics (averaged over its optimiser steps) and its time."""
        self.open_step = False
        advantages = list(self.trainer._logs["advantages"])
        mine = [r for r in self.rows[-len(advantages) :] if r["step"] == self.step] if advantages else []
        if len(mine) == len(advantages):
            for row, a in zip(mine, advantages):
                row["advantage"] = float(a)
            self.metrics.update(advantage_metrics(torch.tensor(advantages)))
            G = self.trainer.num_generations
            if len(advantages) % G == 0:  # TRL's baselines are group means: no response is reversed (0), as harness's
                rewards = torch.tensor([row["shaped_reward"] for row in mine], dtype=torch.float64)
                self.metrics.update(sign_flip_metrics(rewards.view(-1, G), torch.tensor(advantages).view(-1, G)))
        done = time.perf_counter()
        metrics = {
            **self.metrics,
            **{name: sum(v) / len(v) for name, v in self.policy.items()},
            M.UPDATE_S: done - self.generated,
            M.STEP_S: done - self.started,
            M.TOKENS_PER_S: self.step_tokens / max(done - self.started, 1e-9),
        }
        if _refreshes(self.trainer, getattr(self.trainer, "args", None)):  # as harness's ReferenceRefresh logs them
            metrics[M.REF_REFRESH_STEP] = float(self.refreshed_at)
            if self.refresh_move is not None:
                metrics[M.REF_REFRESH_DISTANCE], self.refresh_move = self.refresh_move, None
        self.metrics, self.policy = {}, {}
        if self.tracker is not None and self._main:
            self.tracker.log_metrics(self.step, metrics)
        if self.on_step is not None:
            self.on_step(self.step, metrics)

    def rollout_table(self):
        import pandas as pd

        return pd.DataFrame(self.rows)

    # ---- a plain TRL script's run ----------------------------------------------------------
    def _open_run(self, args: Any, max_steps: int) -> RunTracker:
        """The MLflow run of a script that is not harness's: its settings as harness's keys, its tags as harness's."""
        import trl

        settings = settings_of(args, max_steps, list(self.trainer.reward_funcs))
        model = getattr(self.trainer.model, "name_or_path", "") or getattr(
            self.trainer.model.config, "_name_or_path", ""
        )
        name = self.place["run_name"] or args.run_name or "trl"
        config = {"name": "trl", "seed": args.seed, "model": {"name_or_path": str(model)}, **settings}
        job = digest(json.dumps(config, sort_keys=True, default=str))
        arm = digest(json.dumps({k: v for k, v in config.items() if k != "seed"}, sort_keys=True, default=str))
        uri = default_tracking_uri("results", self.tracking_uri)
        experiment_id = prepare_store(uri, self.place["experiment"])
        tags = {
            SWEEP_ID_TAG: self.place["sweep"],
            ARM_TAG: arm,
            CONFIG_HASH_TAG: job,
            JOB_ID_TAG: job,
            SEED_TAG: str(args.seed),
            NAME_TAG: name,
            PRESET_TAG: "",
            ARM_LABEL_TAG: self.place["arm_label"],
            "trl_version": trl.__version__,
            **machine_tags(
                Machine.here(), weights_sha256(model) if model else "", gpu_name(self.trainer.accelerator.device)
            ),
        }
        tracker = RunTracker(uri, experiment_id, run_name=f"{name}-s{args.seed}", tags=tags, config=config).__enter__()
        tracker.client.log_dict(tracker.run_id, json.loads(args.to_json_string()), "trl_args.json")
        return tracker


def _refreshes(trainer: Any, args: Any) -> bool:
    """Whether TRL refreshes the trainer's reference (`sync_ref_model`: a reference model, which needs beta > 0)."""
    return bool(getattr(args, "sync_ref_model", False)) and getattr(trainer, "ref_model", None) is not None


def reference_move(policy: torch.nn.Module, reference: torch.nn.Module, alpha: float) -> float:
    """‖α·(θ − θ_ref)‖ over every parameter, in float64: how far TR-DPO's mix θ_ref ← α·θ + (1 − α)·θ_ref moves the
    reference (`trainer.reference.ReferenceRefresh` measures the same move after it; this measures it before, for a
    refresh someone else does). Parameters are paired in order, as TRL's `SyncRefModelCallback` zips them."""
    with torch.no_grad():
        pairs = zip(policy.parameters(), reference.parameters(), strict=True)
        total = sum(float((p.double() - ref.double()).square().sum()) for p, ref in pairs)
    return alpha * math.sqrt(total)


def _text(value: Any) -> str:
    """A prompt or completion as text: a conversation's messages joined."""
    if isinstance(value, list):
        return "\n".join(str(m.get("content", m)) if isinstance(m, dict) else str(m) for m in value)
    return str(value)
