"""reasoning-gym's seeded generators as a task: prompts from the generator, reward and correctness from its own
`score_answer` (PyPI `reasoning-gym`, the `reasoning-gym` extra, pinned at 0.1.25).

reasoning-gym is imported only in a `BoundedService` helper (trainer/rewards/bounded.py), never in harness's
process: the helper builds the pool once (within `start_s`), hands it over as JSON, and scores each completion in a
forked child under `budget_s` of CPU time, as math grading is. What crosses is checked as untrusted input: a pool
entry that is not a pair of strings, or too long, fails the task's start in one line; a score that is not a number
in [0, 1] fails the run in one line. A completion that makes `score_answer` raise, or run past its time, grades
wrong (reward 0), counted in `task/score_errors` or `train/grade_timeouts`: the model's output, not the
generator, is what varies there.

The answer scored is the whole completion with surrounding whitespace removed (a base model built for the task
answers with the answer alone); reasoning-gym's prompts do not ask for a format.
"""

from __future__ import annotations

import difflib
import logging
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from trainer.metric_names import task_metric
from trainer.rewards.bounded import BoundedService, StartError, error_line
from trainer.rewards.grade import Grade
from trainer.tasks.base import Group
from trainer.tasks.reasoning_gym_config import ReasoningGymConfig

MAX_TEXT = 20_000
"""The longest prompt or answer a pool may hold, in characters: a generator's output past it is refused."""
MAX_ANSWER = 20_000
"""A completion longer than this grades wrong unscored (no generator's answer is that long)."""
KEY = "task.reasoning_gym"
log = logging.getLogger(__name__)


class ReasoningGymError(RuntimeError):
    """The generator or its scorer misbehaved (one line naming the setting): the run fails."""


def service_of(settings: ReasoningGymConfig) -> BoundedService:
    """The helper that imports reasoning-gym, builds the settings' pool and scores completions."""
    init = {"generator": settings.generator, "config": settings.config, "seed": settings.seed, "size": settings.size}
    return BoundedService(f"{__name__}:_scorer", init, settings.start_s, label=f"reasoning-gym {settings.generator}")


def load_pool(service: BoundedService, settings: ReasoningGymConfig) -> list[tuple[str, str]]:
    """The settings' (prompt, answer) pairs, checked; one-line `ReasoningGymError`s naming the setting."""
    try:
        reply = service.call(["pool"], settings.start_s)
    except StartError as exc:
        text = str(exc).removeprefix("ValueError: ")
        key = f"{KEY}." if text.startswith(("generator:", "config:")) else f"{KEY}: "
        raise ReasoningGymError(key + text) from None
    if reply.value is None:
        why = reply.error or reply.over or reply.died or "ran past task.reasoning_gym.start_s"
        raise ReasoningGymError(f"{KEY}: building the pool of {settings.generator} failed ({why})")
    pool = reply.value
    if not isinstance(pool, list) or len(pool) != settings.size:
        raise ReasoningGymError(f"{KEY}: {settings.generator} gave no pool of {settings.size} problems")
    for i, pair in enumerate(pool):
        ok = isinstance(pair, list) and len(pair) == 2 and all(isinstance(t, str) and t for t in pair)
        if not ok or max(len(t) for t in pair) > MAX_TEXT:
            raise ReasoningGymError(
                f"{KEY}: problem {i} of {settings.generator} is not a question and an answer, each a string of 1 to "
                f"{MAX_TEXT} characters"
            )
    return [(q, a) for q, a in pool]


