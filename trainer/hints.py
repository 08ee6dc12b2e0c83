"""Hints for groups whose every response is wrong (a "learning cliff"): responses the policy itself samples from the
task's hinted prompts, swapped into the group before its advantages.

A group whose responses are all wrong has zero advantage under a group baseline, so its prompt gives no gradient.
Scaf-GRPO (Zhang et al., arXiv 2510.19807) and HiLL's reasoner update (Xia et al., arXiv 2604.00698) sample that
prompt again with a hint in it and train on what comes back. Here a task that gives hints has a `hints(group, index)`
method: sample `index`'s prompt with a hint added, one prompt per level of its hint ladder, the most abstract first,
and none when it has no hint (`trainer.tasks.base.HintingTask`; the toy shows a hidden digit where its `?` stood,
trainer/tasks/toy_addition.py). `rollout.hint` picks a scheme, registered here by name, as two pure functions:
`asks` (which hinted prompts to sample for one group, from its correctness and its samples' ladders) and `pick`
(which sampled response replaces which of the group's, from their correctness). The trainer samples the asks with its
rollout backend, at the rollout's temperature, from the weights that sampled the step (`Trainer._hint`).

  scaf_grpo     Scaf-GRPO (arXiv 2510.19807, §3.2, Appendix D.1 and Algorithm 1; dvlab-research/Scaf-GRPO,
                hint_mix_grpo/trainer/ray_trainer.py `fit` and `build_new_message`, run by
                sh/hint_mix_grpo/bs256_6k_mix.sh with replace_num 1, replace_hint_prompt False): a group with no
                correct response draws one response at each level of one failed sample's ladder, that sample drawn
                at random among those with a ladder (the paper's "a random failed trajectory"; the authors' code
                takes the group's first, and there every sample's prompt is the same); the correct response at the
                lowest level replaces that sample, hinted prompt and all ("the minimal effective guidance"); none
                correct, the group stays as it was.
  hinted_group  HiLL's reasoner update with a fixed hint (arXiv 2604.00698; Andree-9/HiLL,
                verl/trainer/ppo/hinter_utils.py `select_best_hint` and `build_batch_with_best_hints`): the whole
                group is drawn again, each sample under its ladder's first hint (its own prompt when it has none), and
                replaces the group when its responses are neither all correct nor all wrong (HiLL keeps a hinted
                group only if its non-degenerate probability 1 − p̂ⁿ − (1 − p̂)ⁿ exceeds the original's, 0 for an
                all-wrong group). HiLL's own contribution, a hinter policy trained to write the hint from the
                reasoner's failed response with a transfer-weighted reward, is not built: the toy's hint is the
                hidden digit, the same every time, with nothing for a hinter to learn.

Both keep the GRPO loss as it is and change only its data (Scaf-GRPO eq. 2-4): the advantages are the group's as
replaced, and a hinted response's importance ratio is computed on the prompt it was sampled from,
π_θ(o|q ⊕ h)/π_old(o|q ⊕ h), so it is trained on-policy under its hinted prompt (both authors' codes recompute π_old
on the replaced batch). The paper's off-policy alternative, the ratio on the prompt without the hint (its Appendix
F.5), is not built: the paper's formula puts the hinted prompt in π_old's condition and the authors' switch for it
(replace_hint_prompt) recomputes π_old on the prompt without the hint, and the two disagree.

Scaf-GRPO gives no hint before a "guidance exemption period" ends (`rollout.hint_after_steps`): "empirically set to the
initial 15% of training steps" (§3.2), the authors' script 50 steps (`+trainer.warmup_steps=50`, hints from step 51);
the paper's monitor of when the solving of zero-reward prompts plateaus is not described beyond that, and is not built.

HiLL's hint reliance (`hint_reliance`) is logged as a diagnostic, as the authors' code computes it
(hill_ray_trainer.py `compute_all_hint_reliance`, averaged over a hint's correct responses in `select_best_hint`): for a
correct hinted response o, Δ = mean_t log π(o_t | q) − mean_t log π(o_t | q ⊕ h) under the policy that sampled it.
Negative when the hinted success is less likely without the hint, the more so the more it leans on it; the authors'
hinter reward weighs a hint by exp(min(Δ, 0)/T), and their abstract derives that a hint the success relies on less
transfers more to the prompt without it. Only the abstract of the paper could be read; the rule is the code's.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

HINT_STREAM = 19
"""The hinted draws' sampling seed: SeedSequence([seed, step, HINT_STREAM, round]), apart from the step's own draws."""
SLOT_STREAM = 23
"""The stream that picks scaf_grpo's failed sample: default_rng([seed, step, SLOT_STREAM, round])."""


