"""Shared fixtures: one tiny toy model per test session (a short SFT; the real default is ~800 steps)."""

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def toy_cache(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("toy-cache")


@pytest.fixture(scope="session")
def tiny_run_overrides(toy_cache) -> list[str]:
    """--set items for a fast real run: a toy model briefly trained on 1-digit sums (~15% sampled
    accuracy, so groups are mixed and advantages non-zero) and a small batch."""
    return [f"model.cache_dir={toy_cache}", "model.toy.sft_steps=250", "model.toy.eval_samples=0",
            "model.toy.batch_size=32", "model.toy.task.max_digits=1", "task.toy_addition.max_digits=1",
            "rollout.prompts_per_step=4", "rollout.group_size=4", "rollout.max_new_tokens=48",
            "train.steps=3", "train.threads=1"]
