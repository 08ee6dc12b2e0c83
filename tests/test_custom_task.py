"""A task of the user's: rows from a file, reward functions by import path, each call bounded, errors loud."""

from __future__ import annotations

import json
import re
from pathlib import Path

import mlflow
import numpy as np
import pytest

from trainer.tasks.base import Group
from trainer.tasks.custom import CustomTask, RewardFunctionError, build_task, normalise, render, template_slots
from trainer.tasks.custom_config import CustomTaskConfig

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "custom_task"

REWARDS = """
import time

def as_float(completion, reference, prompt):
    return 1.0 if completion == reference["answer"] else 0.25

def as_pair(completion, reference, prompt):
    return 0.5, completion == reference["answer"]

def as_mapping(completion, reference, prompt):
    return {"reward": 2.0, "correct": False, "chars": len(completion), "ok": True}

def as_bool(completion, reference, prompt):
    return completion == reference["answer"]

def sleeps(completion, reference, prompt):
    if reference["slow"]:
        time.sleep(30)
    return 1.0

def spins(completion, reference, prompt):
    while reference["slow"]:
        pass
    return 1.0

def raises(completion, reference, prompt):
    if reference["slow"]:
        raise KeyError("no such test case")
    return 1.0

def wrong_signature(text):
    return 1.0

def wrong_return(completion, reference, prompt):
    return "1.0"

def nan_reward(completion, reference, prompt):
    return float("nan")
"""


