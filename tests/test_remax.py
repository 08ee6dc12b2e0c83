"""ReMax (arXiv 2310.10505): A_i = R_i − R̄, R̄ the reward of one greedy response to the prompt. By hand, split into
micro-batches, against GRPO's update, and in the loop: one greedy response per distinct prompt, at temperature 0,
graded, its reward the baseline, never in the loss."""

from __future__ import annotations

import pytest
import torch
from fake_loop import UPDATE_LENGTHS, FakeBackend, FakeLM, assert_splits_agree, record_updates, split_update
from test_rollout_contract import tiny_model, tiny_tokenizer

from trainer import metric_names as M
from trainer.config import RolloutConfig, TrainConfig
from trainer.loop import Trainer, TrainerSettings
from trainer.objective import ADVANTAGES, ObjectiveSettings, compute_advantages
from trainer.rewards.grade import Grade
from trainer.rollout.hf import TransformersBackend
from trainer.tasks.base import Group


def T(*rows: list[float]) -> torch.Tensor:
    return torch.tensor(rows, dtype=torch.float64)


# ---- the estimator by hand ---------------------------------------------------------------------------------------
def test_by_hand_one_baseline_per_group():
    rewards = T([1, 0, 0, 1], [0, 0, 0, 0], [1, 1, 1, 1])
    greedy = T([0], [1], [1])
    assert ADVANTAGES["remax"](rewards, 0.0, greedy).tolist() == [[1, 0, 0, 1], [-1, -1, -1, -1], [0, 0, 0, 0]]
    continuous = ADVANTAGES["remax"](T([0.5, 0.25]), 1e-6, T([0.75]))  # no std scale, ε unused
    assert continuous.tolist() == [[-0.25, -0.5]]


def test_by_hand_one_baseline_per_response_and_a_flat_group_keeps_its_signal():
    """Each response's own prompt's greedy reward (the toy's hidden digits give a group several prompts)."""
    rewards = T([1, 1, 1])
    assert ADVANTAGES["remax"](rewards, 0.0, T([0, 1, 0])).tolist() == [[1, 0, 1]]
    assert not ADVANTAGES.meta("remax").get("zeroes_flat_groups", True)


def test_compute_advantages_hands_the_greedy_rewards_to_remax_only():
    s = ObjectiveSettings.preset("remax")
    assert s.needs_greedy and not ObjectiveSettings.preset("grpo").needs_greedy
    rewards, greedy = T([1, 0], [0, 1]), T([1], [0])
    assert compute_advantages(rewards, s, greedy=greedy).tolist() == [[0, -1], [0, 1]]
    with pytest.raises(ValueError, match="needs the reward of a greedy response"):
        compute_advantages(rewards, s)


# ---- the update: split into micro-batches, and unlike GRPO's -------------------------------------------------------
REWARDS = T([1, 0, 0, 1], [0, 0, 0, 0])
GREEDY = T([0], [1])  # the first group's greedy response wrong, the second's right: every response has a signal
LENGTHS = UPDATE_LENGTHS


def _update(s: ObjectiveSettings, splits: int) -> tuple[float, dict[str, float], torch.Tensor]:
    adv = compute_advantages(REWARDS, s, greedy=GREEDY if s.needs_greedy else None).flatten()
    return split_update(s, adv, splits)


@pytest.mark.parametrize("preset", ["remax", "grpo"])
def test_micro_batch_invariance(preset):
    s = ObjectiveSettings.preset(preset, advantage="remax")
    assert assert_splits_agree(lambda splits: _update(s, splits))[M.CLIP_FRAC] > 0  # clipped tokens are covered too


def test_changes_the_update_from_grpos_and_dr_grpos():
    _, _, mine = _update(ObjectiveSettings.preset("grpo", advantage="remax"), 1)
    for other in ("group_std", "group_mean"):
        _, _, theirs = _update(ObjectiveSettings.preset("grpo", advantage=other), 1)
        assert (mine - theirs).abs().max().item() > 1e-3


# ---- the loop ----------------------------------------------------------------------------------------------------
class SharedPromptTask:
    """Problems p0, p1, ...; group k's samples see `prompts[k]` (each 'k:j', which FakeBackend answers with 'j'); the
    reward of sample j is `rewards[pk][j]`, whatever the completion; the greedy response, graded as the first sample
    with its prompt, gets that sample's."""

    name = "fake"

    def __init__(self, rewards: dict[str, list[float]], prompts: list[tuple[str, ...]]):
        self.rewards, self.prompts = rewards, prompts

    def sample_groups(self, rng, num_groups, group_size):
        return [Group(f"p{k}", "", self.prompts[k]) for k in range(num_groups)]

    def grade(self, group, index, completion):
        reward = self.rewards[group.problem_id][index]
        return Grade(reward, reward == 1.0)

    def step_metrics(self, groups, grades, lengths):
        return {}


class RecordingBackend(FakeBackend):
    """FakeBackend that records each call's temperature and answers a greedy call with token 31 (no sample has it)."""

    def __init__(self):
        super().__init__()
        self.temperatures: list[float] = []

    def generate(self, prompts, params, seed):
        self.temperatures.append(params.temperature)
        out = super().generate(prompts, params, seed)
        if params.temperature == 0:
            out.response_ids[out.response_mask.bool()] = 31
        return out


