"""Hints for all-wrong groups (rollout.hint; trainer/hints.py): Scaf-GRPO (arXiv 2510.19807) and HiLL's reasoner update
with a fixed hint (arXiv 2604.00698). The schemes' rules by hand, the advantage of a group they augment by hand, the
toy's hint, and in the loop: what is drawn, what replaces what, that a hinted response trains under its hinted prompt,
the exemption, HiLL's reliance, the rollout table, off by default; then the run config's and TRL's refusals."""

from __future__ import annotations

import math
import typing
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
from fake_loop import FakeBackend, FakeLM, TableTask, record_updates

from trainer import metric_names as M
from trainer.config import HintName, RolloutConfig, TrainConfig
from trainer.hints import (
    HINT_SCHEMES,
    Ask,
    hint_reliance,
    hinted_group_asks,
    hinted_group_pick,
    hinted_prompt,
    scaf_grpo_asks,
    scaf_grpo_pick,
)
from trainer.loop import Trainer, TrainerSettings
from trainer.objective import ObjectiveSettings, compute_advantages
from trainer.rewards.grade import Grade
from trainer.tasks.base import Group
from trainer.tasks.toy_addition import ToyAdditionTask
from trainer.tasks.toy_addition_config import ToyAdditionConfig


# ---- the schemes' rules by hand --------------------------------------------------------------------------------------
def test_scaf_grpo_draws_every_level_of_one_failed_sample_with_a_ladder():
    ladders = [(), ("a1", "a2", "a3"), (), ("b1",)]
    rng = np.random.default_rng(0)
    slots = set()
    for _ in range(50):
        asks = scaf_grpo_asks([False] * 4, ladders, rng)
        slots.add(asks[0].slot)
        assert asks in ([Ask(1, 1), Ask(1, 2), Ask(1, 3)], [Ask(3, 1)])  # the lowest level first
    assert slots == {1, 3}  # drawn among the samples with a ladder only, both drawn
    assert scaf_grpo_asks([False, True, False, False], ladders, rng) == []  # a correct response: no hint
    assert scaf_grpo_asks([False] * 4, [()] * 4, rng) == []  # no sample has a hint


def test_scaf_grpo_takes_the_lowest_correct_level():
    asks = [Ask(2, 1), Ask(2, 2), Ask(2, 3)]
    assert scaf_grpo_pick(asks, [False, True, True]) == {2: 1}  # the minimal effective hint
    assert scaf_grpo_pick(asks, [True, True, True]) == {2: 0}
    assert scaf_grpo_pick(asks, [False, False, False]) == {}  # intractable at this step: the group stays all wrong


def test_hinted_group_redraws_the_group_and_keeps_it_only_when_mixed():
    ladders = [("h0",), (), ("h2", "h2b"), ()]
    assert hinted_group_asks([False] * 4, ladders, np.random.default_rng(0)) == [
        Ask(0, 1),
        Ask(1, 0),  # no hint for this sample: its own prompt
        Ask(2, 1),  # the ladder's first hint
        Ask(3, 0),
    ]
    assert hinted_group_asks([True, False, False, False], ladders, np.random.default_rng(0)) == []
    assert hinted_group_asks([False] * 4, [()] * 4, np.random.default_rng(0)) == []
    asks = [Ask(j, 1) for j in range(4)]
    assert hinted_group_pick(asks, [False, True, False, True]) == {0: 0, 1: 1, 2: 2, 3: 3}
    assert hinted_group_pick(asks, [True] * 4) == {}  # HiLL's non-degenerate probability is 0: no replacement
    assert hinted_group_pick(asks, [False] * 4) == {}
    assert hinted_prompt(Ask(1, 0), "own", ()) == "own" and hinted_prompt(Ask(2, 2), "own", ("a", "b")) == "b"


def test_the_scheme_names_are_the_settings():
    assert set(HINT_SCHEMES) == set(typing.get_args(HintName))


