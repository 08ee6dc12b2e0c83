"""The run config: one typed, validated object per training run (YAML + `--set` overrides).

The objective section names a preset and overrides fields on top of it; what a run
logs is the fully resolved object, every field spelled out.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, Tag, field_validator, model_validator

from harness.config.errors import ConfigError
from harness.config.evaluation import EvalConfig
from harness.config.trl_args import trl_problems
from harness.config.yaml_io import Name, apply_overrides, load_yaml, tagged, validate
from trainer.config import STRICT as _STRICT
from trainer.config import Dtype, RolloutConfig, Seed, Template, TrainConfig
from trainer.data.settings import FieldsConfig
from trainer.models.toy_config import ToyModelConfig
from trainer.objective.registry import ONE_RESPONSE_ADVANTAGES
from trainer.objective.settings import PRESETS, ObjectiveSettings, preset_fields
from trainer.tasks.custom_config import CustomTaskConfig
from trainer.tasks.reasoning_gym_config import ReasoningGymConfig
from trainer.tasks.toy_addition_config import ToyAdditionConfig


class _PolicyConfig(BaseModel):
    """What every kind of policy takes."""

    model_config = _STRICT

    dtype: Dtype = "auto"
    """Weights' dtype: auto = bfloat16 on a CUDA device with bf16, else float32."""
    gradient_checkpointing: bool = False
    """Recompute activations in the backward pass (less memory, ~30% more compute) — for large models."""


CACHE_ENV = "HARNESS_CACHE_DIR"


def default_cache_dir() -> str:
    """$HARNESS_CACHE_DIR, else $XDG_CACHE_HOME/harness, else ~/.cache/harness: one toy build per user and config,
    whichever checkout asks (builds are keyed by a hash of their settings, and concurrent builders wait on a lock)."""
    if os.environ.get(CACHE_ENV):
        return str(Path(os.environ[CACHE_ENV]).expanduser())
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return str(Path(base).expanduser() / "harness")


class ToyModel(_PolicyConfig):
    """The tiny model harness builds itself (SFT on the toy task, cached)."""

    source: Literal["toy"] = "toy"
    """toy: the tiny model harness builds; hf: a transformers model by hub id or local path."""
    toy: ToyModelConfig = ToyModelConfig()
    """Build settings of the toy model; their hash names the cached build."""
    cache_dir: str = Field(default_factory=default_cache_dir)
    """Where built toy models are cached: by default the user's cache, shared by every checkout
    (`default_cache_dir`); a relative path is taken from the working directory."""


class HFModel(_PolicyConfig):
    """A transformers causal LM by hub id or local directory."""

    source: Literal["hf"]
    """hf: a transformers model by hub id or local path."""
    name_or_path: str
    """Hub id or local directory of the model."""

    @field_validator("name_or_path")
    @classmethod
    def _local_dir_exists(cls, value: str) -> str:
        local = value.startswith((".", "/", "~")) or Path(value).exists()
        if local and not Path(value).expanduser().is_dir():
            raise ValueError(f"no model directory at {value}")
        return value


ModelConfig = Annotated[Annotated[ToyModel, Tag("toy")] | Annotated[HFModel, Tag("hf")], tagged("source", "toy")]
"""Which policy to train: `source` picks the kind, and only that kind's fields exist."""


class MathTaskConfig(BaseModel):
    """Math problems graded with math-verify."""

    model_config = _STRICT

    train: str = "math_train"
    """Training pool: a benchmark name of trainer.data.benchmarks (math_train, gsm8k_train, ...), a .jsonl /
    .json / .parquet file, a local HF dataset directory, or an HF dataset id."""
    split: str | None = None
    """Split of an HF dataset (null = the dataset's default / train)."""
    fields: FieldsConfig = FieldsConfig()
    """Field mapping of a file or HF dataset (ignored for a registered benchmark name)."""
    answer_format: Literal["plain", "gsm8k"] = "plain"
    """plain: the answer field is the answer; gsm8k: the answer follows '#### ' in it."""
    template: Template = "qwen_math"
    """Prompt template (the Dr. GRPO template study compares them)."""
    dedupe_against: list[str] = ["math500", "aime24", "amc23", "minerva", "olympiad_bench"]
    """Evaluation benchmarks whose problems are removed from the training pool."""
    limit: int | None = Field(None, ge=1)
    """Use only the first N problems of the pool (after de-duplication)."""


