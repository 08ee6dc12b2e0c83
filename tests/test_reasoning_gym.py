"""reasoning-gym's generators as a task: the pool, the scoring, what is refused, and a run on a toy base model built
for it. Each test that needs reasoning-gym itself skips where the `reasoning-gym` extra is not installed; the checks
of what crosses from the generator run without it, on a stand-in helper."""

from __future__ import annotations

import numpy as np
import pytest

from harness.config.run_config import RunConfig
from harness.config.yaml_io import validate
from harness.engine.preflight import reasoning_gym_problem
from trainer.rewards.bounded import Reply
from trainer.tasks.base import Group
from trainer.tasks.reasoning_gym import ReasoningGymError, ReasoningGymTask, close_names, load_pool
from trainer.tasks.reasoning_gym_config import ReasoningGymConfig

SMALL = ReasoningGymConfig(generator="spell_backward", config={"min_word_len": 3, "max_word_len": 5}, size=200)


def _needs_the_extra() -> None:
    pytest.importorskip("reasoning_gym")


@pytest.fixture(scope="module")
def spell():
    _needs_the_extra()
    task = ReasoningGymTask(SMALL)
    yield task
    task.close()


def test_the_pool_is_the_generator_s_and_its_seed_fixes_it(spell):
    assert len(spell.prompts) == len(spell.answers) == 200
    assert spell.prompts[0].startswith("Spell this word backward") and spell.prompts[0].endswith(spell.answers[0][::-1])
    other = ReasoningGymTask(SMALL.model_copy(update={"seed": 1}))
    again = ReasoningGymTask(SMALL)
    other.close(), again.close()
    assert again.prompts == spell.prompts and other.prompts != spell.prompts


def test_groups_are_drawn_from_the_run_s_generator_only(spell):
    a = spell.sample_groups(np.random.default_rng(3), 4, 2)
    b = spell.sample_groups(np.random.default_rng(3), 4, 2)
    assert a == b and len({g.problem_id for g in a}) == 4
    assert all(g.prompts[0] == g.prompts[1] and g.problem_id.startswith("spell_backward/0/") for g in a)


def test_the_generator_s_score_is_the_reward_and_full_credit_is_correct(spell):
    group = spell.sample_groups(np.random.default_rng(0), 1, 1)[0]
    right = spell.grade(group, 0, f" {group.answer}\n")
    assert (right.reward, right.correct, right.info) == (1.0, True, {"score_error": 0})
    partial = spell.grade(group, 0, group.answer[:-1] + ("z" if group.answer[-1] != "z" else "y"))
    assert 0.0 < partial.reward < 1.0 and not partial.correct  # spell_backward's credit per letter
    assert spell.grade(group, 0, "").reward == 0.0
    assert spell.step_metrics([group], [[right, partial]], [[4, 4]]) == {"task/score_errors": 0.0}


def test_an_unknown_generator_is_one_line_listing_close_names():
    _needs_the_extra()
    with pytest.raises(ReasoningGymError) as error:
        ReasoningGymTask(ReasoningGymConfig(generator="chain_sums"))
    assert str(error.value) == (
        "task.reasoning_gym.generator: no generator 'chain_sums' in reasoning-gym; close names: chain_sum, "
        "decimal_chain_sum"
    )
    assert "\n" not in str(error.value)


def test_settings_the_generator_refuses_are_one_line_naming_the_setting():
    _needs_the_extra()
    with pytest.raises(ReasoningGymError, match=r"^task\.reasoning_gym\.config: chain_sum refused its settings \("):
        ReasoningGymTask(ReasoningGymConfig(generator="chain_sum", config={"min_terms": 5, "max_terms": 2}, size=5))


def test_close_names_says_how_many_there_are_when_none_is_close():
    assert close_names("zzz", ["chain_sum", "spell_backward"]) == (
        "generator: no generator 'zzz' in reasoning-gym; none is close among its 2 generators"
    )


class _Stand_in:
    """A helper that answers every call with one reply."""

    def __init__(self, reply: Reply):
        self.reply = reply

    def call(self, request, budget_s):
        return self.reply

    def close(self):
        pass