def test_hint_reliance_by_hand():
    # mean(−2, −4) − mean(−0.5, −1.5) = −3 − (−1) = −2: the response is 2 nats per token less likely without the hint
    assert hint_reliance([-2.0, -4.0], [-0.5, -1.5]) == pytest.approx(-2.0)
    assert hint_reliance([-0.1, -0.3], [-1.0, -3.0]) == pytest.approx(-0.2 + 2.0)  # more likely without it
    assert hint_reliance([], []) == 0.0
    with pytest.raises(ValueError, match="2 log-probabilities without the hint, 1 with it"):
        hint_reliance([0.0, 0.0], [0.0])


def test_an_augmented_group_of_eight_gets_grpos_advantage_by_hand():
    """Scaf-GRPO's eq. 2 on a group of 8 whose one hinted success replaced a failure: mean 1/8, Bessel std √(1/8)."""
    rewards = torch.tensor([[1.0] + [0.0] * 7], dtype=torch.float64)
    a = compute_advantages(rewards, ObjectiveSettings.preset("grpo")).flatten()
    std = math.sqrt(8 / 7 * (1 / 8) * (7 / 8))  # = √(1/8) = 0.35355
    assert std == pytest.approx(math.sqrt(1 / 8))
    assert a[0].item() == pytest.approx((7 / 8) / (std + 1e-6)) and a[0].item() == pytest.approx(2.47487, abs=1e-5)
    assert a[1:].tolist() == pytest.approx([-(1 / 8) / (std + 1e-6)] * 7)
    assert a[1].item() == pytest.approx(-0.35355, abs=1e-5)
    flat = compute_advantages(torch.zeros(1, 8, dtype=torch.float64), ObjectiveSettings.preset("grpo"))
    assert flat.abs().sum().item() == 0.0  # the group before the hint: the learning cliff


# ---- the toy's hint --------------------------------------------------------------------------------------------------
def test_the_toy_shows_a_hidden_digit_where_its_question_mark_stood():
    task = ToyAdditionTask(ToyAdditionConfig())
    meta = ({"hidden_digit": True, "hidden_operand": 0, "hidden_place": 1}, {"hidden_digit": False})
    group = Group("457+68", "525", ("4?7+68=", "457+68="), meta)
    assert task.hints(group, 0) == ("457+68=",)  # the clean prompt: the base model reads it as every clean prompt
    assert task.hints(group, 1) == ()  # a sample that hides nothing has no hint
    assert task.grade(group, 0, "7+8=15,5+6=11,4+0=05,>525;").correct  # graded as its sample: the answer is kept
    for group in task.sample_groups(np.random.default_rng(3), 20, 8):
        for j, prompt in enumerate(group.prompts):
            (hint,) = task.hints(group, j) or (None,)
            assert (hint is not None) == ("?" in prompt)
            assert hint is None or (hint == group.problem_id + "=" and "?" not in hint)


# ---- in the loop -----------------------------------------------------------------------------------------------------
class HintTask(TableTask):
    """Problems p0, p1, ...: sample j of problem k is prompted `k:j` and the fake backend answers `j`; the answer of
    problem k is `answers[k]`. Sample j of problem k has the hint ladder `ladders[k][j]`: prompts `k:m`, answered
    `m`."""

    def __init__(self, answers: list[str], ladders: list[list[tuple[int, ...]]]):
        super().__init__({})
        self.answers, self.ladders = answers, ladders

    def sample_groups(self, rng, num_groups, group_size):
        return [
            Group(f"p{k}", self.answers[k], tuple(f"{k}:{j}" for j in range(group_size))) for k in range(num_groups)
        ]

    def grade(self, group, index, completion):
        correct = completion == group.answer
        return Grade(float(correct), correct, {"answered": True})

    def hints(self, group, index):
        k = int(group.problem_id[1:])
        return tuple(f"{k}:{m}" for m in self.ladders[k][index])


class PromptBackend(FakeBackend):
    """FakeBackend with each prompt's ids [3, 20 + m] for prompt `k:m`, so that a hinted prompt's ids differ."""

    def generate(self, prompts, params, seed):
        out = super().generate(prompts, params, seed)
        return replace(out, prompt_ids=torch.tensor([[3, 20 + int(p.split(":")[1])] for p in prompts]))