class ToyTask(BaseModel):
    """The CPU toy: addition problems the toy model half-knows."""

    model_config = _STRICT

    name: Literal["toy_addition"] = "toy_addition"
    """toy_addition: the CPU toy; math: a math dataset graded with math-verify; custom: the user's own;
    reasoning_gym: one of reasoning-gym's generators."""
    toy_addition: ToyAdditionConfig = ToyAdditionConfig()
    """Settings of the toy addition task."""


class MathTask(BaseModel):
    """Math problems graded with math-verify."""

    model_config = _STRICT

    name: Literal["math"]
    """toy_addition: the CPU toy; math: a math dataset graded with math-verify; custom: the user's own;
    reasoning_gym: one of reasoning-gym's generators."""
    math: MathTaskConfig = MathTaskConfig()
    """Settings of the math task."""


class CustomTask(BaseModel):
    """A task of the user's: a dataset and reward functions, or a task class (docs/tasks.md)."""

    model_config = _STRICT

    name: Literal["custom"]
    """toy_addition: the CPU toy; math: a math dataset graded with math-verify; custom: the user's own;
    reasoning_gym: one of reasoning-gym's generators."""
    custom: CustomTaskConfig
    """Settings of the custom task."""


class ReasoningGymTask(BaseModel):
    """One of reasoning-gym's seeded generators, scored by its own `score_answer` (the `reasoning-gym` extra)."""

    model_config = _STRICT

    name: Literal["reasoning_gym"]
    """toy_addition: the CPU toy; math: a math dataset graded with math-verify; custom: the user's own;
    reasoning_gym: one of reasoning-gym's generators."""
    reasoning_gym: ReasoningGymConfig
    """Settings of the reasoning-gym task."""


TaskConfig = Annotated[
    Annotated[ToyTask, Tag("toy_addition")]
    | Annotated[MathTask, Tag("math")]
    | Annotated[CustomTask, Tag("custom")]
    | Annotated[ReasoningGymTask, Tag("reasoning_gym")],
    tagged("name", "toy_addition"),
]
"""Where prompts and rewards come from: `name` picks the task, and only that task's settings exist."""


class TrackingConfig(BaseModel):
    """Where the run is logged."""

    model_config = _STRICT

    experiment: Name = "harness"
    """MLflow experiment name."""
    uri: str | None = None
    """Tracking URI; null = $MLFLOW_TRACKING_URI, else sqlite:///<results_dir>/mlflow.db."""
    results_dir: str = "results"
    """Folder for the default SQLite store and other outputs."""
    run_name: Name | None = None
    """MLflow run name (null = the config's name and seed)."""


