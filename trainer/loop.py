"""The RL loop: prompts → G rollouts each → rewards → dynamic sampling → advantages → trained samples (PF-PPO may
resample them by reward) → updates.
(ReMax's advantage also draws one greedy response per prompt, graded and not trained on: `Trainer._greedy`; POISE's
reads each response's value from a probe on the policy's hidden states: `Trainer._probe_features`, `ValueProbe`;
SPO's reads each prompt's tracked success rate: `Trainer._track`, `ValueTracker`; the optimal token baseline reads
each response token's probability and Σ_v π²: `Trainer._token_probabilities`, and its advantage is per token; prompts
may come from a fixed pool, `PromptPool`.)

Every switch lives in `trainer.objective`; this loop calls it and never looks at
switch names. It knows nothing of MLflow: metrics go to a `MetricSink`.
"""

from __future__ import annotations

import copy
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

import numpy as np
import pandas as pd
import torch

from trainer import metric_names as M
from trainer.config import RolloutConfig, TrainConfig
from trainer.hints import HINT_SCHEMES, HINT_STREAM, SLOT_STREAM, hint_reliance, hinted_prompt
from trainer.logprobs import Entropy, ResponseScorer
from trainer.objective import (
    EntropyCoefficient,
    KLCoefficient,
    Normaliser,
    ObjectiveSettings,
    TokenProbabilities,
    advantage_metrics,
    compute_advantages,
    correction_weight,
    covariance_selection,
    dynamic_sampling_filter,
    group_outcome_metrics,
    kept_tokens,
    kl_reward_mean,
    kl_reward_penalty,
    loss_mask,
    merge_metrics,
    pf_ppo_metrics,
    pf_ppo_resample,
    policy_loss,
    response_advantages,
    rollout_weight_mean,
    shape_rewards,
    sign_flip_metrics,
    soft_overlong_penalty,
    trained_samples,
)
from trainer.objective.settings import OVERLONG_COMPONENT, TASK_REWARD_COMPONENT
from trainer.prompt_pool import SAMPLERS, PromptPool
from trainer.reference import ReferenceRefresh
from trainer.rewards.grade import Grade
from trainer.rollout.base import RolloutBackend, SamplingParams
from trainer.tasks.base import Group, Task
from trainer.value_probe import ProbeFeatures, ValueProbe, read_features
from trainer.value_tracker import LastResponse, ValueTracker, mean_abs_drift


class MetricSink(Protocol):
    def log_metrics(self, step: int, metrics: dict[str, float]) -> None: ...


class TrainingDiverged(RuntimeError):
    """The loss, the gradient or the parameters became non-finite (or the optimiser step overflowed)."""


@dataclass
class Samples:
    """Per-sample data of one step, flattened group by group ([N] lists or tensors)."""

    groups: list[Group]
    prompt_ids: list[list[int]]
    response_ids: list[list[int]]
    truncated: torch.Tensor
    lengths: torch.Tensor
    grades: list[Grade]
    texts: list[str]
    rounds: list[int]
    logprobs: list[list[float]]
    """Each response token's log-probability under the rollout engine that sampled it."""
    hint_prompts: list[str | None] = field(default_factory=list)
    """The hinted prompt each response was sampled from (rollout.hint, `Trainer._hint`), None for the group's own
    prompt; empty = none hinted."""

    @property
    def hinted(self) -> list[str | None]:
        """`hint_prompts`, one per response."""
        return self.hint_prompts or [None] * len(self.grades)

    def select_groups(self, keep: list[int], group_size: int) -> Samples:
        rows = [g * group_size + j for g in keep for j in range(group_size)]
        pick = lambda xs: [xs[i] for i in rows]  # noqa: E731
        return Samples(
            [self.groups[g] for g in keep],
            pick(self.prompt_ids),
            pick(self.response_ids),
            self.truncated[rows],
            self.lengths[rows],
            pick(self.grades),
            pick(self.texts),
            pick(self.rounds),
            pick(self.logprobs),
            pick(self.hinted) if self.hint_prompts else [],
        )

    @staticmethod
    def concat(parts: list[Samples]) -> Samples:
        hinted = any(p.hint_prompts for p in parts)
        return Samples(
            sum((p.groups for p in parts), []),
            sum((p.prompt_ids for p in parts), []),
            sum((p.response_ids for p in parts), []),
            torch.cat([p.truncated for p in parts]),
            torch.cat([p.lengths for p in parts]),
            sum((p.grades for p in parts), []),
            sum((p.texts for p in parts), []),
            sum((p.rounds for p in parts), []),
            sum((p.logprobs for p in parts), []),
            sum((p.hinted for p in parts), []) if hinted else [],
        )


@dataclass
class HintDraw:
    """One response sampled from a hinted prompt (rollout.hint): for sample `slot` of `group`, at `level` of its hint
    ladder (0 = its own prompt), in generation round `round`."""

    group: Group
    slot: int
    level: int
    prompt: str
    prompt_ids: list[int]
    response_ids: list[int]
    logprobs: list[float]
    text: str
    grade: Grade
    length: int
    truncated: bool
    round: int
    used: bool = False
    """Whether it replaced its sample in the group."""
    reliance: float | None = None
    """HiLL's hint reliance of a correct response with a hint (level > 0) that replaced its sample
    (`trainer.hints.hint_reliance`)."""


@dataclass(frozen=True)
class TrainerSettings:
    """What a `Trainer` does, apart from what it works on: a run config's objective, rollout, train and seed."""

    objective: ObjectiveSettings
    rollout: RolloutConfig
    train: TrainConfig
    seed: int

    @classmethod
    def of(cls, config: Any) -> TrainerSettings:
        """The settings held by a config with these four fields (a run config)."""
        return cls(config.objective, config.rollout, config.train, config.seed)