TOY_RUN = Path(__file__).resolve().parents[1] / "ablations" / "toy_run.yaml"
LADDERS = [[(), (8, 9), (), (8, 9)], [(), (), (), ()]]
"""p0: samples 1 and 3 have a two-level ladder, its first hint answered wrong (8), its second right (9)."""


def _loop(hint=None, after=0, ladders=LADDERS, answers=("9", "2"), steps=2, objective=None):
    rollout = RolloutConfig(
        prompts_per_step=2, group_size=4, max_new_tokens=16, temperature=0.7, hint=hint, hint_after_steps=after
    )
    train = TrainConfig(steps=steps, device="cpu", reference_kl=False, lr=0.05)
    settings = TrainerSettings(objective or ObjectiveSettings.preset("grpo"), rollout, train, 0)
    tr = Trainer(FakeLM(), HintTask(list(answers), ladders), PromptBackend(), 0, settings)
    return tr, record_updates(tr, keep=lambda t, a: (t["ids"].clone(), a.tolist()))


def test_scaf_grpo_swaps_the_lowest_correct_hinted_response_into_the_all_wrong_group():
    tr, seen = _loop("scaf_grpo")
    metrics = tr.step(1)
    step_call, hint_call = tr.backend.calls
    assert step_call == ["0:0", "0:1", "0:2", "0:3", "1:0", "1:1", "1:2", "1:3"]
    assert hint_call == ["0:8", "0:9"]  # p0 is all wrong: its ladder, lowest first; p1 has a correct response
    (d8, d9) = tr.draws
    slot = d8.slot
    assert slot in (1, 3) and d9.slot == slot and (d8.level, d9.level) == (1, 2)
    assert (d8.grade.correct, d9.grade.correct, d8.used, d9.used) == (False, True, False, True)
    ids, advantages = seen[0]
    # one correct of 4 in each group: mean 1/4, Bessel std 1/2; A = 3/2 for it, −1/2 for the others
    expected = [-0.5] * 8
    expected[slot], expected[4 + 2] = 1.5, 1.5
    assert advantages == pytest.approx(expected, abs=1e-5)
    # the hinted response trains under its hinted prompt (ids 3, 29), its own tokens [19] × 10
    assert ids[slot, :2].tolist() == [3, 29] and ids[slot, 2:12].tolist() == [19] * 10
    others = [j for j in range(4) if j != slot]
    assert all(ids[j, 1].item() == 20 + j for j in others)  # the rest of the group keeps its own prompts
    # the judged metrics are the responses drawn without hints': 1 correct of 8 (p1's sample 2)
    assert metrics[M.ACCURACY] == pytest.approx(1 / 8) and metrics[M.GROUPS_ALL_WRONG_FRAC] == 0.5
    assert metrics[M.HINT_GROUPS_TRIGGERED_FRAC] == 0.5 and metrics[M.HINT_GROUPS_HINTED_FRAC] == 0.5
    assert metrics[M.HINT_RESPONSES_FRAC] == pytest.approx(1 / 8) and metrics[M.HINT_ACCURACY] == 0.5
    assert M.HINT_RELIANCE in metrics and metrics[M.ADV_ZERO_FRAC] == 0.0
    assert tr.tokens_generated == sum(j + 1 for j in range(4)) * 2 + 9 + 10  # the hinted draws' tokens count
    rows = tr.rollout_table()
    hinted = rows[rows["hinted"]]
    assert hinted["hint_level"].tolist() == [1, 2] and hinted["kept"].tolist() == [False, True]
    assert hinted["advantage"].iloc[1] == pytest.approx(1.5, abs=1e-5) and math.isnan(hinted["advantage"].iloc[0])
    assert hinted["prompt"].tolist() == ["0:8", "0:9"] and hinted["response"].tolist() == ["8", "9"]
    plain = rows[~rows["hinted"]]
    assert len(plain) == 8 and plain["kept"].sum() == 7  # the replaced sample: drawn, not trained on
    replaced = plain[(plain["prompt_id"] == "p0") & (plain["sample_index"] == slot)]
    assert not replaced["kept"].item() and math.isnan(replaced["advantage"].item())


