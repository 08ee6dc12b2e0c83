"""Benchmark evaluation settings, declared once: how a model is sampled and scored on math benchmarks.

`EvalSampling` holds what every evaluation takes; a run config's `eval:` section (`EvalConfig`) adds when to
evaluate, and the `harness eval` command (`EvalSettings`) adds which model and how to load it, with defaults of
its own. The command's flags are built from `EvalSettings`' fields (harness/cli.py).
"""

from __future__ import annotations

from pydantic import BaseModel, Field, field_validator

from trainer.config import STRICT, Device, Dtype, Template


class EvalSampling(BaseModel):
    """Which benchmarks, and how each problem is sampled and scored (avg@k, pass@k, maj@k)."""

    model_config = STRICT

    benchmarks: list[str] = ["math500"]
    """Benchmark names of trainer.data.benchmarks."""
    k: int = Field(1, ge=1)
    """Samples per problem (avg@k, pass@k, maj@k)."""
    temperature: float = Field(0.6, ge=0)
    """Sampling temperature (0 = greedy)."""
    top_p: float = Field(1.0, gt=0, le=1)
    """Nucleus sampling mass."""
    max_new_tokens: int | None = Field(None, ge=1)
    """Generation budget (null = rollout.max_new_tokens)."""
    limit: int | None = Field(None, ge=1)
    """Evaluate on the first N problems of each benchmark (left out = all)."""


class EvalConfig(EvalSampling):
    """Periodic benchmark evaluation inside a training run (eval/<benchmark>/...)."""

    every: int = Field(0, ge=0)
    """Evaluate every N RL steps and after the last (0 = never)."""


class EvalSettings(EvalSampling):
    """One `harness eval`: a model on math benchmarks (each field is a flag of the command)."""

    model: str
    """HF model id or local directory (safetensors)."""
    benchmarks: list[str] = ["math500", "aime24", "amc23", "gsm8k"]
    """Benchmark names, comma-separated."""
    max_new_tokens: int = Field(3000, ge=1)
    """Generation budget."""
    template: Template = "qwen_math"
    """Prompt template."""
    seed: int = 0
    """Seeds sampling."""
    device: Device = "auto"
    """Where the model runs: auto = cuda when available, else cpu."""
    dtype: Dtype = "auto"
    """Weights' dtype: auto = bfloat16 on a CUDA device with bf16, else float32."""

    @field_validator("benchmarks")
    @classmethod
    def _known(cls, names: list[str]) -> list[str]:
        from trainer.data.benchmarks import BENCHMARKS  # here, not above: a run config never needs it

        unknown = [b for b in names if b not in BENCHMARKS]
        if unknown or not names:
            raise ValueError(f"{', '.join(unknown) or 'nothing'} is not one of {', '.join(BENCHMARKS)}")
        return names