@dataclass(frozen=True)
class Ask:
    """One hinted response to draw for a group."""

    slot: int
    """The group's sample whose prompt the hint is added to (and whose response it may replace)."""
    level: int
    """The hint's position in that sample's ladder, from 1 (the most abstract); 0 = the sample's own prompt."""


Ladders = Sequence[Sequence[str]]
"""Each sample of a group's hinted prompts (`HintingTask.hints`), the most abstract first; empty = no hint."""
Asks = Callable[[Sequence[bool], Ladders, np.random.Generator], list[Ask]]
"""(the group's correctness, its ladders, a generator) → the hinted responses to draw for it (none: no hint)."""
Pick = Callable[[Sequence[Ask], Sequence[bool]], dict[int, int]]
"""(the asks, whether each one's response is correct) → slot → the ask whose response replaces that sample."""


def scaf_grpo_asks(correct: Sequence[bool], ladders: Ladders, rng: np.random.Generator) -> list[Ask]:
    """Scaf-GRPO: nothing unless every response is wrong; then each level of one sample's ladder, lowest first, the
    sample drawn uniformly among those with a ladder."""
    eligible = [j for j, ladder in enumerate(ladders) if ladder]
    if any(correct) or not eligible:
        return []
    slot = eligible[int(rng.integers(len(eligible)))]
    return [Ask(slot, level) for level in range(1, len(ladders[slot]) + 1)]


def scaf_grpo_pick(asks: Sequence[Ask], correct: Sequence[bool]) -> dict[int, int]:
    """The first correct response, at the lowest level, replaces its sample; none correct, nothing."""
    for k, (ask, ok) in enumerate(zip(asks, correct, strict=True)):
        if ok:
            return {ask.slot: k}
    return {}


def hinted_group_asks(correct: Sequence[bool], ladders: Ladders, rng: np.random.Generator) -> list[Ask]:
    """HiLL's reasoner update: nothing unless every response is wrong and some sample has a hint; then every sample
    again, under its ladder's first hint (its own prompt when it has none)."""
    if any(correct) or not any(ladders):
        return []
    return [Ask(j, 1 if ladder else 0) for j, ladder in enumerate(ladders)]


def hinted_group_pick(asks: Sequence[Ask], correct: Sequence[bool]) -> dict[int, int]:
    """The hinted group replaces the whole group when it is mixed (neither all correct nor all wrong)."""
    if len(correct) != len(asks):
        raise ValueError(f"{len(correct)} grades for {len(asks)} hinted responses")
    if all(correct) or not any(correct):
        return {}
    return {ask.slot: k for k, ask in enumerate(asks)}


@dataclass(frozen=True)
class HintScheme:
    """A rollout.hint value: what to draw for a group, and what replaces what."""

    asks: Asks
    pick: Pick


HINT_SCHEMES: dict[str, HintScheme] = {
    "scaf_grpo": HintScheme(scaf_grpo_asks, scaf_grpo_pick),
    "hinted_group": HintScheme(hinted_group_asks, hinted_group_pick),
}
"""rollout.hint → its scheme (the names are `trainer.config.HintName`'s)."""


def hinted_prompt(ask: Ask, own: str, ladder: Sequence[str]) -> str:
    """The prompt `ask` draws from: the sample's own (level 0) or its ladder's hint at that level."""
    return own if ask.level == 0 else ladder[ask.level - 1]


def hint_reliance(without: Sequence[float], with_hint: Sequence[float]) -> float:
    """HiLL's hint reliance of one response: mean_t log π(o_t | q) − mean_t log π(o_t | q ⊕ h), its tokens'
    log-probabilities without the hint and with it (0 for a response of no tokens)."""
    if len(without) != len(with_hint):
        raise ValueError(f"{len(without)} log-probabilities without the hint, {len(with_hint)} with it")
    if not without:
        return 0.0
    return float(np.mean(without) - np.mean(with_hint))