@pytest.fixture
def folder(tmp_path) -> Path:
    rows = [{"problem": "1+1=", "answer": "2", "slow": False}, {"problem": "2+2=", "answer": "4", "slow": True}]
    (tmp_path / "data.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "rewards.py").write_text(REWARDS)
    return tmp_path


def task(folder: Path, *functions: str | tuple[str, float], **settings) -> CustomTask:
    reward = [
        {"function": f"rewards.py:{f}"} if isinstance(f, str) else {"function": f"rewards.py:{f[0]}", "weight": f[1]}
        for f in functions
    ]
    return CustomTask(
        CustomTaskConfig.model_validate({"data": "data.jsonl", "reward": reward, "root": str(folder), **settings})
    )


def grade(t: CustomTask, row: int, completion: str):
    group = Group(problem_id=t.ids[row], answer=t.rows[row]["answer"], prompts=(t.prompts[row],), meta=({"row": row},))
    return t.grade(group, 0, completion)


def test_each_return_form_grades_as_documented(folder):
    t = task(folder, "as_float", "as_pair", "as_mapping", "as_bool")
    g = grade(t, 0, "2")
    assert g.reward == pytest.approx(1.0 + 0.5 + 2.0 + 1.0)
    assert g.correct is True  # the first function: no `correct`, reward 1.0 >= the threshold 1.0
    assert g.info == {
        "chars": 1.0,
        "ok": 1.0,
        "reward_as_float": 1.0,
        "reward_as_pair": 0.5,
        "reward_as_mapping": 2.0,
        "reward_as_bool": 1.0,
    }
    assert grade(t, 0, "3").correct is False  # as_float gives 0.25 < 1.0
    assert grade(task(folder, "as_pair"), 0, "2").correct is True  # the pair's own verdict, whatever the reward
    assert grade(task(folder, "as_mapping"), 0, "2").correct is False
    assert grade(task(folder, "as_float", correct_threshold=0.2), 0, "3").correct is True
    weighted = task(folder, ("as_float", 0.5), ("as_mapping", -1.0))
    assert grade(weighted, 0, "2").reward == pytest.approx(0.5 - 2.0)


def test_normalise_refuses_what_is_not_a_reward():
    assert normalise("f", np.float32(0.5)) == {"reward": 0.5, "correct": None, "extra": {}}
    assert normalise("f", (1, np.bool_(True)))["correct"] is True
    for bad, said in [
        ("1.0", "returned str"),
        ((1.0, 2.0, 3.0), "tuple of 3"),
        ((1.0, "yes"), "correct = str"),
        ({"score": 1.0}, "without 'reward'"),
        ({"reward": 1.0, "bad name": 2}, "'bad name'"),
        ({"reward": 1.0, "row": 2}, "'row'"),
        ({"reward": 1.0, "x": "2"}, "x = str"),
        (float("inf"), "finite"),
        (None, "returned NoneType"),
    ]:
        with pytest.raises(RewardFunctionError, match=said):
            normalise("f", bad)


def test_a_call_past_the_bound_grades_wrong_and_says_so(folder):
    """The call's child is killed at its bound by the helper, which stays: a busy loop once it has used its CPU time
    (0.01 s here: the budget less the reply's slack, at least that), a stall after WALL_FACTOR times that in
    wall-clock time. Had the helper not cut the call, the caller would have replaced the helper at its own ceiling
    (WALL_FACTOR x the budget + 5 s): the helper's pid tells the two apart, with no clock in the test."""
    for function in ("sleeps", "spins"):  # a stall (wall-clock bound) and a busy loop (CPU bound)
        t = task(folder, function, budget_s=0.05)
        grade(t, 0, "2")  # warm
        helper = t.service._process.pid
        slow = grade(t, 1, "4")
        assert slow.timed_out and slow.reward == 0.0 and slow.correct is False
        assert t.service._process is not None and t.service._process.pid == helper
        fine = grade(t, 0, "2")  # a fresh child answers the next call
        assert fine.reward == 1.0 and not fine.timed_out


def test_an_exception_is_one_line_naming_the_function_and_the_row_with_the_traceback_after(folder):
    t = task(folder, "raises")
    assert grade(t, 0, "2").reward == 1.0
    with pytest.raises(RewardFunctionError) as info:
        grade(t, 1, "4")
    line = str(info.value)
    assert "\n" not in line and "rewards.py:raises" in line and "row 1" in line and "KeyError" in line, line
    assert "no such test case" in "".join(info.value.__notes__) and "Traceback" in "".join(info.value.__notes__)


@pytest.mark.parametrize(
    "function, said",
    [
        ("wrong_signature", "cannot be called as f(completion, reference, prompt)"),
        ("wrong_return", "returned str"),
        ("nan_reward", "finite"),
    ],
)
def test_a_wrong_signature_or_return_fails_the_first_call(folder, function, said):
    with pytest.raises(RewardFunctionError, match=re.escape(said)) as info:
        grade(task(folder, function), 0, "2")
    assert "\n" not in str(info.value) and f"rewards.py:{function}" in str(info.value)


def test_templates_fill_columns_and_keep_escaped_braces():
    assert template_slots("Q: {problem} {{x}} -> {answer}") == ["problem", "answer"]
    assert render("Q: {problem} {{x}}", {"problem": "1+1="}) == "Q: 1+1= {x}"
    assert render("{a.__class__}", {"a.__class__": "plain"}) == "plain"  # a column name, never an attribute
    with pytest.raises(ValueError, match="lone"):
        template_slots("Q: {problem")


def test_task_class_is_built_with_its_options(folder):
    (folder / "my_task.py").write_text(CLASS_TASK)
    settings = CustomTaskConfig.model_validate(
        {"class": "my_task.py:Echo", "options": {"answer": "7"}, "root": str(folder)}
    )
    t = build_task(settings)
    groups = t.sample_groups(np.random.default_rng(0), 2, 3)
    assert [g.prompts for g in groups] == [("1+6=", "2+5=", "3+4=")] * 2
    assert t.grade(groups[0], 1, "7").correct and not t.grade(groups[0], 1, "8").correct
    assert t.grade(groups[0], 1, "7").component("short") == 1.0  # components cross from the class's process
    assert t.grade(groups[0], 1, "7777").component("short") == 0.0


CLASS_TASK = '''
from trainer.rewards.grade import Grade, RewardComponent
from trainer.tasks.base import Group


class Echo:
    """Every sample of a group sees its own sum with the same answer (as the toy's noisy copies do)."""

    name = "echo"

    def __init__(self, answer):
        self.answer = answer

    def sample_groups(self, rng, num_groups, group_size):
        n = int(self.answer)
        prompts = tuple(f"{i + 1}+{n - i - 1}=" for i in range(group_size))
        return [Group(problem_id=f"g{k}", answer=self.answer, prompts=prompts) for k in range(num_groups)]

    def grade(self, group, index, completion):
        right = completion.split(";")[0].lstrip(">").endswith(group.answer)
        short = RewardComponent("short", float(len(completion) < 3))  # a reward component (GDPO's)
        return Grade(reward=float(right), correct=right, info={"echo": 1.0}, components=(short,))

    def step_metrics(self, groups, grades, lengths):
        return {"task/echo_groups": float(len(groups))}
'''


# ---- through the real command, on the toy model ---------------------------------------------------
def _harness(*args: str, cwd: Path) -> int:
    """`harness` in this process, from `cwd` (relative paths in the run file are read from the file's folder)."""
    from harness.cli import main

    return main(list(args))


def _run_file(folder: Path, task_yaml: str) -> Path:
    path = folder / "run.yaml"
    path.write_text(
        "name: custom\nobjective: {preset: grpo}\n"
        + task_yaml
        + "rollout: {prompts_per_step: 4, group_size: 4, max_new_tokens: 48}\ntrain: {steps: 2, threads: 1}\n"
    )
    return path


def _only_run(uri: str):
    client = mlflow.MlflowClient(uri)
    (exp,) = [e for e in client.search_experiments() if e.name != "Default"]
    (run,) = client.search_runs([exp.experiment_id])
    return client, run


def test_a_run_logs_reward_accuracy_length_by_correctness_and_the_functions_numbers(folder, tiny_run_overrides):
    (folder / "score.py").write_text(
        "def score(completion, reference, prompt):\n"
        "    right = reference['sum'] in completion\n"
        "    return {'reward': float(right), 'correct': right, 'chars': float(len(completion))}\n"
    )
    rows = [{"q": f"{a}+{b}=", "sum": str(a + b)} for a in range(10) for b in range(10)]
    (folder / "sums.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    task_yaml = (
        "task:\n  name: custom\n  custom:\n    data: sums.jsonl\n    fields: {question: q, answer: sum}\n"
        "    reward: score.py:score\n"
    )
    uri = f"sqlite:///{folder / 'mlflow.db'}"
    done = _harness(
        "run", str(_run_file(folder, task_yaml)), *_sets(tiny_run_overrides), "--tracking-uri", uri, cwd=folder
    )
    assert done == 0
    client, run = _only_run(uri)
    assert run.info.status == "FINISHED"
    keys = set(run.data.metrics)
    assert {"train/reward_mean", "train/accuracy", "task/chars", "train/grade_timeouts"} <= keys
    assert "train/length_correct_mean" in keys or "train/length_incorrect_mean" in keys
    assert "score.py:score" in json.dumps(run.data.params)  # the resolved config names the function


def test_a_slow_call_is_counted_in_grade_timeouts(folder, tiny_run_overrides):
    (folder / "slow.py").write_text(
        "import time\n\ndef score(completion, reference, prompt):\n    time.sleep(30)\n    return 1.0\n"
    )
    (folder / "sums.jsonl").write_text(json.dumps({"problem": "1+2=", "answer": "3"}) + "\n")
    task_yaml = (
        "task:\n  name: custom\n  custom:\n    data: sums.jsonl\n    reward: slow.py:score\n    budget_s: 0.05\n"
    )
    uri = f"sqlite:///{folder / 'mlflow.db'}"
    done = _harness(
        "run",
        str(_run_file(folder, task_yaml)),
        *_sets(tiny_run_overrides, steps=1),
        "--tracking-uri",
        uri,
        cwd=folder,
    )
    assert done == 0
    client, run = _only_run(uri)
    history = [m.value for m in client.get_metric_history(run.info.run_id, "train/grade_timeouts")]
    assert history == [16.0]  # every completion of the step (4 prompts x 4)
    assert [m.value for m in client.get_metric_history(run.info.run_id, "train/accuracy")] == [0.0]


def test_an_exception_fails_the_run_with_one_line_and_the_traceback_in_failure_txt(folder, tiny_run_overrides):
    (folder / "boom.py").write_text("def score(completion, reference, prompt):\n    return 1 / 0\n")
    (folder / "sums.jsonl").write_text(json.dumps({"problem": "1+2=", "answer": "3"}) + "\n")
    task_yaml = "task:\n  name: custom\n  custom:\n    data: sums.jsonl\n    reward: boom.py:score\n"
    uri = f"sqlite:///{folder / 'mlflow.db'}"
    done = _harness(
        "run",
        str(_run_file(folder, task_yaml)),
        *_sets(tiny_run_overrides, steps=1),
        "--tracking-uri",
        uri,
        cwd=folder,
    )
    assert done != 0
    client, run = _only_run(uri)
    assert run.info.status == "FAILED"
    reason = run.data.tags["failure_reason"]
    assert "\n" not in reason and "boom.py:score" in reason and "row 0" in reason and "ZeroDivisionError" in reason
    assert client.get_metric_history(run.info.run_id, "train/accuracy") == []  # it failed grading step 1
    failure = Path(client.download_artifacts(run.info.run_id, "failure.txt", str(folder))).read_text()
    assert "1 / 0" in failure


def test_a_class_task_trains_on_the_toy(folder, tiny_run_overrides):
    (folder / "my_task.py").write_text(CLASS_TASK)
    task_yaml = "task:\n  name: custom\n  custom:\n    class: my_task.py:Echo\n    options: {answer: '7'}\n"
    uri = f"sqlite:///{folder / 'mlflow.db'}"
    done = _harness(
        "run",
        str(_run_file(folder, task_yaml)),
        *_sets(tiny_run_overrides, steps=1),
        "--tracking-uri",
        uri,
        cwd=folder,
    )
    assert done == 0
    client, run = _only_run(uri)
    assert run.data.metrics["task/echo_groups"] == 4.0 and run.info.status == "FINISHED"


def _sets(overrides: list[str], steps: int | None = None) -> list[str]:
    """The tiny run's settings, less the toy task's (a custom task has none); `steps` replaces its step count."""
    kept = [o for o in overrides if not o.startswith("task.") and not (steps and o.startswith("train.steps="))]
    return [a for o in kept + ([f"train.steps={steps}"] if steps else []) for a in ("--set", o)]
