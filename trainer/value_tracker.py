"""SPO's value tracker: each prompt's success rate, a Beta whose old evidence fades as the policy moves.

Xu and Ding 2025, Single-stream Policy Optimization (SPO, arXiv 2509.13232), as the authors' release runs it (verl's
recipe/spo/spo_ray_trainer.py: `RayPPOTrainer.fit` and `_get_spo_rho`; config/spo_trainer.yaml; run_spo.sh). The paper's
method section could not be read here (its abstract and introduction could), so each rule below is the authors' code's.
Prompt x holds a Beta(α, β); its value is v̂(x) = α/(α + β). After a step that sampled x with reward r ∈ [0, 1]:

    α ← ρ·α + r,    β ← ρ·β + (1 − r),    ρ = clip(2^(−D/D_half), ρ_min, ρ_max),

D the mean over the tokens of x's previous response of |log π_now − log π_then|: that response's log-probabilities under
the policy after the step that sampled it (π_then, stored with it) against the policy after this step's update
(π_now). The more the policy has moved since x was last seen, the less its old evidence counts; a prompt seen for the
first time has D = 0, so ρ = ρ_max. `spo_rho` replaces the rule with a constant (the authors' `rho.type: constant`).
Before the first step each prompt of the pool can be sampled n0 times from the initial policy (`spo_init_samples`, the
authors' offline values): s successes give α = N·(s + ½)/(n0 + 1), β = N·(n0 − s + ½)/(n0 + 1), N = 1/(1 − ρ_min), the
effective count at which ρ_min's discount holds the evidence steady. A prompt never initialised starts at α = β = ½
(the authors' n0 = 0). The advantage reads v̂ from before the step (`values`); the step's rewards enter only after it
(`observe`), so the baseline never saw the reward it is subtracted from.

The tracker is keyed by the task's problem id (`Group.problem_id`), holds no parameter an optimiser steps and draws
nothing at random (the Trainer's seeded rng draws the initial samples and the prioritized prompts), so it changes the
policy's gradient only through the advantage and the prompts it picks. A run does not checkpoint the trainer's state
(no resume restarts a run midway), so the tracker's is not saved either: it lives as long as the run.

Departs from the authors' release: with several responses to one prompt in a step (group_size > 1, or the same problem
drawn twice) its evidence is discounted once and their rewards summed, where the authors' loop lets the last response's
update overwrite the others' (their SPO samples one); their initial samples come from a separate offline evaluation of
the whole training set, these from the run's own rollout backend on the pool (rollout.prompt_pool) before step 1.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from trainer import metric_names as M
from trainer.objective.settings import ObjectiveSettings

PRIOR = 0.5
"""α and β of a prompt never initialised nor seen (the authors' `offline_N: 0`): v̂ = ½."""


def kl_adaptive_rho(drift: float, d_half: float, rho_min: float, rho_max: float) -> float:
    """ρ = clip(2^(−D/D_half), ρ_min, ρ_max): evidence discounted by half per D_half of policy drift D."""
    return min(max(2.0 ** (-drift / d_half), rho_min), rho_max)


def initial_counts(successes: int, samples: int, rho_min: float) -> tuple[float, float]:
    """(α, β) = N·((s + ½), (n0 − s + ½))/(n0 + 1), N = 1/(1 − ρ_min): the posterior mean of s successes in n0 samples
    under a Beta(½, ½) prior, held at N effective observations."""
    n = 1.0 / (1.0 - rho_min)
    return n * (successes + 0.5) / (samples + 1), n * (samples - successes + 0.5) / (samples + 1)


def mean_abs_drift(then: list[float], now: list[float]) -> float:
    """D = mean_t |log π_then(o_t) − log π_now(o_t)| over a response's tokens (0 for an empty response)."""
    if not then:
        return 0.0
    return sum(abs(a - b) for a, b in zip(then, now)) / len(then)


@dataclass
class PromptTrack:
    """One prompt's tracker: its Beta's counts, its visits, and its last response (the tokens of its prompt and of
    the response, and their log-probabilities under the policy after the step that sampled it), for the next drift."""

    alpha: float = PRIOR
    beta: float = PRIOR
    visits: int = 0
    prompt_ids: tuple[int, ...] = ()
    response_ids: tuple[int, ...] = ()
    logprobs: tuple[float, ...] = ()

    @property
    def value(self) -> float:
        return self.alpha / (self.alpha + self.beta)


@dataclass(frozen=True)
class LastResponse:
    """A prompt's newest response this step, as the tracker stores it for the next drift."""

    prompt_ids: tuple[int, ...]
    response_ids: tuple[int, ...]
    logprobs: tuple[float, ...]


class ValueTracker:
    """Every prompt's tracked success rate, across RL steps (`spo_*` settings); owned by the Trainer."""

    def __init__(self, rho_min: float, rho_max: float, d_half: float, init_samples: int, rho: float | None = None):
        self.rho_min, self.rho_max, self.d_half, self.init_samples, self.rho = (
            rho_min,
            rho_max,
            d_half,
            init_samples,
            rho,
        )
        self.tracks: dict[str, PromptTrack] = {}

    @classmethod
    def of(cls, s: ObjectiveSettings) -> ValueTracker | None:
        """The tracker the advantage reads (`needs_prompt_values`), or None."""
        if not s.needs_prompt_values:
            return None
        assert s.spo_rho_min is not None and s.spo_rho_max is not None and s.spo_d_half is not None
        assert s.spo_init_samples is not None
        return cls(s.spo_rho_min, s.spo_rho_max, s.spo_d_half, s.spo_init_samples, s.spo_rho)

    @property
    def reads_drift(self) -> bool:
        """Whether ρ follows the policy's drift on each prompt (else it is the constant `spo_rho`)."""
        return self.rho is None

    def value(self, problem_id: str) -> float:
        """v̂ of a prompt: its Beta's mean, ½ when never tracked."""
        track = self.tracks.get(problem_id)
        return (track or PromptTrack()).value

    def values(self, problem_ids: list[str]) -> torch.Tensor:
        """[N] v̂ of each prompt, as the tracker holds it now (float64)."""
        return torch.tensor([self.value(p) for p in problem_ids], dtype=torch.float64)

    def tracked(self, problem_ids: list[str]) -> torch.Tensor:
        """[N] whether each prompt has been initialised or seen."""
        return torch.tensor([p in self.tracks for p in problem_ids])

    def initialise(self, problem_id: str, successes: int, samples: int) -> None:
        """A prompt's tracker from `samples` responses of the initial policy, `successes` of them correct."""
        if not 0 <= successes <= samples:
            raise ValueError(f"successes must lie in [0, {samples}], got {successes}")
        alpha, beta = initial_counts(successes, samples, self.rho_min)
        self.tracks[problem_id] = PromptTrack(alpha, beta)

    def previous(self, problem_ids: list[str]) -> dict[str, LastResponse]:
        """The stored last response of each of these prompts that has one (what the drift is measured on)."""
        out = {}
        for p in dict.fromkeys(problem_ids):
            track = self.tracks.get(p)
            if track is not None and track.response_ids:
                out[p] = LastResponse(track.prompt_ids, track.response_ids, track.logprobs)
        return out

    def rho_of(self, drift: float) -> float:
        """ρ for a prompt whose last response drifted by D (the constant `spo_rho` when set)."""
        if self.rho is not None:
            return self.rho
        return kl_adaptive_rho(drift, self.d_half, self.rho_min, self.rho_max)

    def observe(
        self,
        problem_ids: list[str],
        rewards: torch.Tensor,
        drifts: dict[str, float],
        last: dict[str, LastResponse],
    ) -> dict[str, float]:
        """After a step: each prompt's counts discounted once by its ρ (its drift from `drifts`, 0 when absent: a
        first visit) and its responses' rewards added, its newest response stored from `last`; returns the spo/*
        metrics of the step, v̂ taken from before it. `rewards` [N], one per response of `problem_ids`, in [0, 1]."""
        r = rewards.double().flatten()
        if len(problem_ids) != r.numel():
            raise ValueError(f"{len(problem_ids)} problem ids for {r.numel()} rewards")
        bad = ((r < 0) | (r > 1) | ~torch.isfinite(r)).nonzero()
        if bad.numel():
            worst = r[bad[0, 0]].item()
            raise ValueError(
                f"objective.advantage spo tracks success rates from rewards in [0, 1]; a reward is {worst:g}"
            )
        before = self.values(problem_ids)
        tracked = self.tracked(problem_ids)
        sums: dict[str, list[float]] = {}
        for p, reward in zip(problem_ids, r.tolist()):
            sums.setdefault(p, []).append(reward)
        rhos = []
        for p, rs in sums.items():
            track = self.tracks.setdefault(p, PromptTrack())
            rho = self.rho_of(drifts.get(p, 0.0))
            rhos.append(rho)
            track.alpha = rho * track.alpha + sum(rs)
            track.beta = rho * track.beta + sum(1.0 - x for x in rs)
            track.visits += 1
            if p in last:
                track.prompt_ids, track.response_ids, track.logprobs = (
                    last[p].prompt_ids,
                    last[p].response_ids,
                    last[p].logprobs,
                )
        return {
            M.SPO_VALUE_ABS_ERR: (before - r).abs().mean().item(),
            M.SPO_VALUE_MEAN: before.mean().item(),
            M.SPO_TRACKED_FRAC: tracked.double().mean().item(),
            M.SPO_RHO_MEAN: math.fsum(rhos) / len(rhos),
            M.SPO_TRACKED_PROMPTS: float(len(self.tracks)),
        }
