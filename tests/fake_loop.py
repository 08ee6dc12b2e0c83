"""A fake rollout backend and policy for loop tests that train no model: sample j of a group answers
[10 + j] × (j + 1) tokens with text 'j' (prompts end in ':j')."""

from __future__ import annotations

from types import SimpleNamespace

import torch

from trainer.rewards.grade import Grade
from trainer.rollout.base import RolloutBatch
from trainer.tasks.base import Group


class FakeBackend:
    """Response of sample j: tokens [10 + j] × (j + 1), text 'j'."""

    def __init__(self):
        self.calls: list[list[str]] = []

    def generate(self, prompts, params, seed):
        self.calls.append(list(prompts))
        idx = [int(p.split(":")[1]) for p in prompts]
        n, L = len(prompts), max(idx) + 1
        lengths = torch.tensor([j + 1 for j in idx])
        ids = torch.zeros(n, L, dtype=torch.long)
        for i, j in enumerate(idx):
            ids[i, : j + 1] = 10 + j
        mask = (torch.arange(L) < lengths[:, None]).long()
        prompt_ids, prompt_mask = torch.full((n, 2), 3), torch.ones(n, 2, dtype=torch.long)
        logprobs, truncated = torch.zeros(n, L), torch.zeros(n, dtype=torch.bool)
        return RolloutBatch(prompt_ids, prompt_mask, ids, mask, logprobs, lengths, truncated, [str(j) for j in idx])

    def sync_weights(self, model):
        pass


class FakeLM(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.emb, self.out = torch.nn.Embedding(32, 8), torch.nn.Linear(8, 32)

    def forward(self, input_ids, attention_mask=None, position_ids=None, logits_to_keep=0):
        logits = self.out(self.emb(input_ids))
        return SimpleNamespace(logits=logits[:, -logits_to_keep:] if logits_to_keep else logits)


class TableTask:
    """A task whose groups are problems p0, p1, ... (by position in the step) and whose reward for sample j of problem
    p is `rewards[p][j]` (correct at 1.0), whatever the completion says."""

    name = "fake"

    def __init__(self, rewards: dict[str, list[float]]):
        self.rewards = rewards

    def sample_groups(self, rng, num_groups, group_size):
        return [Group(f"p{k}", "", tuple(f"{k}:{j}" for j in range(group_size))) for k in range(num_groups)]

    def grade(self, group, index, completion):
        reward = self.rewards[group.problem_id][index]
        return Grade(reward, reward == 1.0)

    def step_metrics(self, groups, grades, lengths):
        return {}
