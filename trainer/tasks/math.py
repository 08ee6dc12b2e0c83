"""Math problems with verifiable answers: one prompt per group from a template, graded by math-verify."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from trainer.data.answers import find_answer
from trainer.data.records import Problem
from trainer.data.templates import ANSWER_TAG_TEMPLATES, TEMPLATES, render_prompt
from trainer.metric_names import task_metric
from trainer.rewards.grade import Grade
from trainer.rewards.math_verify import MAX_INFO_CHARS, grade_math, start_grader
from trainer.tasks.base import Group


class MathTask:
    """Groups of G identical prompts over `problems`; reward 1 iff the extracted final answer equals the gold.

    Extraction: the last `\\boxed{}` (or `####`); under the R1 template an `<answer>` tag first. A boxed
    answer is regraded alone as `\\boxed{answer}`, so only the last box counts (math-verify on the whole text
    would read all boxes as a set); the content of a tag without a box is passed to math-verify as it is.
    """

    def __init__(self, problems: Sequence[Problem], template: str = "qwen_math", name: str = "math"):
        if template not in TEMPLATES:
            raise ValueError(f"unknown template {template!r}; known: {sorted(TEMPLATES)}")
        if not problems:
            raise ValueError("MathTask needs at least one problem")
        self.problems = list(problems)
        self.template = template
        self.name = name
        self._answer_tags = template in ANSWER_TAG_TEMPLATES
        start_grader()  # sympy loads in the grader process while the caller gets on with its work

    def sample_groups(self, rng: np.random.Generator, num_groups: int, group_size: int) -> list[Group]:
        """`num_groups` problems drawn uniformly from `rng` (distinct within a call while there are enough)."""
        picks = rng.choice(len(self.problems), size=num_groups, replace=num_groups > len(self.problems))
        groups = []
        for i in picks:
            p = self.problems[int(i)]
            groups.append(
                Group(
                    problem_id=p.id, answer=p.answer, prompts=(render_prompt(self.template, p.question),) * group_size
                )
            )
        return groups

    def grade(self, group: Group, index: int, completion: str) -> Grade:
        """1.0 if the extracted answer math-verifies against `group.answer` within the grader's time budget
        (`timed_out` set otherwise); info: `extracted` (0/1), `source` (where the answer was found) and
        `answer` (its text, clipped)."""
        answer, source = find_answer(completion or "", answer_tags=self._answer_tags)
        if answer is None:
            return Grade(reward=0.0, correct=False, info={"extracted": 0, "source": source, "answer": ""})
        graded = grade_math(answer if source == "tag" else f"\\boxed{{{answer}}}", group.answer)
        return Grade(
            reward=graded.reward,
            correct=graded.correct,
            timed_out=graded.timed_out,
            info={"extracted": 1, "source": source, "answer": answer[:MAX_INFO_CHARS]},
        )

    def step_metrics(
        self, groups: Sequence[Group], grades: Sequence[Sequence[Grade]], lengths: Sequence[Sequence[int]]
    ) -> dict[str, float]:
        """`task/no_answer_frac`: the share of completions with no extractable answer."""
        flat = [g for gs in grades for g in gs]
        if not flat:
            return {}
        return {task_metric("no_answer_frac"): sum(not g.info.get("extracted") for g in flat) / len(flat)}