def _task_with(reply: Reply) -> ReasoningGymTask:
    task = ReasoningGymTask.__new__(ReasoningGymTask)
    task.settings, task.service, task._warned = SMALL, _Stand_in(reply), False
    task.prompts, task.answers = ["p"], ["a"]
    return task


GROUP = Group("g", "a", ("p",), ({"index": 0},))


@pytest.mark.parametrize("score", [1.5, -0.1, "NaN", None, True])
def test_a_score_outside_0_1_fails_the_run_in_one_line(score):
    with pytest.raises(ReasoningGymError, match=r"^task\.reasoning_gym: spell_backward's score_answer returned .*"):
        _task_with(Reply(value=score)).grade(GROUP, 0, "a")


def test_a_scorer_that_raises_grades_wrong_and_is_counted_and_a_timeout_is_a_timeout():
    raised = _task_with(Reply(error="ValueError: bad")).grade(GROUP, 0, "a")
    assert (raised.reward, raised.correct, raised.info["score_error"], raised.timed_out) == (0.0, False, 1, False)
    late = _task_with(Reply(timed_out=True)).grade(GROUP, 0, "a")
    assert (late.reward, late.timed_out) == (0.0, True)
    assert _task_with(Reply(value=1.0)).grade(GROUP, 0, "a" * 30_000).reward == 0.0  # unscored


@pytest.mark.parametrize("pool", [[["q", 3]], [["q"]], [["", "a"]], [["q" * 20_001, "a"]], "pool", [["q", "a"]] * 2])
def test_a_malformed_pool_is_refused_in_one_line(pool):
    settings = SMALL.model_copy(update={"size": 1})
    with pytest.raises(ReasoningGymError, match=r"^task\.reasoning_gym: "):
        load_pool(_Stand_in(Reply(value=pool)), settings)


def test_seed_and_size_are_the_task_s_own_settings():
    with pytest.raises(ValueError, match="seed: give it as task.reasoning_gym.seed"):
        ReasoningGymConfig(generator="chain_sum", config={"seed": 3})


def _run(task: dict, **model) -> RunConfig:
    data = {"objective": {"preset": "grpo"}, "task": {"name": "reasoning_gym", "reasoning_gym": task}}
    return validate(RunConfig, {**data, "model": {"source": "toy", **model}}, "run.yaml")


def test_preflight_names_the_character_the_addition_toy_cannot_read_and_a_text_build_reads_it():
    _needs_the_extra()
    task = {"generator": "spell_backward", "size": 20}
    problem = reasoning_gym_problem(_run(task))
    assert problem.startswith("task.reasoning_gym: the prompt of problem 0 has 'S', which the toy model cannot read")
    assert reasoning_gym_problem(_run(task, toy={"text": {}})) is None
    long = reasoning_gym_problem(_run(task, toy={"text": {}, "max_position_embeddings": 64}))
    assert "exceed the toy model's 64 positions" in long


def test_a_run_builds_its_base_model_for_the_task_and_trains(tmp_path):
    _needs_the_extra()
    from harness.engine.training import run_training

    config = {
        "objective": {"preset": "grpo"},
        "task": {"name": "reasoning_gym", "reasoning_gym": SMALL.model_dump()},
        "model": {
            "source": "toy",
            "cache_dir": str(tmp_path / "cache"),
            "toy": {"text": {}, "sft_steps": 3, "eval_samples": 8, "min_clean_accuracy": 0.0},
        },
        "rollout": {"prompts_per_step": 2, "group_size": 2, "max_new_tokens": 8},
        "train": {"steps": 2, "threads": 1},
        "tracking": {"uri": f"sqlite:///{tmp_path / 'mlflow.db'}"},
    }
    cfg = validate(RunConfig, config, "run.yaml")
    result = run_training(cfg, progress=False)
    from mlflow.tracking import MlflowClient

    run = MlflowClient(result.tracking_uri).get_run(result.run_id)
    assert run.info.status == "FINISHED" and "task/score_errors" in run.data.metrics
    assert len([p for p in (tmp_path / "cache").iterdir() if p.is_dir()]) == 1
