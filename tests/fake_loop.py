"""A fake rollout backend and policy for loop tests that train no model: sample j of a group answers
[10 + j] × (j + 1) tokens with text 'j' (prompts end in ':j')."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
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


def record_updates(trainer, keep=lambda t, advantages: advantages.tolist()) -> list:
    """A list that each of `trainer.update`'s calls appends `keep(batch tensors, advantages)` to, before it runs."""
    seen: list = []
    update = trainer.update

    def spy(step, t, advantages, mask, *rest):
        seen.append(keep(t, advantages))
        return update(step, t, advantages, mask, *rest)

    trainer.update = spy
    return seen


UPDATE_LENGTHS = torch.tensor([10, 3, 7, 1, 10, 5, 2, 9])
"""The response lengths of `split_update`'s 8 responses."""


def split_update(s, advantages: torch.Tensor, splits: int):
    """(summed loss, merged metrics, the logits' gradient) of one update of objective `s` on 8 random float64
    responses of `UPDATE_LENGTHS` tokens (seed 0, π_old 0.3 off π_θ so clipping acts), advantages `advantages` [8],
    over the whole batch's normaliser in `splits` micro-batches: the same result for every split, by design."""
    from trainer.objective import Normaliser, merge_metrics, policy_loss
    from trainer.objective.kl import token_logprobs

    g = torch.Generator().manual_seed(0)
    logits = torch.randn(8, 10, 5, generator=g, dtype=torch.float64).requires_grad_(True)
    tokens = torch.randint(0, 5, (8, 10), generator=g)
    mask = (torch.arange(10) < UPDATE_LENGTHS[:, None]).long()
    old = token_logprobs(logits.detach(), tokens) + 0.3 * torch.randn(8, 10, generator=g, dtype=torch.float64)
    norm = Normaliser.from_mask(mask, s.max_len)
    total, parts = 0.0, []
    for rows in torch.arange(8).chunk(splits):
        out = policy_loss(
            token_logprobs(logits[rows], tokens[rows]), old[rows], advantages[rows], mask[rows], s, norm=norm
        )
        out.loss.backward()
        total += out.loss.item()
        parts.append(out.metrics)
    return total, merge_metrics(parts), logits.grad.clone()


def assert_splits_agree(update, tol: float = 1e-9) -> dict[str, float]:
    """`update(splits)` → (loss, metrics, gradient) gives the same loss, gradient and metrics within `tol` in 2 and 4
    micro-batches as in one: the invariance every switch that touches the loss must have. Returns the one-batch
    metrics, for a test's checks that the case covers what it should (clipped tokens, rejected ones)."""
    loss1, metrics1, grad1 = update(1)
    for splits in (2, 4):
        loss_k, metrics_k, grad_k = update(splits)
        assert abs(loss_k - loss1) < tol, (splits, loss_k, loss1)
        assert (grad_k - grad1).abs().max().item() < tol, splits
        assert metrics_k == pytest.approx(metrics1, abs=tol), splits
    return metrics1