def test_without_hints_nothing_changes():
    tr, seen = _loop()
    metrics = tr.step(1)
    assert len(tr.backend.calls) == 1 and tr.draws == []
    ids, advantages = seen[0]
    assert advantages[:4] == [0.0] * 4  # the learning cliff: p0 gives no gradient
    assert advantages[4:] == pytest.approx([-0.5, -0.5, 1.5, -0.5], abs=1e-5)
    assert not any(name.startswith("hint/") for name in metrics)
    assert "hinted" not in tr.rollout_table()
    assert RolloutConfig().hint is None and RolloutConfig().hint_after_steps == 0


def test_hints_change_the_update():
    grads = []
    for hint in (None, "scaf_grpo"):
        tr, _ = _loop(hint)
        before = [p.detach().clone() for p in tr.policy.parameters()]
        tr.step(1)
        grads.append([(p.detach() - b).abs().sum().item() for p, b in zip(tr.policy.parameters(), before)])
    assert grads[0] != pytest.approx(grads[1])


def test_hints_under_a_length_reward_shape_the_hinted_rows_by_their_own_correctness_and_length():
    """The rollout table's hinted rows carry the same shaped reward as a sampled row would: the cosine length reward
    of their correctness, length and truncation (it needs all three; without them the step failed at its end)."""
    from trainer.objective import cosine_scaled_reward

    s = ObjectiveSettings.preset(
        "grpo", max_len=16, length_reward="cosine", cosine_correct=(1.0, 0.5), cosine_wrong=(-1.0, -0.5)
    )
    tr, _ = _loop("scaf_grpo", objective=s)
    tr.step(1)
    hinted = tr.rollout_table().query("hinted")
    expected = cosine_scaled_reward(
        torch.tensor([False, True]), torch.tensor([9, 10]), torch.tensor([False, False]), 16, (1.0, 0.5), (-1.0, -0.5)
    )
    assert hinted["length"].tolist() == [9, 10] and hinted["correct"].tolist() == [False, True]
    assert hinted["shaped_reward"].tolist() == pytest.approx(expected.tolist(), abs=1e-12)


def test_no_hint_before_the_exemption_ends():
    tr, seen = _loop("scaf_grpo", after=1)
    first = tr.step(1)
    assert len(tr.backend.calls) == 1 and seen[0][1][:4] == [0.0] * 4  # step 1 ≤ hint_after_steps: exempt
    assert first[M.HINT_GROUPS_TRIGGERED_FRAC] == 0.0 and first[M.HINT_RESPONSES_FRAC] == 0.0
    assert M.HINT_ACCURACY not in first
    second = tr.step(2)
    assert len(tr.backend.calls) == 3 and second[M.HINT_GROUPS_HINTED_FRAC] == 0.5  # from step 2 on


def test_an_intractable_group_stays_all_wrong():
    tr, seen = _loop("scaf_grpo", ladders=[[(), (8,), (), (8,)], [()] * 4])
    metrics = tr.step(1)
    assert [d.used for d in tr.draws] == [False] and seen[0][1][:4] == [0.0] * 4
    assert metrics[M.HINT_GROUPS_TRIGGERED_FRAC] == 0.5 and metrics[M.HINT_GROUPS_HINTED_FRAC] == 0.0
    assert metrics[M.HINT_ACCURACY] == 0.0 and M.HINT_RELIANCE not in metrics