class ReasoningGymTask:
    """Groups of G identical prompts over a generator's pool, scored by the generator's `score_answer`."""

    name = "reasoning_gym"

    def __init__(self, settings: ReasoningGymConfig):
        self.settings = settings
        self.service = service_of(settings)
        pool = load_pool(self.service, settings)
        self.prompts = [q for q, _ in pool]
        self.answers = [a for _, a in pool]
        self._warned = False

    def sample_groups(self, rng: np.random.Generator, num_groups: int, group_size: int) -> list[Group]:
        """`num_groups` problems drawn uniformly from `rng` (distinct within a call while there are enough)."""
        picks = rng.choice(len(self.prompts), size=num_groups, replace=num_groups > len(self.prompts))
        s = self.settings
        return [
            Group(
                problem_id=f"{s.generator}/{s.seed}/{i}",
                answer=self.answers[i],
                prompts=(self.prompts[i],) * group_size,
                meta=({"index": int(i)},) * group_size,
            )
            for i in picks
        ]

    def grade(self, group: Group, index: int, completion: str) -> Grade:
        """The generator's score of the stripped completion, within `budget_s`; correct when it reaches
        `correct_threshold`. info: `score_error` (1 when `score_answer` raised on this completion)."""
        answer = completion.strip()
        if len(answer) > MAX_ANSWER:
            return Grade(reward=0.0, correct=False, info={"score_error": 0})
        problem = group.meta[index]["index"]
        reply = self.service.call(["score", problem, answer], self.settings.budget_s)
        if reply.timed_out or reply.over is not None or reply.died is not None:
            return Grade(reward=0.0, correct=False, info={"score_error": 0}, timed_out=True)
        if reply.error is not None:
            if not self._warned:
                log.warning("%s's score_answer raised %s; such answers grade 0", self.settings.generator, reply.error)
                self._warned = True
            return Grade(reward=0.0, correct=False, info={"score_error": 1})
        score = reply.value
        if isinstance(score, bool) or not isinstance(score, (int, float)) or not 0.0 <= score <= 1.0:
            raise ReasoningGymError(
                f"{KEY}: {self.settings.generator}'s score_answer returned {str(score)[:40]!r}, not a number in "
                f"[0, 1], on problem {problem}"
            )
        reward = float(score)
        return Grade(reward=reward, correct=reward >= self.settings.correct_threshold, info={"score_error": 0})

    def step_metrics(
        self, groups: Sequence[Group], grades: Sequence[Sequence[Grade]], lengths: Sequence[Sequence[int]]
    ) -> dict[str, float]:
        """`task/score_errors`: the share of completions on which `score_answer` raised."""
        flat = [g for gs in grades for g in gs]
        if not flat:
            return {}
        return {task_metric("score_errors"): sum(g.info.get("score_error", 0) for g in flat) / len(flat)}

    def close(self) -> None:
        """Stop the helper."""
        self.service.close()


def close_names(name: str, known: Sequence[str]) -> str:
    """`no generator 'x' ...; close names: a, b` (difflib), or how many there are when none is close."""
    close = difflib.get_close_matches(name, known, n=5, cutoff=0.6)
    hint = f"close names: {', '.join(close)}" if close else f"none is close among its {len(known)} generators"
    return f"generator: no generator {name!r} in reasoning-gym; {hint}"


# ---- in the helper: reasoning-gym itself ---------------------------------------------------------------
def _scorer(init: dict[str, Any]):
    """The helper's function (`BoundedService`'s factory): the pool built once, before any child is forked; a
    request is `["pool"]` or `["score", problem, answer]`."""
    import reasoning_gym
    from reasoning_gym.factory import DATASETS

    name = init["generator"]
    if name not in DATASETS:
        raise ValueError(close_names(name, sorted(DATASETS)))
    try:
        dataset = reasoning_gym.create_dataset(name, seed=init["seed"], size=init["size"], **init["config"])
        entries = [dataset[i] for i in range(init["size"])]
    except Exception as exc:  # noqa: BLE001 (a setting the generator refuses, named by the caller)
        raise ValueError(f"config: {name} refused its settings ({error_line(exc)})") from None
    pool = [[_text(e.get("question")), _text(e.get("answer"))] for e in entries]

    def answer(request: list[Any]) -> Any:
        if request[0] == "pool":
            return pool
        score = dataset.score_answer(request[2], entries[request[1]])
        return float(score) if isinstance(score, (int, float)) and math.isfinite(score) else str(score)

    return answer


def _text(value: Any) -> str | None:
    """A generator's string as it is; anything else None, which the caller refuses."""
    return value if isinstance(value, str) else None
