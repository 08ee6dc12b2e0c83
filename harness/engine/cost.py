"""What a sweep's job is expected to cost, in seconds, and what follows from it: the order its jobs start in
(longest first) and how long the jobs left will take on a number of workers. The one home of these estimates:
the sweep's order, its status line's ETA and `benchmarks/schedule_makespan.py` all use them.

The prior is `work`: steps × prompts_per_step × group_size × max_new_tokens, the most tokens a run may sample. It
assumes a job's time is proportional to that and to nothing else: it cannot see how long the responses will
actually grow (GRPO's 1/T_i lengthens them, so its jobs take up to about 2× Dr. GRPO's constant here), nor epochs,
mini-batches, dynamic sampling's extra rounds or evaluation. It has no unit: only measured runs turn it into
seconds. A measured arm's rate (seconds per unit of work, over its finished runs) replaces the prior for that arm;
an arm not measured yet is given the mean rate of the measured arms, each arm once: its own length effect is
unknown until one of its runs finishes.
"""

from __future__ import annotations

import heapq
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from harness.config.job import Job
from harness.config.run_config import RunConfig


def work(config: RunConfig) -> int:
    """The prior's cost of a run: steps × responses a step × budget (an evaluation-only run, 0 steps, counts as one
    step). Unitless: proportional to a job's time only under the module docstring's assumption."""
    rollout = config.rollout
    return max(config.train.steps, 1) * rollout.prompts_per_step * rollout.group_size * rollout.max_new_tokens


@dataclass(frozen=True)
class Measured:
    """How long one finished run of an arm took."""

    arm_id: str
    """The run's arm (`Job.arm_id`, its `arm` tag)."""
    seconds: float
    """Wall-clock seconds the run took."""


@dataclass(frozen=True)
class CostModel:
    """Expected seconds per job: its arm's measured rate (else the measured arms' mean rate) × its `work`."""

    rates: dict[str, float] = field(default_factory=dict)
    """Measured seconds per unit of work, by arm id; empty: nothing measured, no job has expected seconds."""

    def rate(self, arm_id: str) -> float | None:
        """The arm's own rate, else the mean of the measured arms' rates, else None."""
        if arm_id in self.rates:
            return self.rates[arm_id]
        return sum(self.rates.values()) / len(self.rates) if self.rates else None

    def seconds(self, config: RunConfig) -> float | None:
        """Expected seconds of a job of this config; None while no arm is measured."""
        rate = self.rate(config.arm)
        return None if rate is None else rate * work(config)

    def key(self, config: RunConfig) -> float:
        """What orders jobs: expected seconds, or the prior's work while nothing is measured (either way every job
        of a sweep is in one unit)."""
        seconds = self.seconds(config)
        return float(work(config)) if seconds is None else seconds


def cost_model(jobs: Iterable[Job], measured: Iterable[Measured]) -> CostModel:
    """The model of a sweep: each arm of `jobs` with measured runs gets their total seconds over their total work;
    runs of arms not among `jobs` (whose work is unknown here) are left out."""
    return rates_of({job.arm_id: work(job.config) for job in jobs}, measured)


def rates_of(work_of: dict[str, int], measured: Iterable[Measured]) -> CostModel:
    """`cost_model` from each arm's `work` (arm id → work of one of its jobs), for a caller that keeps it."""
    seconds: dict[str, float] = defaultdict(float)
    runs: dict[str, int] = defaultdict(int)
    for m in measured:
        if m.arm_id in work_of:
            seconds[m.arm_id] += m.seconds
            runs[m.arm_id] += 1
    return CostModel({arm: seconds[arm] / (runs[arm] * work_of[arm]) for arm in seconds})


def longest_first(keys: Sequence[float]) -> list[int]:
    """Indices of `keys` from the largest to the smallest; equal keys keep their order (LPT scheduling's order)."""
    return sorted(range(len(keys)), key=lambda i: -keys[i])


def order_jobs(jobs: Sequence[Job], model: CostModel) -> list[Job]:
    """`jobs` longest first by `model`: the order a sweep starts them in. Only the order changes, never a job."""
    return [jobs[i] for i in longest_first([model.key(job.config) for job in jobs])]


def makespan(durations: Sequence[float], workers: int, running: Sequence[float] = ()) -> float:
    """Seconds until the last job ends when each of `durations`, in order, starts on the first worker free (a
    sweep's executor draws them so); `running`: seconds left of the jobs already running, each holding a worker
    (more of them than `workers` hold one each)."""
    if workers < 1:
        raise ValueError(f"workers must be >= 1, got {workers}")
    free = sorted([*running, *[0.0] * max(0, workers - len(running))])
    for seconds in durations:
        heapq.heappush(free, heapq.heappop(free) + seconds)
    return max(free)