class RunConfig(BaseModel):
    """Everything one training run needs."""

    model_config = _STRICT

    name: Name = "run"
    """Human-readable name (used in the run name)."""
    seed: Seed = 0
    """Seeds prompts, sampling and shuffling: the same config and seed give identical metrics on CPU."""
    objective_preset: str | None = None
    """The preset the objective section started from (a label only: the resolved fields define the run)."""
    objective: ObjectiveSettings
    """The GRPO-family switches. Write `preset: grpo|dr_grpo|dapo|gspo` plus any field to override;
    max_len defaults to rollout.max_new_tokens (and then dapo's overlong_cache_len to max_len // 5)."""
    task: TaskConfig = ToyTask()
    """Where prompts and rewards come from (`name` picks the task)."""
    model: ModelConfig = Field(default_factory=ToyModel)
    """Which policy to train (`source` picks the kind)."""
    rollout: RolloutConfig = RolloutConfig()
    train: TrainConfig = TrainConfig()
    eval: EvalConfig = EvalConfig()
    tracking: TrackingConfig = TrackingConfig()

    @model_validator(mode="before")
    @classmethod
    def _expand_preset(cls, data: Any) -> Any:
        if not isinstance(data, dict) or not isinstance(data.get("objective"), dict):
            return data
        objective = dict(data["objective"])
        name = objective.pop("preset", None)
        data = {**data, "objective_preset": name}
        if objective.get("max_len") is None:
            rollout = data.get("rollout") or {}
            objective["max_len"] = rollout.get("max_new_tokens", RolloutConfig.model_fields["max_new_tokens"].default)
        if name is not None:
            if name not in PRESETS:
                raise ValueError(f"objective.preset: unknown preset {name!r}; known: {', '.join(PRESETS)}")
            try:
                objective = preset_fields(name, objective)  # after max_len: a preset may derive from it
            except ValueError as error:  # a value the preset's definition excludes: name the key
                raise ValueError(f"objective.{error}") from None
        return {**data, "objective": objective}

    @model_validator(mode="after")
    def _eval_only(self) -> RunConfig:
        if self.train.steps == 0 and self.eval.every == 0:
            raise ValueError("train.steps is 0 (an evaluation-only run) but eval.every is 0: nothing to do")
        return self

    @model_validator(mode="after")
    def _fits_toy_model(self) -> RunConfig:
        if not isinstance(self.model, ToyModel) or not isinstance(self.task, ToyTask):
            return self
        prompt, positions = self.task.toy_addition.max_prompt_len + 1, self.model.toy.max_position_embeddings  # + BOS
        for key, new in (
            ("rollout.max_new_tokens", self.rollout.max_new_tokens),
            ("eval.max_new_tokens", self.eval.max_new_tokens or 0),
        ):
            if prompt + new > positions:
                raise ValueError(
                    f"{key}: {new} new tokens after a prompt of up to {prompt} exceed the toy model's "
                    f"{positions} positions (model.toy.max_position_embeddings)"
                )
        return self

    @model_validator(mode="after")
    def _text_build_has_pairs(self) -> RunConfig:
        if not isinstance(self.model, ToyModel) or self.model.toy.text is None:
            return self
        if isinstance(self.task, ToyTask):
            raise ValueError(
                "model.toy.text: builds a base model on the run's task's (prompt, answer) pairs; the toy addition "
                "task has its own build (model.toy.task): remove text, or name another task"
            )
        rows = isinstance(self.task, CustomTask) and self.task.custom.task_class is None
        if not rows and not isinstance(self.task, ReasoningGymTask):
            raise ValueError(
                f"model.toy.text: builds on a task's pool of (prompt, answer) pairs; task {self.task.name!r} "
                "has none (reasoning_gym, or custom rows and functions, have)"
            )
        return self

    @model_validator(mode="after")
    def _task_reports_the_stratum(self) -> RunConfig:
        key = self.objective.stratum_key
        if key is None or not isinstance(self.task, ToyTask):  # another task's keys are checked at its first step
            return self
        reported = self.task.toy_addition.reported_keys
        if key not in reported:
            raise ValueError(
                f"objective.stratum_key: {key!r} is not a fact task toy_addition reports per sample "
                f"(it reports: {', '.join(reported)})"
            )
        return self

    @model_validator(mode="after")
    def _task_grades_the_components(self) -> RunConfig:
        names = self.objective.reward_components
        if names is None or not isinstance(self.task, ToyTask):  # another task's are checked at its first step
            return self
        graded = ("reward", "overlong", *self.task.toy_addition.reward_components)
        unknown = [n for n in names if n not in graded]
        if unknown:
            raise ValueError(
                f"objective.reward_components: {unknown[0]!r} is not a reward component of task toy_addition "
                f"(it has: {', '.join(graded)})"
            )
        return self

    @model_validator(mode="after")
    def _task_gives_hints(self) -> RunConfig:
        hint, after = self.rollout.hint, self.rollout.hint_after_steps
        if hint is None:
            return self
        if not isinstance(self.task, ToyTask):
            raise ValueError(
                f"rollout.hint: {hint} adds a task's hints to the prompts of its all-wrong groups; task "
                f"{self.task.name!r} gives none (the toy_addition task's hidden digits are its hints)"
            )
        if self.task.toy_addition.hide_prob == 0:
            raise ValueError(
                f"rollout.hint: {hint}: the toy's hint is a sample's hidden digit, and task.toy_addition.hide_prob is "
                "0 (no prompt hides one)"
            )
        if after >= self.train.steps:
            raise ValueError(
                f"rollout.hint_after_steps: {after} exempts every one of the {self.train.steps} steps "
                "(train.steps): no hint would be given"
            )
        if self.objective.tracks_prompts:
            raise ValueError(
                f"rollout.hint: {hint} with objective.advantage {self.objective.advantage}: its per-prompt tracker "
                "would count a hinted success as the prompt's own"
            )
        return self

    @model_validator(mode="after")
    def _median_pivot_has_a_median(self) -> RunConfig:
        if self.objective.median_pivot and self.rollout.group_size % 2:
            raise ValueError(
                f"objective.median_pivot: true needs an even rollout.group_size (G + 1 responses, an odd group with "
                f"one median response), got {self.rollout.group_size}"
            )
        return self

    @model_validator(mode="after")
    def _one_response_has_a_signal(self) -> RunConfig:
        o = self.objective
        if self.rollout.group_size + o.extra_samples > 1:
            return self
        if not o.one_response:
            alone = ", ".join(ONE_RESPONSE_ADVANTAGES)
            raise ValueError(
                f"rollout.group_size: 1 gives objective.advantage {o.advantage!r} no signal (a group of one is flat "
                f"under a group baseline, and has no sibling to take one from); with one response per prompt use one "
                f"of: {alone}"
            )
        if o.dynamic_sampling:
            raise ValueError(
                "rollout.group_size: 1 with objective.dynamic_sampling: true would drop every group (a group of one "
                "is flat): sample at least 2 per prompt, or turn dynamic sampling off"
            )
        return self

    @model_validator(mode="after")
    def _probe_buffer_holds_a_group(self) -> RunConfig:
        rows, G = self.objective.poise_buffer_rows, self.rollout.group_size
        if rows is not None and rows < G:
            raise ValueError(
                f"objective.poise_buffer_rows ({rows}) must hold at least one whole prompt group of "
                f"rollout.group_size ({G}) responses: the probe's buffer keeps whole groups"
            )
        return self

    @model_validator(mode="after")
    def _tracker_has_its_prompts(self) -> RunConfig:
        o, r = self.objective, self.rollout
        if o.spo_init_samples and r.prompt_pool is None:
            raise ValueError(
                f"objective.spo_init_samples: {o.spo_init_samples} samples each prompt of a fixed pool before "
                "training: set rollout.prompt_pool (or spo_init_samples: 0)"
            )
        if r.prompt_sampling == "value_priority" and not o.tracks_prompts:
            raise ValueError(
                "rollout.prompt_sampling: value_priority weighs prompts by a per-prompt tracker's success rate: needs "
                f"objective.advantage spo (advantage: {o.advantage})"
            )
        return self

    @model_validator(mode="after")
    def _kl_horizon_keeps_beta_positive(self) -> RunConfig:
        o = self.objective
        n = self.rollout.prompts_per_step * (self.rollout.group_size + o.extra_samples)
        if o.kl_horizon is not None and n >= 5 * o.kl_horizon:
            raise ValueError(
                f"objective.kl_horizon ({o.kl_horizon}) must exceed a step's {n} responses / 5: the adaptive KL "
                f"coefficient's factor 1 − 0.2·n/H would reach 0 or below"
            )
        return self

    @model_validator(mode="after")
    def _reference_to_refresh(self) -> RunConfig:
        problem = self.train.refresh_problem(self.objective.needs_reference)
        if problem:
            raise ValueError(problem)
        return self

    @model_validator(mode="after")
    def _engine_expresses(self) -> RunConfig:
        if self.train.engine == "trl":
            problems = trl_problems(self.objective, self.rollout, self.train)
            if problems:
                raise ValueError(f"train.engine: trl cannot express {'; '.join(problems)}")
        return self

    def identity(self, *, with_seed: bool = True) -> dict[str, Any]:
        """What defines the run's result: every field but `NOT_IDENTITY` (and optionally the seed), `LOGGING_ONLY`'s
        fields at their values there."""
        return self._as_trained().model_dump(mode="json", exclude=self._exclude(with_seed))

    @property
    def config_hash(self) -> str:
        """Hash of the config's identity: the job id (pydantic's JSON keeps the schema's field order, so the hash is
        stable without sorting keys)."""
        return digest(self._as_trained().model_dump_json(exclude=self._exclude(True)))

    @property
    def arm(self) -> str:
        """Hash of the identity without the seed: runs of one arm differ only in seed."""
        return digest(self._as_trained().model_dump_json(exclude=self._exclude(False)))

    def _as_trained(self) -> RunConfig:
        """This config with each `LOGGING_ONLY` field at its value there: the same run, as far as training goes."""
        config = self
        for dotted, value in LOGGING_ONLY.items():
            if _get(config, dotted) != value:
                config = _with(config, dotted, value)
        return config

    def _exclude(self, with_seed: bool) -> dict[str, Any]:
        """`NOT_IDENTITY`, the seed unless `with_seed`, and each `LATER_FIELDS` entry at its default."""
        out = _exclude(NOT_IDENTITY + tuple(k for k, v in LATER_FIELDS.items() if _get(self, k) == v))
        if not with_seed:
            out["seed"] = True
        return out


