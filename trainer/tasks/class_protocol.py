"""A task class's method calls as JSON, both ways: the helper runs the user's class, the job calls it.

`sample_groups` takes the job's generator's state and gives back the state it left, so the class draws from the
job's `rng` exactly as it would in the job's process and a seed still fixes the run.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from trainer.rewards.grade import Grade, RewardComponent
from trainer.tasks.base import Group


def group_out(group: Group) -> dict[str, Any]:
    return {
        "problem_id": group.problem_id,
        "answer": group.answer,
        "prompts": list(group.prompts),
        "meta": [dict(m) for m in group.meta],
    }


def group_in(data: Mapping[str, Any]) -> Group:
    return Group(data["problem_id"], data["answer"], tuple(data["prompts"]), tuple(data["meta"]))


def grade_out(grade: Grade) -> dict[str, Any]:
    return {
        "reward": grade.reward,
        "correct": grade.correct,
        "info": grade.info,
        "timed_out": grade.timed_out,
        "components": [[str(c.name), float(c.value)] for c in grade.components],
    }


def grade_in(data: Mapping[str, Any]) -> Grade:
    components = tuple(RewardComponent(str(name), float(value)) for name, value in data.get("components", ()))
    return Grade(float(data["reward"]), bool(data["correct"]), dict(data["info"]), bool(data["timed_out"]), components)


def generator(state: Mapping[str, Any]) -> np.random.Generator:
    """A generator in `state` (a `bit_generator.state`)."""
    bits = getattr(np.random, state["bit_generator"])()
    bits.state = state
    return np.random.Generator(bits)


def answer(task: Any, method: str, arguments: Mapping[str, Any]) -> Any:
    """Call `method` of the user's `task` with JSON `arguments`; its result as JSON. `TypeError` (one line) for a
    result that is not what trainer.tasks.base.Task says."""
    if method == "sample_groups":
        rng = generator(arguments["rng"])
        groups = task.sample_groups(rng, arguments["num_groups"], arguments["group_size"])
        if not isinstance(groups, list) or not all(isinstance(g, Group) for g in groups):
            raise TypeError("sample_groups must return a list of trainer.tasks.base.Group")
        return {"groups": [group_out(g) for g in groups], "rng": rng.bit_generator.state}
    if method == "grade":
        grade = task.grade(group_in(arguments["group"]), arguments["index"], arguments["completion"])
        if not isinstance(grade, Grade):
            raise TypeError(f"grade must return a trainer.rewards.grade.Grade, not {type(grade).__name__}")
        return grade_out(grade)
    if method == "step_metrics":
        groups = [group_in(g) for g in arguments["groups"]]
        grades = [[grade_in(g) for g in row] for row in arguments["grades"]]
        metrics = task.step_metrics(groups, grades, arguments["lengths"])
        if not isinstance(metrics, Mapping):
            raise TypeError(
                f"step_metrics must return a mapping of metric names to numbers, not {type(metrics).__name__}"
            )
        return {str(k): float(v) for k, v in metrics.items()}
    raise ValueError(f"no method {method!r}")
