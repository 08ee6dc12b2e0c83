"""The cosine length-scaling reward (objective.length_reward: cosine; arXiv 2502.03373, TRL's get_cosine_scaled_reward):
R = r_L + ½(r_0 − r_L)(1 + cos(π·min(T/L_max, 1))) with the correct or the wrong pair, r_e for a truncated response when
set. By hand, as the reward the loop shapes (sampled and greedy responses), its settings, the job id and TRL's refusal.
benchmarks/cosine_reward_vs_trl.py compares it with TRL's own function."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from fake_loop import FakeBackend, FakeLM, TableTask, record_updates
from test_remax import RecordingBackend, SharedPromptTask

from harness.config.errors import ConfigError
from harness.config.run_config import LATER_FIELDS, load_run_config
from harness.config.trl_args import trl_problems
from trainer import metric_names as M
from trainer.config import RolloutConfig, TrainConfig
from trainer.loop import Trainer, TrainerSettings
from trainer.objective import LENGTH_REWARDS, ObjectiveSettings, compute_advantages, cosine_scaled_reward, shape_rewards

TOY_RUN = Path(__file__).resolve().parents[1] / "ablations" / "toy_run.yaml"
PAPER = {"cosine_correct": (2.0, 1.0), "cosine_wrong": (-10.0, 0.0)}  # the paper's §4.2 run (its r_e is −10)
TRL = {"cosine_correct": (1.0, 0.5), "cosine_wrong": (-1.0, -0.5)}  # TRL's defaults


def _cosine(lengths, correct, truncated=None, max_len=100, exceed=None, values=PAPER) -> list[float]:
    n = len(lengths)
    return cosine_scaled_reward(
        torch.tensor(correct),
        torch.tensor(lengths),
        torch.tensor(truncated or [False] * n),
        max_len,
        values["cosine_correct"],
        values["cosine_wrong"],
        exceed,
    ).tolist()


# ---- by hand ---------------------------------------------------------------------------------------------------------
def test_by_hand_at_the_ends_the_middle_and_a_quarter():
    """L_max 100: length 0 gives r_0, 100 gives r_L, 50 the mean of the two; at 25, cos(π/4) = √2/2."""
    half = math.sqrt(0.5)
    correct = _cosine([0, 100, 50, 25], [True] * 4)
    assert correct == pytest.approx([2.0, 1.0, 1.5, 1.0 + 0.5 * (1 + half)], abs=1e-15)
    wrong = _cosine([0, 100, 50, 25], [False] * 4)
    assert wrong == pytest.approx([-10.0, 0.0, -5.0, -5.0 * (1 + half)], abs=1e-14)
    assert correct[0] > correct[3] > correct[2] > correct[1]  # the shorter correct response earns more
    assert wrong[0] < wrong[3] < wrong[2] < wrong[1]  # the shorter wrong one is penalised more


def test_trls_docstring_example_and_the_cap_at_the_budget():
    """TRL's example: L_max 100, 50 tokens, defaults → 0.75 (correct) and −0.75 (wrong). Past L_max the ratio is capped
    at 1: cos is periodic, and 150 tokens would otherwise earn the reward of 50."""
    assert _cosine([50, 50], [True, False], values=TRL) == pytest.approx([0.75, -0.75], abs=1e-15)
    assert _cosine([150, 150, 100], [True, False, True], values=TRL) == [0.5, -0.5, 0.5]


def test_the_exceed_value_replaces_a_truncated_responses_reward_and_only_when_set():
    lengths, correct, cut = [100, 100, 40], [False, False, True], [True, False, False]
    assert _cosine(lengths, correct, cut, exceed=-10.0)[0] == -10.0
    assert _cosine(lengths, correct, cut, exceed=-10.0)[1:] == _cosine(lengths, correct, cut)[1:]
    assert _cosine(lengths, correct, cut)[0] == 0.0  # none set: TRL's, a wrong response at L_max (r_L^w = 0)


def test_a_nonpositive_budget_is_an_error():
    with pytest.raises(ValueError, match="max_len must be > 0"):
        _cosine([1], [True], max_len=0)


def test_shape_rewards_replaces_the_task_reward_and_adds_the_overlong_punishment():
    """The task's reward (a partial 0.3 here) gives way to the cosine of its correctness; DAPO's punishment is added."""
    s = ObjectiveSettings.preset("grpo", max_len=100, length_reward="cosine", **PAPER)
    task, lengths = torch.tensor([0.3, 1.0], dtype=torch.float64), torch.tensor([0, 100])
    correct, cut = torch.tensor([False, True]), torch.tensor([False, False])
    assert shape_rewards(task, lengths, s, correct, cut).tolist() == [-10.0, 1.0]
    punished = s.model_copy(update={"overlong_penalty": True, "overlong_cache_len": 20})
    assert shape_rewards(task, lengths, punished, correct, cut).tolist() == [-10.0, 1.0 - 1.0]  # 100 = L_max: −20/20
    assert shape_rewards(task, lengths, ObjectiveSettings.preset("grpo")).tolist() == [0.3, 1.0]  # off: the task's
    with pytest.raises(ValueError, match="needs each response's correctness and truncation"):
        shape_rewards(task, lengths, s)
    assert LENGTH_REWARDS.names() == ("cosine",)


# ---- the loop --------------------------------------------------------------------------------------------------------
class CutLastBackend(FakeBackend):
    """FakeBackend whose sample 3 of each group is cut off at the budget (no end-of-sequence)."""

    def generate(self, prompts, params, seed):
        out = super().generate(prompts, params, seed)
        out.truncated[:] = torch.tensor([p.endswith(":3") for p in prompts])
        return out


def _loop(task, objective, backend, group_size=4):
    settings = TrainerSettings(
        objective,
        RolloutConfig(prompts_per_step=2, group_size=group_size, max_new_tokens=8, temperature=0.7),
        TrainConfig(steps=1, device="cpu", reference_kl=False),
        0,
    )
    tr = Trainer(FakeLM(), task, backend, 0, settings)
    return tr, record_updates(tr)


def test_the_loop_trains_on_the_cosine_rewards_of_its_responses():
    """Sample j answers j + 1 tokens (L_max 8); p0's samples 0 and 3 are right, p1's 1-3; sample 3 is cut off, so it is
    wrong whatever its grade and gets r_e = −2. The advantage is GRPO's of these rewards, and train/reward_mean is
    their mean."""
    s = ObjectiveSettings.preset("grpo", max_len=8, length_reward="cosine", cosine_exceed=-2.0, **TRL)
    task = TableTask({"p0": [1.0, 0.0, 0.0, 1.0], "p1": [0.0, 1.0, 1.0, 1.0]})
    tr, seen = _loop(task, s, CutLastBackend())
    metrics = tr.step(1)

    def cos(t: int, r0: float, rl: float) -> float:
        return rl + 0.5 * (r0 - rl) * (1 + math.cos(math.pi * t / 8))

    right, wrong = (lambda t: cos(t, 1.0, 0.5)), (lambda t: cos(t, -1.0, -0.5))
    rewards = [[right(1), wrong(2), wrong(3), -2.0], [wrong(1), right(2), right(3), -2.0]]
    expected = compute_advantages(torch.tensor(rewards, dtype=torch.float64), s).flatten().tolist()
    assert seen[0] == pytest.approx(expected, abs=1e-6)
    assert metrics[M.REWARD_MEAN] == pytest.approx(sum(map(sum, rewards)) / 8, abs=1e-12)
    assert metrics[M.ACCURACY] == 3 / 8  # the task's verdicts, the cut-off ones wrong
    shaped = tr.rollout_table()["shaped_reward"].tolist()
    assert shaped == pytest.approx([r for row in rewards for r in row], abs=1e-12)


def test_remaxs_greedy_baseline_is_shaped_by_the_cosine_reward_too():
    """Every sample of a group sees one prompt (one token each, L_max 8); the greedy response is graded as sample 0:
    p0's right, p1's wrong. Its cosine reward is the baseline."""
    s = ObjectiveSettings.preset("remax", max_len=8, length_reward="cosine", **TRL)
    task = SharedPromptTask({"p0": [1, 0, 0, 1], "p1": [0, 1, 1, 1]}, [("0:0",) * 4, ("1:0",) * 4])
    tr, seen = _loop(task, s, RecordingBackend())
    tr.step(1)
    right, wrong = 0.5 + 0.25 * (1 + math.cos(math.pi / 8)), -0.5 - 0.25 * (1 + math.cos(math.pi / 8))
    base = [right, wrong]
    expected = [(right if c else wrong) - base[g] for g, row in enumerate([[1, 0, 0, 1], [0, 1, 1, 1]]) for c in row]
    assert seen[0] == pytest.approx(expected, abs=1e-6)


# ---- settings, job ids, TRL ------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("over", "message"),
    [
        ({"length_reward": "cosine"}, "cosine_correct is set exactly when length_reward is 'cosine'"),
        ({"cosine_wrong": (-1.0, 0.0)}, "cosine_wrong is set exactly when length_reward is 'cosine'"),
        ({"cosine_exceed": -1.0}, "cosine_exceed needs length_reward 'cosine'"),
        ({"length_reward": "linear", **TRL}, "unknown length reward 'linear'; known: cosine"),
    ],
)
def test_bad_settings_are_one_line_errors(over, message):
    with pytest.raises(ValueError, match=message):
        ObjectiveSettings.preset("grpo", max_len=8, **over)


def test_the_values_must_stay_within_the_rewards_the_advantage_reads():
    """ngrpo's reward_range [0, 1] and SPO's success rates refuse TRL's defaults (−1 …); values inside them pass; GDPO
    would not read the reward at all; and a schedule needs its L_max."""
    inside = {"cosine_correct": (1.0, 0.5), "cosine_wrong": (0.0, 0.25)}
    with pytest.raises(ValueError, match=r"outside \[0, 1\] \(-1\), which advantage ngrpo reads as reward_range"):
        ObjectiveSettings.preset("ngrpo", max_len=8, length_reward="cosine", **TRL)
    ObjectiveSettings.preset("ngrpo", max_len=8, length_reward="cosine", **inside)
    with pytest.raises(ValueError, match=r"\(-2\), which advantage spo reads as its tracker's success rates"):
        ObjectiveSettings.preset("spo", max_len=8, length_reward="cosine", cosine_exceed=-2.0, **inside)
    with pytest.raises(ValueError, match="under advantage gdpo would go unread"):
        ObjectiveSettings.preset(
            "grpo", advantage="gdpo", reward_components=("reward",), max_len=8, length_reward="cosine", **TRL
        )
    with pytest.raises(ValueError, match="length_reward cosine needs max_len"):
        ObjectiveSettings.preset("grpo", length_reward="cosine", **TRL)


def test_a_run_config_takes_it_a_plain_jobs_id_does_not_change_and_trl_refuses_it():
    sets = ["objective.length_reward=cosine", "objective.cosine_correct=[2, 1]", "objective.cosine_wrong=[-10, 0]"]
    cfg = load_run_config(TOY_RUN, [*sets, "objective.cosine_exceed=-10"])
    o = cfg.objective
    assert (o.max_len, o.cosine_correct, o.cosine_wrong, o.cosine_exceed) == (128, (2.0, 1.0), (-10.0, 0.0), -10.0)
    plain = load_run_config(TOY_RUN, [])
    assert not {"length_reward", "cosine_correct", "cosine_wrong", "cosine_exceed"} & set(plain.identity()["objective"])
    assert cfg.config_hash != plain.config_hash
    assert all(LATER_FIELDS[f"objective.{k}"] is None for k in ("length_reward", "cosine_correct", "cosine_exceed"))
    problems = trl_problems(o, cfg.rollout, cfg.train)
    assert any(p.startswith("objective.length_reward: cosine (TRL's get_cosine_scaled_reward grades") for p in problems)
    with pytest.raises(ConfigError, match="objective: cosine_correct is set exactly when"):
        load_run_config(TOY_RUN, ["objective.length_reward=cosine"])