NOT_IDENTITY = (
    "tracking",
    "objective_preset",
    "model.cache_dir",
    "train.device",
    "train.threads",
    "train.length_buckets",
    "rollout.capture",
    "train.logits_chunk_mb",
    "task.custom.root",
)
"""Fields (dotted) that do not change what a run computes: where it is logged, a label, where the toy build is
cached, which device, how many CPU threads, length buckets, whether the decode is captured as CUDA graphs and MiB
per chunk of logits (these four change only the order of float sums).
They are left out of the job id and are never an arm's switch; nor is the folder a custom task's relative paths are read
from (the same sweep in another checkout is the same job).
A task's or model's other kinds carry no fields at all (the unions above), so they cannot enter the id either."""


LOGGING_ONLY: dict[str, Any] = {"train.reference_kl": True}
"""Fields that change what a run logs, never what it trains, with the value job ids were published with: a run's
identity holds each at that value, so turning one off keeps the job's id (and a finished run of the job counts as
done either way). `train.reference_kl` adds a forward of the initial policy for `policy/kl`, no gradient and no
randomness; with `objective.kl_coef` or `kl_reward_coef` > 0 the reference is there whatever it says. Nor can such
a field tell two arms apart."""


LATER_FIELDS: dict[str, Any] = {
    "train.engine": "harness",
    "objective.surrogate": "clip",
    "objective.sapo_temperature": None,
    "objective.vespo_k": None,
    "objective.vespo_lambda": None,
    "objective.kl_cov_ratio": None,
    "objective.kl_cov_coef": None,
    "objective.clip_cov_ratio": None,
    "objective.clip_cov_bounds": None,
    "objective.entropy_coef": 0.0,
    "objective.entropy_target": None,
    "objective.entropy_coef_step": None,
    "objective.entropy_coef_max": None,
    "objective.top_entropy_quantile": 1.0,
    "objective.off_policy_threshold": None,
    "objective.rollout_correction": None,
    "objective.rollout_correction_min": None,
    "objective.rollout_correction_max": None,
    "objective.reward_range": None,
    "objective.bnpo_params": None,
    "objective.bnpo_max_weight": None,
    "objective.ngrpo_single": "virtual",
    "objective.dynamic_sampling_drop": "flat",
    "objective.median_pivot": False,
    "objective.drop_correct": False,
    "objective.positive_weight": None,
    "objective.stratum_key": None,
    "objective.stratum_blend": 1.0,
    "objective.reward_components": None,
    "objective.reward_weights": None,
    "objective.kl_reward_coef": 0.0,
    "objective.kl_reward_estimator": "k1",
    "objective.dppo_bounds": None,
    "objective.poise_depth": None,
    "objective.poise_pool_tokens": None,
    "objective.poise_pca_dims": None,
    "objective.poise_ridge_alpha": None,
    "objective.poise_buffer_rows": None,
    "objective.poise_bootstrap_steps": None,
    "objective.spo_rho_min": None,
    "objective.spo_rho_max": None,
    "objective.spo_d_half": None,
    "objective.spo_init_samples": None,
    "objective.spo_rho": None,
    "rollout.prompt_pool": None,
    "rollout.prompt_sampling": "uniform",
    "rollout.prompt_priority_eps": 0.05,
    "rollout.hint": None,
    "rollout.hint_after_steps": 0,
    "objective.dppo_ratio_cap": None,
    "objective.dro_beta": None,
    "objective.kl_gradient": "estimator",
    "objective.kl_target": None,
    "objective.kl_horizon": None,
    "train.reference_sync_steps": None,
    "train.reference_mixup_alpha": None,
    "objective.length_reward": None,
    "objective.cosine_correct": None,
    "objective.cosine_wrong": None,
    "objective.cosine_exceed": None,
    "objective.pf_ppo_reweight": None,
    "objective.pf_ppo_weight_pow": None,
    "objective.rollout_correction_batch_normalize": False,
    "objective.rollout_rejection": None,
    "objective.rollout_rejection_min": None,
    "objective.rollout_rejection_max": None,
}
"""Fields added after job ids were published, with their defaults: a field enters the id only when set away from its
default, so a run that does not use it keeps the id (and its sweep the sweep id) it had before the field existed."""


