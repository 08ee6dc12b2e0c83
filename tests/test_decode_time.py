"""The decode time per token step a run logs (`time/decode_step_s`)."""

from __future__ import annotations

import time

from fake_loop import FakeBackend, FakeLM

from trainer import metric_names as M
from trainer.config import RolloutConfig, TrainConfig
from trainer.loop import Trainer, TrainerSettings
from trainer.objective import ObjectiveSettings
from trainer.rewards.grade import Grade
from trainer.tasks.base import Group


class SlowBackend(FakeBackend):
    """FakeBackend's responses (sample j: j + 1 tokens) after 0.2 s."""

    def generate(self, prompts, params, seed):
        time.sleep(0.2)
        return super().generate(prompts, params, seed)


class Task:
    name = "fake"

    def sample_groups(self, rng, num_groups, group_size):
        return [Group(f"p{k}", "", tuple(f"{k}:{j}" for j in range(group_size))) for k in range(num_groups)]

    def grade(self, group, index, completion):
        return Grade(float(index % 2), bool(index % 2))

    def step_metrics(self, groups, grades, lengths):
        return {}


def test_the_decode_time_is_per_token_step_of_the_longest_response():
    settings = TrainerSettings(
        ObjectiveSettings.preset("grpo", max_len=8),
        RolloutConfig(prompts_per_step=2, group_size=4, max_new_tokens=8),
        TrainConfig(steps=1, device="cpu", reference_kl=False),
        0,
    )
    metrics = Trainer(FakeLM(), Task(), SlowBackend(), 0, settings).step(1)
    # one generate call of >= 0.2 s whose longest response has 4 tokens (not 20: every response's tokens)
    assert 0.2 <= metrics[M.DECODE_STEP_S] * 4 <= metrics[M.GENERATE_S]