def _loop(task, objective: ObjectiveSettings, backend=None, group_size: int = 4):
    settings = TrainerSettings(
        objective,
        RolloutConfig(prompts_per_step=2, group_size=group_size, max_new_tokens=8, temperature=0.7),
        TrainConfig(steps=1, device="cpu", reference_kl=False),
        0,
    )
    tr = Trainer(FakeLM(), task, backend or RecordingBackend(), 0, settings)
    return tr, record_updates(tr, lambda t, advantages: (t, advantages.tolist()))


def test_the_loop_draws_one_greedy_response_per_prompt_and_never_trains_on_it():
    task = SharedPromptTask({"p0": [1, 0, 0, 1], "p1": [0, 1, 1, 1]}, [("0:0",) * 4, ("1:0",) * 4])
    tr, seen = _loop(task, ObjectiveSettings.preset("remax", max_len=8))
    metrics = tr.step(1)
    assert tr.backend.temperatures == [0.7, 0.0]  # the sampled responses, then the greedy ones
    assert tr.backend.calls[1] == ["0:0", "1:0"]  # one per prompt
    ((t, adv),) = seen
    assert adv == [0, -1, -1, 0, 0, 1, 1, 1]  # baselines 1 (p0's sample 0) and 0 (p1's)
    assert t["ids"].shape[0] == 8 and not (t["ids"] == 31).any()  # the 8 sampled responses, no greedy token
    assert metrics[M.GREEDY_REWARD_MEAN] == 0.5 and metrics[M.REWARD_MEAN] == 5 / 8  # greedy: 1 and 0
    assert tr.tokens_generated == 8 + 2  # one token each, the greedy responses' counted too
    assert M.GREEDY_REWARD_MEAN in M.ALL


def test_a_group_with_several_prompts_gets_a_greedy_response_for_each():
    task = SharedPromptTask({"p0": [1, 0, 0, 1], "p1": [0, 1, 1, 1]}, [("0:0", "0:1", "0:0", "0:1"), ("1:2",) * 4])
    tr, seen = _loop(task, ObjectiveSettings.preset("remax", max_len=8))
    tr.step(1)
    assert tr.backend.calls[1] == ["0:0", "0:1", "1:2"]
    ((_, adv),) = seen
    assert adv == [0, 0, -1, 1, 0, 1, 1, 1]  # p0: baselines 1, 0, 1, 0 by prompt; p1: sample 0's reward, 0


def test_one_response_per_prompt_the_papers_setting_trains_on_each_against_its_greedy_baseline():
    task = SharedPromptTask({"p0": [0], "p1": [1]}, [("0:0",), ("1:0",)])
    tr, seen = _loop(task, ObjectiveSettings.preset("remax", max_len=8), group_size=1)
    tr.step(1)
    assert tr.backend.calls[1] == ["0:0", "1:0"]
    ((t, adv),) = seen
    assert adv == [0, 0] and t["ids"].shape[0] == 2  # each sample is its own prompt's first: baseline = its reward
    task = SharedPromptTask({"p0": [0], "p1": [1]}, [("0:0",), ("1:0",)])
    tr, seen = _loop(task, ObjectiveSettings.preset("remax", max_len=8), group_size=1)
    tr._greedy = lambda step, groups: (T([1], [0]), {M.GREEDY_REWARD_MEAN: 0.5}, 2)  # greedy: p0 right, p1 wrong
    tr.step(1)
    assert seen[0][1] == [-1, 1]


def test_other_advantages_draw_no_greedy_response():
    task = SharedPromptTask({"p0": [1, 0, 0, 1], "p1": [0, 1, 1, 1]}, [("0:0",) * 4, ("1:0",) * 4])
    tr, _ = _loop(task, ObjectiveSettings.preset("grpo", max_len=8))
    metrics = tr.step(1)
    assert tr.backend.temperatures == [0.7] and M.GREEDY_REWARD_MEAN not in metrics


def test_the_greedy_response_is_deterministic_under_the_transformers_backend():
    """A real model and backend: the greedy responses of two steps (two seeds) are the same tokens, the argmax ones,
    while the sampled responses of the two steps differ."""
    tokenizer = tiny_tokenizer()
    model = tiny_model(tokenizer)
    backend = TransformersBackend(model, tokenizer)
    prompts = ("12+34=",) * 4
    task = SharedPromptTask({"p0": [1, 0, 0, 1], "p1": [0, 1, 1, 1]}, [prompts, ("7+8=",) * 4])
    tr, _ = _loop(task, ObjectiveSettings.preset("remax", max_len=8), backend)
    outs, generate = [], backend.generate

    def record(prompts, params, seed):
        outs.append((params.temperature, generate(prompts, params, seed)))
        return outs[-1][1]

    backend.generate = record
    tr.policy = model  # sample from the real model (the loop never updates it here)
    tr._greedy(1, task.sample_groups(None, 2, 4))
    tr._greedy(2, task.sample_groups(None, 2, 4))
    (_, first), (_, second) = outs
    assert torch.equal(first.response_ids, second.response_ids) and first.texts == second.texts
    with torch.no_grad():  # each greedy token is the model's argmax after the prompt and the tokens before it
        ids = torch.cat([first.prompt_ids, first.response_ids], 1)
        attn = torch.cat([first.prompt_mask, first.response_mask], 1)
        logits = model(input_ids=ids, attention_mask=attn, position_ids=(attn.cumsum(1) - 1).clamp(min=0)).logits
    P = first.prompt_ids.shape[1]
    argmax = logits[:, P - 1 : -1].argmax(-1)
    real = first.response_mask.bool()
    assert torch.equal(first.response_ids[real], argmax[real])