def _get(obj: Any, dotted: str) -> Any:
    for part in dotted.split("."):
        obj = getattr(obj, part)
    return obj


def defines_arm(key: str) -> bool:
    """Whether a flattened config key (a logged param) can tell two arms apart: not the seed, the name, nor a field
    of `NOT_IDENTITY` or `LOGGING_ONLY`."""
    fields = NOT_IDENTITY + tuple(LOGGING_ONLY)
    return key not in ("seed", "name") and not any(key == f or key.startswith(f + ".") for f in fields)


def _with(config: Any, dotted: str, value: Any) -> Any:
    """A copy of the model `config` with the dotted field set to `value` (the models above it copied too)."""
    head, _, rest = dotted.partition(".")
    return config.model_copy(update={head: _with(getattr(config, head), rest, value) if rest else value})


def _exclude(dotted: tuple[str, ...]) -> dict[str, Any]:
    tree: dict[str, Any] = {}
    for path in dotted:
        *parents, leaf = path.split(".")
        node = tree
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = True
    return tree


def digest(text: str) -> str:
    """A run's id from the text of its identity (12 hex digits of its SHA-256)."""
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def load_run_config(path: str | Path, overrides: list[str] | None = None) -> RunConfig:
    """Read, override and validate a run config; any problem is one `ConfigError` line."""
    data = apply_overrides(load_yaml(path), overrides or [])
    return validate(RunConfig, anchored(data, Path(path).parent, str(path)), str(path))


def anchored(data: dict[str, Any], folder: Path, where: str) -> dict[str, Any]:
    """`data` with a custom task's `root` set to `folder` (absolute): its relative paths (data, reward and class
    files) are read from the folder of the config file that was loaded, whatever the text says. A `root` written
    in the config (`where`) is refused in one line: the code that runs is the one beside the config."""
    task = data.get("task")
    if not isinstance(task, dict) or not isinstance(task.get("custom"), dict):
        return data
    if "root" in task["custom"]:
        raise ConfigError(
            f"{where}: task.custom.root: harness sets it to the folder of the config file ({folder.resolve()}); "
            "remove it, and give the files' paths relative to that folder"
        )
    if task.get("name") != "custom":
        return data
    return {**data, "task": {**task, "custom": {**task["custom"], "root": str(folder.resolve())}}}