class Trainer:
    """Owns the policy, the optimiser and the step counter; `run` drives the whole training."""

    def __init__(
        self, policy: torch.nn.Module, task: Task, backend: RolloutBackend, pad_id: int, settings: TrainerSettings
    ):
        self.policy, self.task, self.backend, self.pad_id = policy, task, backend, pad_id
        self.obj, self.roll, self.cfg, self.seed = settings.objective, settings.rollout, settings.train, settings.seed
        self.device = next(policy.parameters()).device
        self.rng = np.random.default_rng(self.seed)
        self.group_width = self.roll.group_size + self.obj.extra_samples  # responses each group draws
        self.params = SamplingParams(self.roll.max_new_tokens, self.roll.temperature, self.roll.top_p)
        problem = self.cfg.refresh_problem(self.obj.needs_reference)
        if problem:
            raise ValueError(problem)
        self.ref = None
        if self.cfg.reference_kl or self.obj.needs_reference:
            self.ref = copy.deepcopy(policy).eval().requires_grad_(False)
        self.refresh = ReferenceRefresh.of(self.cfg)  # π_ref ← α·π_θ + (1 − α)·π_ref every N steps, when set
        self.optimiser = torch.optim.AdamW(
            policy.parameters(), lr=self.cfg.lr, betas=self.cfg.betas, weight_decay=self.cfg.weight_decay
        )
        warm = self.cfg.warmup_steps
        self.schedule = torch.optim.lr_scheduler.LambdaLR(
            self.optimiser, lambda k: min(1.0, (k + 1) / warm) if warm else 1.0
        )
        self.rows: list[dict[str, Any]] = []
        self.tokens_generated = 0  # the run explorer's "tokens seen" axis
        self.micro_size = self.cfg.micro_batch_size  # halved on CUDA out-of-memory (see _fitting)
        self.entropy_coef = EntropyCoefficient.of(self.obj)  # the entropy bonus's, across optimiser steps
        self.kl_coef = KLCoefficient.of(self.obj)  # the KL's β in the loss and in the reward, across RL steps
        self.probe = ValueProbe.of(self.obj)  # POISE's value probe on the policy's hidden states, across RL steps
        self.tracker = ValueTracker.of(self.obj)  # SPO's per-prompt success rates, across RL steps
        self.tracker_initialised = False  # its initial samples (spo_init_samples) are drawn before the first step
        self.pool = None  # the fixed prompts each step draws from (rollout.prompt_pool), when set
        if self.roll.prompt_pool is not None:
            self.pool = PromptPool.draw(task, self.roll.prompt_pool, self.group_width, self.seed)
        self.scorer = ResponseScorer(self.roll.temperature, self.cfg.logits_chunk_mb)
        if self.roll.hint is not None and not callable(getattr(task, "hints", None)):
            raise ValueError(
                f"rollout.hint: {self.roll.hint} adds a task's hints to its all-wrong groups, but task {task.name} "
                "gives none (no `hints` method: trainer.tasks.base.HintingTask)"
            )
        self.draws: list[HintDraw] = []  # the step's responses drawn from hinted prompts (rollout.hint)

    # ---- rollouts -------------------------------------------------------------------------
    def _sample(self, step: int, round_: int) -> tuple[Samples, float, int]:
        """One generation round's samples, with the seconds its `generate` call took and that call's token steps
        (its longest response)."""
        G = self.group_width
        groups = self._draw_groups(self.roll.prompts_per_step, G)
        prompts = [p for g in groups for p in g.prompts]
        seed = int(np.random.SeedSequence([self.seed, step, round_]).generate_state(1)[0])
        start = time.perf_counter()
        try:
            out = self.backend.generate(prompts, self.params, seed)
        except RuntimeError as error:  # e.g. sampling from NaN probabilities: say so when that is the cause
            if not self._finite_policy():
                raise self._diverged(step, "the policy's parameters or logits are non-finite") from error
            raise
        lengths, truncated = out.lengths.cpu(), out.truncated.cpu().bool()
        decode_s = time.perf_counter() - start  # the lengths on the host: a GPU's queue has drained
        grades = [self._grade(groups[k // G], k % G, text, bool(truncated[k])) for k, text in enumerate(out.texts)]
        prompt_ids = [row[m.bool()].tolist() for row, m in zip(out.prompt_ids.cpu(), out.prompt_mask.cpu())]
        response_ids = [row[:n].tolist() for row, n in zip(out.response_ids.cpu(), lengths.tolist())]
        logprobs = [row[:n].tolist() for row, n in zip(out.logprobs.float().cpu(), lengths.tolist())]
        samples = Samples(
            groups,
            prompt_ids,
            response_ids,
            truncated,
            lengths,
            grades,
            list(out.texts),
            [round_] * len(prompts),
            logprobs,
        )
        return samples, decode_s, int(lengths.max())

    def _draw_groups(self, n: int, G: int) -> list[Group]:
        """`n` groups of G prompts: fresh from the task, or from the fixed pool with the weights of
        rollout.prompt_sampling (`trainer.prompt_pool.SAMPLERS`; value_priority's read the tracker's values)."""
        if self.pool is None:
            return self.task.sample_groups(self.rng, n, G)
        value = None if self.tracker is None else self.tracker.value
        weights = SAMPLERS[self.roll.prompt_sampling](self.pool.ids, value, self.roll.prompt_priority_eps)
        return self.pool.sample(self.rng, n, weights)

    def _initialise_tracker(self, step: int) -> None:
        """Each pool prompt's tracker from spo_init_samples responses of the policy before any update (the authors'
        offline values: `ValueTracker.initialise`), graded as its pool entry's sample j mod G; none without a pool
        or with 0 samples. Their tokens count as generated."""
        assert self.tracker is not None
        self.tracker_initialised = True
        n0 = self.tracker.init_samples
        if self.pool is None or n0 == 0:
            return
        asks = [(g, j) for g in self.pool.groups for j in range(n0)]
        successes: dict[str, int] = {}
        chunk = max(self.roll.prompts_per_step * self.group_width, 1)
        for start in range(0, len(asks), chunk):
            part = asks[start : start + chunk]
            seed = int(np.random.SeedSequence([self.seed, step, 17, start]).generate_state(1)[0])
            out = self.backend.generate([g.prompts[j % len(g.prompts)] for g, j in part], self.params, seed)
            truncated = out.truncated.cpu().bool()
            for (g, j), text, cut in zip(part, out.texts, truncated):
                grade = self._grade(g, j % len(g.prompts), text, bool(cut))
                successes[g.problem_id] = successes.get(g.problem_id, 0) + int(grade.correct)
            self.tokens_generated += int(out.lengths.sum())
        for problem_id, s in successes.items():
            self.tracker.initialise(problem_id, s, n0)

    def _track(self, s: Samples, rewards: torch.Tensor) -> dict[str, float]:
        """The tracker after this step (`ValueTracker.observe`): each prompt's drift D measured on its stored last
        response between the policy after that response's step and the policy now (after this step's update), then
        each prompt's newest response stored with its log-probabilities under the policy now."""
        assert self.tracker is not None
        ids = [g.problem_id for g in s.groups for _ in range(self.group_width)]
        drifts: dict[str, float] = {}
        last: dict[str, LastResponse] = {}
        if self.tracker.reads_drift:
            previous = self.tracker.previous(ids)
            if previous:
                keys = list(previous)
                then = [list(previous[p].logprobs) for p in keys]
                now = self._score(
                    [list(previous[p].prompt_ids) for p in keys], [list(previous[p].response_ids) for p in keys]
                )
                drifts = {p: mean_abs_drift(a, b) for p, a, b in zip(keys, then, now)}
            newest = {p: k for k, p in enumerate(ids)}  # each prompt's last response this step
            rows = list(newest.values())
            logp = self._score([s.prompt_ids[k] for k in rows], [s.response_ids[k] for k in rows])
            last = {
                p: LastResponse(tuple(s.prompt_ids[k]), tuple(s.response_ids[k]), tuple(lp))
                for (p, k), lp in zip(newest.items(), logp)
            }
        return self.tracker.observe(ids, rewards.flatten(), drifts, last)

    def _score(self, prompts: list[list[int]], responses: list[list[int]]) -> list[list[float]]:
        """Each response's token log-probabilities under the policy now (at the sampling temperature)."""
        t = self._pair_tensors(prompts, responses, [[] for _ in prompts])
        logp = self._logprobs(self.policy, t).double().cpu()
        return [logp[i, : len(r)].tolist() for i, r in enumerate(responses)]

    def _grade(self, group: Group, index: int, text: str, truncated: bool) -> Grade:
        """The task's grade of response `index` of `group`; a truncated one (no final answer within the budget) is
        wrong, whatever the text holds."""
        grade = self.task.grade(group, index, text)
        return grade.unanswered() if truncated else grade

    def _greedy(self, step: int, groups: list[Group]) -> tuple[torch.Tensor, dict[str, float], int]:
        """([groups, G] shaped rewards, metrics, tokens generated) of one greedy (temperature-0) response to each
        distinct prompt of each group, for an advantage that needs it (ReMax's baseline, `needs_greedy`): generated by
        the rollout backend from the weights that sampled this step, graded by the task as the response of the first
        sample with that prompt (`_grade`), shaped as the sampled ones (objective.overlong_penalty), and never
        trained on. Each response gets its own prompt's: one per group when a group's prompts are equal (every task
        but the toy's hidden digits)."""
        G = self.group_width
        first = [{p: group.prompts.index(p) for p in group.prompts} for group in groups]  # prompt → its first sample
        asks = [(g, j) for g, seen in enumerate(first) for j in seen.values()]
        seed = int(np.random.SeedSequence([self.seed, step, 13]).generate_state(1)[0])
        out = self.backend.generate(
            [groups[g].prompts[j] for g, j in asks], replace(self.params, temperature=0.0), seed
        )
        lengths, truncated = out.lengths.cpu(), out.truncated.cpu().bool()
        grades = [self._grade(groups[g], j, text, bool(cut)) for (g, j), text, cut in zip(asks, out.texts, truncated)]
        shaped, _ = self._shape(grades, lengths, truncated)
        task_reward = torch.tensor([grade.reward for grade in grades], dtype=torch.float64)
        row = {ask: k for k, ask in enumerate(asks)}
        index = [row[g, first[g][p]] for g, group in enumerate(groups) for p in group.prompts[:G]]
        metrics = {M.GREEDY_REWARD_MEAN: task_reward.mean().item()}
        return shaped[index].view(len(groups), G), metrics, int(lengths.sum())

    def _shape(
        self, grades: Sequence[Grade], lengths: torch.Tensor, truncated: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(shaped reward [N] float64, correct [N]) of N graded responses: the task's reward with the objective's
        length shaping, which reads each response's correctness, length and truncation. Every reward the loop
        trains on, baselines on or logs goes through here."""
        task_reward = torch.tensor([g.reward for g in grades], dtype=torch.float64)
        correct = torch.tensor([g.correct for g in grades])
        return shape_rewards(task_reward, lengths, self.obj, correct, truncated), correct

    def _rewards(self, s: Samples) -> tuple[torch.Tensor, torch.Tensor]:
        G = self.group_width
        shaped, correct = self._shape(s.grades, s.lengths, s.truncated)
        return shaped.view(-1, G), correct.view(-1, G)

    def collect(self, step: int) -> tuple[Samples, Samples, dict[str, float]]:
        """(every sample generated this step from the task's prompts, the samples kept for training, group metrics).
        Under rollout.hint the kept samples hold the hinted responses swapped in (`_hint`), and `self.draws` every
        response drawn from a hinted prompt this step; the generated samples do not."""
        want, parts, kept_parts, dropped = self.roll.prompts_per_step, [], [], 0
        decode_s, decode_steps = 0.0, 0
        self.draws, triggered, hinted = [], 0, 0
        for round_ in range(1, self.cfg.max_gen_rounds + 1):
            s, seconds, steps = self._sample(step, round_)
            parts.append(s)
            decode_s, decode_steps = decode_s + seconds, decode_steps + steps
            s, draws, asked, swapped = self._hint(step, round_, s)
            self.draws.extend(draws)
            triggered, hinted = triggered + asked, hinted + swapped
            if not self.obj.dynamic_sampling:
                kept_parts.append(s)
                break
            shaped, correct = self._rewards(s)
            values = shaped if self.obj.dynamic_sampling_key == "reward" else correct.double()
            f = dynamic_sampling_filter(values, drop=self.obj.dynamic_sampling_drop)
            dropped += f.dropped
            kept_parts.append(s.select_groups(f.keep.nonzero()[:, 0].tolist(), self.group_width))
            if sum(len(p.groups) for p in kept_parts) >= want:
                break
        else:
            have = sum(len(p.groups) for p in kept_parts)
            raise RuntimeError(
                f"dynamic sampling kept {have} of {want} groups after {self.cfg.max_gen_rounds} "
                "generation rounds (train.max_gen_rounds); every other group had equal rewards"
            )
        everything, kept = Samples.concat(parts), Samples.concat(kept_parts)
        kept = kept.select_groups(list(range(min(want, len(kept.groups)))), self.group_width)
        metrics = {M.GEN_ROUNDS: float(len(parts)), M.GROUPS_DROPPED: float(dropped)}
        if self.roll.hint is not None:
            metrics.update(hint_metrics(self.draws, triggered, hinted, len(everything.groups), kept))
        return everything, kept, {**metrics, M.DECODE_STEP_S: decode_s / max(decode_steps, 1)}

    # ---- hints for all-wrong groups (rollout.hint) -----------------------------------------
    def _hint(self, step: int, round_: int, s: Samples) -> tuple[Samples, list[HintDraw], int, int]:
        """(`s` with rollout.hint's hinted responses swapped in, every response drawn from a hinted prompt, the groups
        that drew any, the groups that took any): each group's asks from its correctness and its samples' hint ladders
        (trainer/hints.py), sampled in one generation call from the weights that sampled `s` and graded as their
        samples, then the scheme's picks. A swapped-in response keeps the prompt it was sampled from, so the loss
        trains it on-policy under its hinted prompt. `s` unchanged without hints or within the first
        rollout.hint_after_steps steps (Scaf-GRPO's guidance exemption)."""
        if self.roll.hint is None or step <= self.roll.hint_after_steps:
            return s, [], 0, 0
        scheme, G = HINT_SCHEMES[self.roll.hint], self.group_width
        rng = np.random.default_rng([self.seed, step, SLOT_STREAM, round_])
        asks = []  # (group's position in s, the ask, the prompt it draws from)
        for g, group in enumerate(s.groups):
            ladders = [self.task.hints(group, j) for j in range(G)]  # type: ignore[attr-defined]
            correct = [grade.correct for grade in s.grades[g * G : (g + 1) * G]]
            asks += [
                (g, a, hinted_prompt(a, group.prompts[a.slot], ladders[a.slot]))
                for a in scheme.asks(correct, ladders, rng)
            ]
        if not asks:
            return s, [], 0, 0
        seed = int(np.random.SeedSequence([self.seed, step, HINT_STREAM, round_]).generate_state(1)[0])
        out = self.backend.generate([prompt for _, _, prompt in asks], self.params, seed)
        lengths, truncated = out.lengths.cpu().tolist(), out.truncated.cpu().bool().tolist()
        prompt_ids, prompt_mask = out.prompt_ids.cpu(), out.prompt_mask.cpu().bool()
        response_ids, logprobs = out.response_ids.cpu(), out.logprobs.float().cpu()
        draws = [
            HintDraw(
                s.groups[g],
                a.slot,
                a.level,
                prompt,
                prompt_ids[k][prompt_mask[k]].tolist(),
                response_ids[k, : lengths[k]].tolist(),
                logprobs[k, : lengths[k]].tolist(),
                out.texts[k],
                self._grade(s.groups[g], a.slot, out.texts[k], truncated[k]),
                lengths[k],
                truncated[k],
                round_,
            )
            for k, (g, a, prompt) in enumerate(asks)
        ]
        by_group: dict[int, list[int]] = {}
        for k, (g, _, _) in enumerate(asks):
            by_group.setdefault(g, []).append(k)
        rows = {}  # a row of s → the draw that replaces it
        for g, ks in by_group.items():
            picks = scheme.pick([asks[k][1] for k in ks], [draws[k].grade.correct for k in ks])
            rows.update({g * G + slot: draws[ks[i]] for slot, i in picks.items()})
        for d in rows.values():
            d.used = True
        self._rely([(s.prompt_ids[row], d) for row, d in rows.items() if d.grade.correct and d.level > 0])
        swapped = Samples(
            s.groups,
            [rows[i].prompt_ids if i in rows else p for i, p in enumerate(s.prompt_ids)],
            [rows[i].response_ids if i in rows else r for i, r in enumerate(s.response_ids)],
            torch.tensor([rows[i].truncated if i in rows else bool(t) for i, t in enumerate(s.truncated)]),
            torch.tensor([rows[i].length if i in rows else int(n) for i, n in enumerate(s.lengths)]),
            [rows[i].grade if i in rows else grade for i, grade in enumerate(s.grades)],
            [rows[i].text if i in rows else text for i, text in enumerate(s.texts)],
            s.rounds,
            [rows[i].logprobs if i in rows else lp for i, lp in enumerate(s.logprobs)],
            [rows[i].prompt if i in rows else p for i, p in enumerate(s.hinted)],
        )
        return swapped, draws, len(by_group), len({row // G for row in rows})

    def _rely(self, pairs: list[tuple[list[int], HintDraw]]) -> None:
        """Each draw's HiLL hint reliance (`hint_reliance`): its response's log-probabilities under the policy now,
        without the hint (the prompt ids of the sample it replaced) and with it."""
        if not pairs:
            return
        responses = [d.response_ids for _, d in pairs]
        without = self._score([own for own, _ in pairs], responses)
        with_hint = self._score([d.prompt_ids for _, d in pairs], responses)
        for (_, d), a, b in zip(pairs, without, with_hint):
            d.reliance = hint_reliance(a, b)

    # ---- update ---------------------------------------------------------------------------
    def _tensors(self, s: Samples, rows: list[int]) -> dict[str, torch.Tensor]:
        """The samples `rows`: prompt left-padded + response right-padded, as one [len(rows), P + L] batch."""
        return self._pair_tensors(
            [s.prompt_ids[i] for i in rows], [s.response_ids[i] for i in rows], [s.logprobs[i] for i in rows]
        )

    def _pair_tensors(
        self, prompts: list[list[int]], responses: list[list[int]], logprobs: list[list[float]]
    ) -> dict[str, torch.Tensor]:
        """(prompt, response) pairs, prompt left-padded + response right-padded, as one [n, P + L] batch, with each
        response's rollout log-probabilities (0 where `logprobs` is shorter)."""
        P, L = max(map(len, prompts)), max(1, max(map(len, responses)))
        n = len(prompts)
        ids = torch.full((n, P + L), self.pad_id, dtype=torch.long)
        attn = torch.zeros((n, P + L), dtype=torch.long)
        rollout_logp = torch.zeros((n, L))
        for i, (p, r, lp) in enumerate(zip(prompts, responses, logprobs)):
            ids[i, P - len(p) : P + len(r)] = torch.tensor(p + r, dtype=torch.long)
            attn[i, P - len(p) : P + len(r)] = 1
            rollout_logp[i, : len(lp[: len(r)])] = torch.tensor(lp[: len(r)])
        resp_mask = attn[:, P:].clone()
        return {
            "ids": ids.to(self.device),
            "attn": attn.to(self.device),
            "resp_mask": resp_mask.to(self.device),
            "rollout_logp": rollout_logp.to(self.device),
            "prompt_len": torch.tensor(P),
        }

    def _stats(
        self,
        model: torch.nn.Module,
        t: dict[str, torch.Tensor],
        rows: torch.Tensor,
        width: int,
        entropy: Entropy = "none",
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """([n, width] log-probabilities, entropies or None: see `ResponseScorer`) of the first `width` response
        tokens of `rows` at the sampling temperature (the batch cut to P + width columns: nothing after them can
        change these)."""
        P = int(t["prompt_len"])
        attn = t["attn"][rows, : P + width]
        pos = (attn.cumsum(1) - 1).clamp(min=0)
        return self.scorer(model, t["ids"][rows, : P + width], attn, pos, width, entropy)

    def _logprobs(self, model: torch.nn.Module, t: dict[str, torch.Tensor]) -> torch.Tensor:
        """[N, L] log-probabilities of every response token under `model` (0 after a response's end)."""
        everything = torch.arange(t["ids"].shape[0], device=self.device)

        def work() -> torch.Tensor:
            parts = [(rows, self._stats(model, t, rows, w)[0]) for rows, w in self._micro(everything, t)]
            out = parts[0][1].new_zeros(t["resp_mask"].shape)
            for rows, logp in parts:
                out[rows, : logp.shape[1]] = logp
            return out

        with torch.no_grad():
            return self._fitting(everything, work)

    def _probe_features(self, s: Samples) -> ProbeFeatures:
        """What the value probe reads of each of `s`'s responses (`read_features`), from the policy as it sampled them
        (before the step's update), in micro-batches, without gradients."""
        assert self.probe is not None
        probe = self.probe
        t = self._tensors(s, list(range(len(s.grades))))
        everything = torch.arange(t["ids"].shape[0], device=self.device)
        P = int(t["prompt_len"])

        def work() -> ProbeFeatures:
            parts = []
            for rows, w in self._micro(everything, t):
                ids, attn = t["ids"][rows, : P + w], t["attn"][rows, : P + w]
                f = read_features(self.policy, ids, attn, P, w, probe.depth, probe.pool, self.roll.temperature)
                parts.append((rows, f))
            return ProbeFeatures.gather(parts, len(everything))

        with torch.no_grad():
            return self._fitting(everything, work)

    def _token_probabilities(self, s: Samples) -> TokenProbabilities:
        """What a per-token advantage reads of each of `s`'s response tokens (`TokenProbabilities`, each [groups, G,
        L]): log π(o_t) and Σ_v π_t(v)² from one forward of the policy that sampled them (before the step's update, at
        the sampling temperature), in micro-batches, without gradients, as verl's actor computes its old
        log-probabilities and Σπ² together; and the rollout correction's weight ρ̄ of those against the rollout
        engine's log-probabilities, when one is configured."""
        t = self._tensors(s, list(range(len(s.grades))))
        everything = torch.arange(t["ids"].shape[0], device=self.device)
        P = int(t["prompt_len"])

        def work() -> tuple[torch.Tensor, torch.Tensor]:
            logp = squares = None
            for rows, w in self._micro(everything, t):
                attn = t["attn"][rows, : P + w]
                pos = (attn.cumsum(1) - 1).clamp(min=0)
                lp, sq = self.scorer.probabilities(self.policy, t["ids"][rows, : P + w], attn, pos, w)
                if logp is None:
                    logp, squares = (lp.new_zeros(t["resp_mask"].shape) for _ in range(2))
                logp[rows, :w], squares[rows, :w] = lp, sq
            assert logp is not None and squares is not None
            return logp, squares

        logp, squares = self._fitting(everything, work)
        mask = t["resp_mask"].to(logp.dtype)
        weight = correction_weight(logp, t["rollout_logp"], mask, self.obj)
        shape = (len(s.groups), self.group_width, -1)
        return TokenProbabilities(
            (logp * mask).double().cpu().view(shape),
            (squares * mask).double().cpu().view(shape),
            None if weight is None else weight.double().cpu().view(shape),
        )

    def _batch_view(self, rows: torch.Tensor, t: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        """([len(rows), L] log-probability, entropy) of every response token of `rows` under the policy now (0 after
        its end): what a batch-wide statistic of the loss (the top-entropy quantile, the covariance selection of
        Clip-Cov and KL-Cov) is taken over, before the micro-batches of the update."""

        def work() -> tuple[torch.Tensor, torch.Tensor]:
            logp = entropy = None
            for part, w in self._micro(rows, t):
                lp, h = self._stats(self.policy, t, part, w, "value")
                if logp is None:  # in the dtype of the log-probabilities (float32, or the model's when wider)
                    logp, entropy = (lp.new_zeros(t["resp_mask"].shape) for _ in range(2))
                logp[part, :w], entropy[part, :w] = lp, h
            return logp[rows], entropy[rows]

        with torch.no_grad():
            return self._fitting(rows, work)

    def _micro(self, rows: torch.Tensor, t: dict[str, torch.Tensor]) -> list[tuple[torch.Tensor, int]]:
        """`rows` in forward/backward batches, each with the width of its longest response: longest first, then
        `train.length_buckets` batches of (nearly) equal count, at most the micro-batch size each. Padding only
        costs compute: a response's logits do not depend on the columns after it, nor on the other rows."""
        lengths, order = torch.sort(t["resp_mask"][rows].sum(-1), descending=True, stable=True)
        rows = rows[order]
        size = self._micro_size(rows.numel())
        return [(r, max(1, int(n.max()))) for r, n in zip(rows.split(size), lengths.split(size))]

    def _micro_size(self, n: int) -> int:
        """Responses per forward/backward out of `n`."""
        return min(self.micro_size or n, -(-n // self.cfg.length_buckets))

    def _fitting(self, rows: torch.Tensor, work: Callable[[], Any]) -> Any:
        """Run `work` (micro-batches of `rows`); on a CUDA out-of-memory error halve the micro-batch, kept for
        the rest of the run, and run it again from the start. The result does not depend on the size."""
        while True:
            try:
                return work()
            except torch.cuda.OutOfMemoryError:
                size = self.micro_size or rows.numel()
                if size <= 1:
                    raise
                self.micro_size = size // 2
                self.optimiser.zero_grad(set_to_none=True)  # drop the partial accumulation
                if torch.cuda.is_available():
                    torch.cuda.empty_cache()

    def update(
        self,
        step: int,
        t: dict[str, torch.Tensor],
        advantages: torch.Tensor,
        mask: torch.Tensor,
        old: torch.Tensor | None = None,
        ref: torch.Tensor | None = None,
    ) -> dict[str, float]:
        """mini_batches × epochs optimiser steps on one rollout batch; metrics averaged over them. `advantages`: [N], or
        [N, L] per token (L the batch's width). `old`, `ref`: the [N, L] log-probs of π_old and π_ref when already
        computed (for the KL in the reward), else computed here. The rollout rejection and the rollout weights' batch
        mean are taken once, over the whole rollout batch, from π_old against the rollout engine's log-probabilities,
        before the first optimiser step (verl's `compute_rollout_correction_and_add_to_batch`)."""
        n = mask.shape[0]
        several = self.cfg.mini_batches * self.cfg.epochs > 1
        if (several or self.obj.needs_rollout_gap) and old is None:
            old = self._logprobs(self.policy, t)
        kept, weight_mean = None, None
        if old is not None:
            kept = kept_tokens(old, t["rollout_logp"], mask, self.obj)
            if self.obj.rollout_correction_batch_normalize:
                weight_mean = rollout_weight_mean(old, t["rollout_logp"], mask, self.obj)
        trained = mask if kept is None else mask * kept.to(mask.dtype)
        if not several:
            old = None  # π_old = π_θ before the step
        if ref is None and self.ref is not None:
            ref = self._logprobs(self.ref, t)
        gen = torch.Generator().manual_seed(int(np.random.SeedSequence([self.seed, step, 7]).generate_state(1)[0]))
        per_step: list[dict[str, float]] = []
        self.policy.train()
        for _ in range(self.cfg.epochs):
            order = torch.randperm(n, generator=gen).to(self.device) if several else torch.arange(n, device=self.device)
            for mini in order.tensor_split(self.cfg.mini_batches):
                view = None  # the policy's log-probs and entropies over the whole optimisation batch, when needed
                if self.obj.needs_batch_entropy or self.obj.needs_batch_covariance:
                    view = self._batch_view(mini, t)
                norm = Normaliser.from_mask(  # counts of the whole optimisation batch
                    mask[mini],
                    self.obj.max_len,
                    entropy=None if view is None else view[1],
                    top_entropy_quantile=self.obj.top_entropy_quantile,
                    kept=None if kept is None else kept[mini],
                )
                norm = replace(norm, rollout_weight_mean=weight_mean)  # over the whole rollout batch
                selected = None
                if view is not None and self.obj.needs_batch_covariance:
                    seed = np.random.SeedSequence([self.seed, step, 11, len(per_step)]).generate_state(1)[0]
                    pick = covariance_selection(
                        view[0],
                        old[mini] if several else view[0],
                        advantages[mini],
                        trained[mini],
                        self.obj,
                        torch.Generator().manual_seed(int(seed)),
                    )
                    selected = torch.zeros(mask.shape, dtype=torch.bool, device=self.device)
                    selected[mini] = pick.to(self.device)
                coef = self.entropy_coef.applied()

                def accumulate(
                    mini: torch.Tensor = mini,
                    norm: Normaliser = norm,
                    coef: float = coef,
                    selected: torch.Tensor | None = selected,
                ) -> list[dict[str, float]]:
                    parts = []
                    for rows, w in self._micro(mini, t):
                        logp, entropy = self._stats(
                            self.policy, t, rows, w, "trained" if self.obj.entropy_bonus else "value"
                        )
                        out = policy_loss(
                            logp,
                            old[rows, :w] if several else logp.detach(),
                            advantages[rows] if advantages.dim() == 1 else advantages[rows, :w],
                            mask[rows, :w],
                            self.obj,
                            ref_logp=None if ref is None else ref[rows, :w],
                            entropy=entropy,
                            norm=norm,
                            rollout_logp=t["rollout_logp"][rows, :w],
                            entropy_coef=coef,
                            cov_selected=None if selected is None else selected[rows, :w],
                            kl_coef=self.kl_coef.loss,
                            kept=None if kept is None else kept[rows, :w],
                        )
                        if not torch.isfinite(out.loss):
                            raise self._diverged(step, f"loss is {out.loss.item()}")
                        out.loss.backward()
                        parts.append(out.metrics)
                    return parts

                parts = self._fitting(mini, accumulate)
                clip = self.cfg.max_grad_norm if self.cfg.max_grad_norm is not None else math.inf
                grad_norm = torch.nn.utils.clip_grad_norm_(self.policy.parameters(), clip).item()
                if not math.isfinite(grad_norm):
                    raise self._diverged(step, f"gradient norm is {grad_norm}")
                metrics = merge_metrics(parts)
                metrics.update(
                    {
                        M.GRAD_NORM: grad_norm,
                        M.LR: self.optimiser.param_groups[0]["lr"],
                        M.MICRO_BATCH: float(self._micro_size(mini.numel())),
                    }
                )
                self._optimiser_step(step)
                self.optimiser.zero_grad(set_to_none=True)
                self.schedule.step()
                if M.ENTROPY_TRAINED in metrics:
                    self.entropy_coef.update(metrics[M.ENTROPY_TRAINED])
                per_step.append(metrics)
        return {k: float(np.mean([m[k] for m in per_step])) for k in per_step[0]}

    # ---- divergence -----------------------------------------------------------------------
    def _optimiser_step(self, step: int) -> None:
        """optimiser.step(), then the parameters must be finite: a finite loss and gradient can still
        step to inf/NaN weights (a huge lr), which would otherwise surface at the next sampling."""
        try:
            self.optimiser.step()
        except RuntimeError as error:  # torch refuses an lr-scaled step that overflows its dtype
            if "overflow" not in str(error):
                raise
            raise self._diverged(step, f"the optimiser step overflowed ({error})") from error
        if not self._finite_parameters():
            raise self._diverged(step, "parameters are non-finite after the optimiser step")

    def _finite_parameters(self) -> bool:
        return bool(torch.stack([torch.isfinite(p.detach()).all() for p in self.policy.parameters()]).all())

    def _finite_policy(self) -> bool:
        """Whether the parameters, and the logits of a one-token input, are finite (a diagnosis after a
        failed generation: huge but finite weights can still give NaN logits)."""
        if not self._finite_parameters():
            return False
        with torch.no_grad():
            logits = self.policy(input_ids=torch.full((1, 1), self.pad_id, device=self.device)).logits
        return bool(torch.isfinite(logits).all())

    def _diverged(self, step: int, what: str) -> TrainingDiverged:
        return TrainingDiverged(f"diverged at step {step}: {what} (lr {self.optimiser.param_groups[0]['lr']:g})")

    # ---- one step, and the run ------------------------------------------------------------
    def step(self, step: int) -> dict[str, float]:
        start = time.perf_counter()
        if self.tracker is not None and not self.tracker_initialised:  # its initial samples, before the first step
            self._initialise_tracker(step)
        everything, kept, metrics = self.collect(step)
        greedy = None  # each kept response's baseline from a greedy response to its prompt, when the advantage reads it
        if self.obj.needs_greedy:
            greedy, greedy_metrics, greedy_tokens = self._greedy(step, kept.groups)
            metrics.update(greedy_metrics)
            self.tokens_generated += greedy_tokens
        generated = time.perf_counter()
        shaped, correct = self._rewards(kept)
        penalised, every, old, ref = shaped, None, None, None
        if self.obj.kl_reward_coef > 0:  # the KL in the reward: π_old's and π_ref's log-probs before the advantages
            every = self._tensors(kept, list(range(shaped.numel())))
            old, ref = self._logprobs(self.policy, every), self._logprobs(self.ref, every)
            penalty = kl_reward_penalty(old, ref, every["resp_mask"], self.obj, self.kl_coef.reward).double().cpu()
            penalised = shaped - penalty.view(shaped.shape)
            metrics[M.KL_REWARD_PENALTY] = penalty.mean().item()
            metrics[M.KL_REWARD_MEAN] = kl_reward_mean(old, ref, every["resp_mask"], self.obj)
        strata = None if self.obj.stratum_key is None else stratum_labels(kept, self.obj.stratum_key, self.task.name)
        components = None if self.obj.reward_components is None else reward_components(kept, self.obj, self.task.name)
        values, features = None, None  # each kept response's value from the policy's hidden states, when read
        if self.probe is not None:
            features = self._probe_features(kept)
            values = self.probe.values(features, penalised)
        lengths = kept.lengths.view(shaped.shape)
        prompt_values = None  # each kept response's prompt's tracked success rate, when read
        if self.tracker is not None:
            ids = [g.problem_id for g in kept.groups for _ in range(self.group_width)]
            prompt_values = self.tracker.values(ids).view(shaped.shape)
        token_probs = None  # each kept response token's probability and Σ_v π² before the update, when read
        if self.obj.needs_token_probs:
            token_probs = self._token_probabilities(kept)
        grouped = compute_advantages(
            penalised,
            self.obj,
            strata,
            lengths,
            greedy,
            values=values,
            components=components,
            prompt_values=prompt_values,
            token_probs=token_probs,
        )
        if self.probe is not None:  # the step's responses into the probe's buffer, and its refit, after the advantages
            assert features is not None and values is not None
            metrics.update(self.probe.observe(step, features, penalised, values, grouped))
        trained = trained_samples(penalised, self.obj, correct)  # all, or all but MC-GRPO's pivots or NSR's correct
        advantages = grouped.flatten(0, 1).float()  # [N], or [N, L] under a per-token advantage
        per_response = response_advantages(grouped, lengths)  # [groups, G]: one each, for the metrics and the table
        each = per_response.flatten().float()
        rows = trained.flatten().nonzero()[:, 0].tolist()
        if rows and self.obj.pf_ppo_reweight is not None:  # PF-PPO: as many draws of these rows, weighted by reward
            scores = shaped.flatten()[rows]
            seed = int(np.random.SeedSequence([self.seed, step, 19]).generate_state(1)[0])
            picks = pf_ppo_resample(scores, self.obj, torch.Generator().manual_seed(seed))
            metrics.update(pf_ppo_metrics(scores, picks))
            rows = [rows[i] for i in picks.tolist()]
        if rows:  # none under drop_correct when every response is correct: nothing to train this step
            whole = rows == list(range(len(kept.grades)))  # the batch the KL in the reward already laid out
            t = every if every is not None and whole else self._tensors(kept, rows)
            width = t["resp_mask"].shape[1]
            if old is not None and ref is not None:  # the trained rows' log-probs, cut to their batch's width
                old, ref = old[rows, :width], ref[rows, :width]
            resp_mask = loss_mask(t["resp_mask"], kept.truncated[rows].to(self.device), self.obj)
            trained_adv = advantages[rows] if advantages.dim() == 1 else advantages[rows, :width]
            metrics.update(self.update(step, t, trained_adv.to(self.device), resp_mask, old, ref))
            self.backend.sync_weights(self.policy)  # a separate engine (vLLM) samples the next step from these weights
        if self.tracker is not None:  # the step's rewards into each prompt's tracker, after the update
            metrics.update(self._track(kept, penalised))
        metrics.update(self.refresh(step, self.ref, self.policy))  # the reference the next step's KL reads
        done = time.perf_counter()
        shaped_all, correct_all = self._rewards(everything)
        shaped_all = shaped_all.flatten()
        metrics.update(group_outcome_metrics(correct_all))
        metrics.update(rollout_metrics(everything, shaped_all))
        if rows:
            metrics.update(advantage_metrics(each[rows]))
        metrics.update(sign_flip_metrics(penalised, per_response, trained))
        metrics.update(self.kl_coef.metrics())  # the β this step applied, when adaptive; then its update
        self.kl_coef.update(metrics, len(kept.grades))
        G = self.group_width
        metrics.update(
            self.task.step_metrics(
                everything.groups,
                [everything.grades[i : i + G] for i in range(0, len(everything.grades), G)],
                [everything.lengths[i : i + G].tolist() for i in range(0, len(everything.grades), G)],
            )
        )
        tokens = int(everything.lengths.sum()) + sum(d.length for d in self.draws)  # hinted responses too
        self.tokens_generated += tokens
        metrics.update(
            {
                M.GENERATE_S: generated - start,
                M.UPDATE_S: done - generated,
                M.STEP_S: done - start,
                M.TOKENS_PER_S: tokens / (done - start),
                M.TOKENS_GENERATED: float(self.tokens_generated),
            }
        )
        hints = self.roll.hint is not None
        self.rows.extend(rollout_rows(step, everything, kept, each, shaped_all, G, self.cfg.log_text, hints))
        if hints:
            self.rows.extend(self._hint_rows(step, kept, each))
        return metrics

    def _hint_rows(self, step: int, kept: Samples, advantages: torch.Tensor) -> list[dict[str, Any]]:
        """The rollout table's rows of the step's hinted responses (`hinted` true, the generated samples' rows have it
        false): each with its hint's level and prompt, and, when it replaced a sample kept for training, that sample's
        advantage (a generated sample it replaced has none and `kept` false)."""
        G = self.group_width
        adv_of = {
            (id(g), j): advantages[k * G + j].item()
            for k, g in enumerate(kept.groups)
            for j in range(G)
            if kept.hinted[k * G + j] is not None
        }
        lengths = torch.tensor([d.length for d in self.draws])
        truncated = torch.tensor([d.truncated for d in self.draws])
        shaped = self._shape([d.grade for d in self.draws], lengths, truncated)[0].tolist()
        rows = []
        for d, value in zip(self.draws, shaped):
            adv = adv_of.get((id(d.group), d.slot)) if d.used else None
            row = {
                "step": step,
                "prompt_id": d.group.problem_id,
                "sample_index": d.slot,
                "round": d.round,
                "reward": d.grade.reward,
                "shaped_reward": value,
                "correct": d.grade.correct,
                "length": d.length,
                "truncated": d.truncated,
                "advantage": math.nan if adv is None else adv,
                "kept": adv is not None,
                "hinted": True,
                "hint_level": d.level,
                **{f"info_{key}": v for key, v in d.grade.info.items()},
            }
            if self.cfg.log_text:
                row["prompt"], row["response"] = d.prompt, d.text
            rows.append(row)
        return rows

    def run(self, sink: MetricSink, on_step: Callable[[int, dict[str, float]], None] | None = None) -> None:
        for step in range(1, self.cfg.steps + 1):
            metrics = self.step(step)
            sink.log_metrics(step, metrics)
            if on_step is not None:
                on_step(step, metrics)

    def rollout_table(self) -> pd.DataFrame:
        return pd.DataFrame(self.rows)


def stratum_labels(s: Samples, key: str, task: str) -> torch.Tensor:
    """[groups, G] labels of `key` (objective.stratum_key), equal exactly where the samples' values are: each sample's
    value is its grade's `info[key]`, else its group's `meta[i][key]` (G = the responses each group drew). A sample
    reporting neither is a one-line error naming the setting and the keys that sample does report."""
    ids: dict[str, int] = {}
    labels = []
    width = len(s.grades) // len(s.groups)
    for k, grade in enumerate(s.grades):
        group, j = s.groups[k // width], k % width
        meta = group.meta[j] if group.meta else {}
        if key in grade.info:
            value = grade.info[key]
        elif key in meta:
            value = meta[key]
        else:
            reported = ", ".join(sorted(set(grade.info) | set(meta))) or "nothing"
            raise ValueError(
                f"objective.stratum_key: task {task} reports no {key!r} per sample (it reports: {reported})"
            )
        labels.append(ids.setdefault(repr(value), len(ids)))
    return torch.tensor(labels).view(len(s.groups), width)


def reward_components(s: Samples, obj: ObjectiveSettings, task: str) -> torch.Tensor:
    """[groups, G, K] values of the K reward components objective.reward_components names, for GDPO: `reward` is each
    grade's reward, `overlong` DAPO's soft overlong punishment of the response's length, any other name the grade's
    component of that name (all 0 for a truncated response, as its reward). A sample whose task grades no such
    component is a one-line error naming the setting and the components that sample has."""
    names = obj.reward_components or ()
    columns = []
    for name in names:
        if name == TASK_REWARD_COMPONENT:
            columns.append(torch.tensor([g.reward for g in s.grades], dtype=torch.float64))
        elif name == OVERLONG_COMPONENT:
            assert obj.max_len is not None and obj.overlong_cache_len is not None  # validated with overlong_penalty
            columns.append(soft_overlong_penalty(s.lengths, obj.max_len, obj.overlong_cache_len))
        else:
            values = [g.component(name) for g in s.grades]
            missing = next((k for k, v in enumerate(values) if v is None), None)
            if missing is not None:
                graded = ", ".join(c.name for c in s.grades[missing].components) or "none"
                raise ValueError(
                    f"objective.reward_components: task {task} grades no {name!r} component (it grades: reward, "
                    f"overlong with overlong_penalty, and {graded})"
                )
            columns.append(torch.tensor(values, dtype=torch.float64))
    width = len(s.grades) // len(s.groups)
    return torch.stack(columns, dim=-1).view(len(s.groups), width, len(names))


def rollout_metrics(s: Samples, rewards: torch.Tensor) -> dict[str, float]:
    """train/* metrics of the generated samples (see `outcome_metrics`)."""
    correct = torch.tensor([g.correct for g in s.grades])
    return outcome_metrics(s.lengths, correct, s.truncated, rewards, sum(g.timed_out for g in s.grades))


def outcome_metrics(
    lengths: torch.Tensor, correct: torch.Tensor, truncated: torch.Tensor, rewards: torch.Tensor, timeouts: int = 0
) -> dict[str, float]:
    """train/* metrics of one step's responses (one value each: token count, correct, truncated, reward); the
    length splits only when defined (a step with no correct response logs no correct length, rather than 0). The
    one home of these definitions, for every engine."""
    lengths, correct = lengths.double(), correct.bool()
    out = {
        M.REWARD_MEAN: rewards.double().mean().item(),
        M.ACCURACY: correct.double().mean().item(),
        M.LENGTH_MEAN: lengths.mean().item(),
        M.TRUNCATED_FRAC: truncated.double().mean().item(),
        M.GRADE_TIMEOUTS: float(timeouts),
    }
    if correct.any():
        out[M.LENGTH_CORRECT_MEAN] = lengths[correct].mean().item()
    if (~correct).any():
        out[M.LENGTH_INCORRECT_MEAN] = lengths[~correct].mean().item()
    return out


def rollout_rows(
    step: int,
    everything: Samples,
    kept: Samples,
    advantages: torch.Tensor,
    shaped: torch.Tensor,
    group_size: int,
    with_text: bool,
    hints: bool = False,
) -> list[dict[str, Any]]:
    """One row per generated sample (reward = the task's, shaped_reward = what the advantage saw, before the KL
    penalty in the reward, objective.kl_reward_coef); samples of dropped groups have kept=False and no advantage, as
    have samples a hinted response replaced. With `hints` (rollout.hint) each row has `hinted` false: the hinted
    responses' rows are `Trainer._hint_rows`'."""
    adv_of = {
        (id(g), j): advantages[k * group_size + j].item()
        for k, g in enumerate(kept.groups)
        for j in range(group_size)
        if kept.hinted[k * group_size + j] is None  # a hinted response's row is its draw's (`Trainer._hint_rows`)
    }
    rows = []
    for k, grade in enumerate(everything.grades):
        group, j = everything.groups[k // group_size], k % group_size
        adv = adv_of.get((id(group), j))
        row = {
            "step": step,
            "prompt_id": group.problem_id,
            "sample_index": j,
            "round": everything.rounds[k],
            "reward": grade.reward,
            "shaped_reward": shaped[k].item(),
            "correct": grade.correct,
            "length": int(everything.lengths[k]),
            "truncated": bool(everything.truncated[k]),
            "advantage": math.nan if adv is None else adv,
            "kept": adv is not None,
            **{f"info_{key}": v for key, v in grade.info.items()},
        }
        if hints:
            row["hinted"] = False
        if with_text:
            row["prompt"], row["response"] = group.prompts[j], everything.texts[k]
        rows.append(row)
    return rows


def hint_metrics(draws: list[HintDraw], triggered: int, hinted: int, groups: int, kept: Samples) -> dict[str, float]:
    """hint/* of one step (trainer.metric_names): `triggered` and `hinted` of the step's `groups` generated groups drew
    hinted responses and took some; `kept` the samples trained on; `draws` every hinted response drawn."""
    out = {
        M.HINT_GROUPS_TRIGGERED_FRAC: triggered / groups,
        M.HINT_GROUPS_HINTED_FRAC: hinted / groups,
        M.HINT_RESPONSES_FRAC: sum(p is not None for p in kept.hinted) / max(len(kept.grades), 1),
    }
    if draws:
        out[M.HINT_ACCURACY] = float(np.mean([d.grade.correct for d in draws]))
    relied = [d.reliance for d in draws if d.reliance is not None]
    if relied:
        out[M.HINT_RELIANCE] = float(np.mean(relied))
    return out