def test_hinted_group_replaces_the_whole_group_when_the_hinted_group_is_mixed():
    tr, seen = _loop("hinted_group", ladders=[[(), (9,), (), (9,)], [()] * 4])
    metrics = tr.step(1)
    assert tr.backend.calls[1] == ["0:0", "0:9", "0:2", "0:9"]  # samples without a hint keep their own prompt
    ids, advantages = seen[0]
    a = 0.5 / (math.sqrt(4 / 3 * 0.25) + 1e-6)  # 2 correct of 4: ±0.5 over the Bessel std 0.577
    assert advantages[:4] == pytest.approx([-a, a, -a, a])
    assert [ids[j, 1].item() for j in range(4)] == [20, 29, 22, 29]
    assert metrics[M.HINT_RESPONSES_FRAC] == 0.5 and metrics[M.HINT_GROUPS_HINTED_FRAC] == 0.5
    assert [d.reliance is not None for d in tr.draws] == [False, True, False, True]  # the hinted correct ones only
    tr, seen = _loop("hinted_group", ladders=[[(9,)] * 4, [()] * 4])  # all correct under the hint: not kept
    metrics = tr.step(1)
    assert seen[0][1][:4] == [0.0] * 4 and metrics[M.HINT_GROUPS_HINTED_FRAC] == 0.0


def test_hint_reliance_is_hills_under_the_policy_that_sampled():
    tr, _ = _loop("scaf_grpo")
    everything, kept, metrics = tr.collect(1)
    (d9,) = [d for d in tr.draws if d.used]
    without = tr._score([[3, 20 + d9.slot]], [d9.response_ids])[0]
    with_hint = tr._score([[3, 29]], [d9.response_ids])[0]
    assert metrics[M.HINT_RELIANCE] == pytest.approx(np.mean(without) - np.mean(with_hint))
    assert metrics[M.HINT_RELIANCE] != 0.0  # the two prompts differ, so do the log-probabilities
    assert kept.hinted.count("0:9") == 1 and everything.hint_prompts == []


def test_a_task_without_hints_is_refused_at_the_trainer():
    rollout = RolloutConfig(prompts_per_step=1, group_size=2, max_new_tokens=4, hint="scaf_grpo")
    settings = TrainerSettings(ObjectiveSettings.preset("grpo"), rollout, TrainConfig(steps=1, device="cpu"), 0)
    with pytest.raises(ValueError, match="rollout.hint: scaf_grpo adds a task's hints .* task fake gives none"):
        Trainer(FakeLM(), TableTask({"p0": [0.0, 0.0]}), FakeBackend(), 0, settings)


# ---- the run config and TRL ------------------------------------------------------------------------------------------
def test_the_run_config_takes_hints_on_the_toy_and_refuses_them_elsewhere():
    from harness.config.errors import ConfigError
    from harness.config.run_config import LATER_FIELDS, load_run_config
    from harness.config.trl_args import TABLE, trl_problems

    cfg = load_run_config(TOY_RUN, ["rollout.hint=scaf_grpo", "rollout.hint_after_steps=18"])
    assert (cfg.rollout.hint, cfg.rollout.hint_after_steps) == ("scaf_grpo", 18)
    assert "rollout.hint: scaf_grpo (TRL trains on the group it sampled" in "; ".join(
        trl_problems(cfg.objective, cfg.rollout, cfg.train)
    )
    assert {"rollout.hint", "rollout.hint_after_steps"} <= set(TABLE)
    plain = load_run_config(TOY_RUN, [])
    assert not {"hint", "hint_after_steps"} & set(plain.identity()["rollout"])  # the job ids stay as published
    assert (LATER_FIELDS["rollout.hint"], LATER_FIELDS["rollout.hint_after_steps"]) == (None, 0)
    assert cfg.arm != plain.arm
    for overrides, message in (
        (["rollout.hint_after_steps=5"], "rollout.hint_after_steps: 5 delays hints, but rollout.hint is null"),
        (["rollout.hint=scaf_grpo", "task.toy_addition.hide_prob=0"], "task.toy_addition.hide_prob is 0"),
        (["rollout.hint=hinted_group", "rollout.hint_after_steps=120"], "exempts every one of the 120 steps"),
        (["rollout.hint=scaf", "train.steps=3"], "rollout.hint"),
        (["rollout.hint=scaf_grpo", "objective.preset=spo", "objective.spo_init_samples=0"], "per-prompt tracker"),
    ):
        with pytest.raises(ConfigError, match=message):
            load_run_config(TOY_RUN, overrides)
