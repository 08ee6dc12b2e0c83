"""GDPO's two estimators against TRL's and verl's formulas, on random multi-component cases, in float64.

    python benchmarks/gdpo_vs_references.py [--cases 300] [--seed 0]

harness's `gdpo` (whitened per response) against TRL 1.16's `multi_objective_aggregation="normalize_then_sum"`, and
`gdpo_tokens` (whitened per token) against verl's `compute_gdpo_outcome_advantage`, each transcribed in NumPy below
from reading their code (named in each docstring; none of it is copied, and nothing here imports it). The cases cover
1-5 groups of 2-16 responses, 1-3 components each 0/1, continuous or a few tied values, components flat within a
group, groups flat in every component, weights of 1 (both references' default) or drawn (a 0 among them), and response
lengths of 1-40 tokens. Prints the largest absolute difference per reference and case family; writes
results/benchmarks/gdpo_vs_references.json. Both references compute in float32 in their trainers (TRL's rewards and
weights, verl's components); the transcriptions, as harness here, in float64: the formulas are compared, not the
rounding.
"""

from __future__ import annotations

import numpy as np
import torch
from _report import random_cases_args, write_json

from trainer.objective.registry import ADVANTAGES


def trl_normalize_then_sum(components: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """TRL 1.16, `trl/trainer/grpo_trainer.py`, `_generate_and_score_completions` with
    `multi_objective_aggregation == "normalize_then_sum"`: the rewards per function viewed [groups, G, K]; per group
    and function the mean and `nanstd` (Bessel: count/(count − 1)), zeros when G = 1; (r − mean)/(std + 1e-4); the
    weighted sum over functions (`reward_weights`); then over the whole batch (x − mean)/(nanstd + 1e-4), the std 0
    for a batch of one. No reward is NaN here (TRL's unscorable rows)."""
    groups, g, k = components.shape
    mean = components.mean(axis=1, keepdims=True)
    std = components.std(axis=1, ddof=1, keepdims=True) if g > 1 else np.zeros_like(mean)
    summed = (((components - mean) / (std + 1e-4)) * weights[None, None, :]).sum(axis=-1).reshape(-1)
    batch_std = summed.std(ddof=1) if summed.size > 1 else 0.0
    return ((summed - summed.mean()) / (batch_std + 1e-4)).reshape(groups, g)


def verl_gdpo(components: np.ndarray, weights: np.ndarray, lengths: np.ndarray, eps: float = 1e-6):
    """verl 0.9.0 (and its main of 2026-08, unchanged), `verl/trainer/ppo/core_algos.py`,
    `compute_gdpo_outcome_advantage`: each component k placed on its response's last valid token, then
    `compute_grpo_outcome_advantage` (the token sum, so r_k; per group of more than one the mean and `torch.std`,
    Bessel; a group of one mean 0, std 1; (r − mean)/(std + ε), ε = 1e-6, times the response mask); the weighted sum
    over components (`gdpo_reward_weights`, else 1); then `verl_F.masked_whiten(·, response_mask) * response_mask`
    (`verl/utils/torch_functional.py`: mean = Σ x·m / (Σ m + 1e-8), var = Σ (x − mean)²·m / (Σ m + 1e-8) · N/(N − 1),
    (x − mean)·rsqrt(var + 1e-8)). Returns ([responses, tokens] advantages, the response mask)."""
    groups, g, k = components.shape
    t = lengths.reshape(-1)
    width = int(t.max())
    mask = (np.arange(width)[None, :] < t[:, None]).astype(float)
    total = np.zeros((groups * g, width))
    for j in range(k):
        r = components[..., j]
        if g == 1:
            mean, std = np.zeros((groups, 1)), np.ones((groups, 1))
        else:
            mean, std = r.mean(axis=1, keepdims=True), r.std(axis=1, ddof=1, keepdims=True)
        scalar = ((r - mean) / (std + eps)).reshape(-1)
        total += weights[j] * scalar[:, None] * mask
    n = mask.sum()
    mu = (total * mask).sum() / (n + 1e-8)
    var = (((total - mu) ** 2) * mask).sum() / (n + 1e-8) * (n / (n - 1))
    return (total - mu) / np.sqrt(var + 1e-8) * mask, mask.astype(bool)


def _case(rng: np.random.Generator, family: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(components [groups, G, K], weights [K], lengths [groups, G]) of one case of `family`."""
    groups, g, k = int(rng.integers(1, 6)), int(rng.choice([2, 3, 4, 5, 8, 16])), int(rng.integers(1, 4))
    kinds = rng.choice(["binary", "continuous", "ties"], size=k)
    comps = np.stack(
        [
            rng.integers(0, 2, (groups, g)).astype(float)
            if kind == "binary"
            else rng.normal(size=(groups, g))
            if kind == "continuous"
            else rng.choice([0.0, 0.25, 0.5, 1.0], size=(groups, g))
            for kind in kinds
        ],
        axis=-1,
    )
    if family in ("flat components", "flat groups"):
        flat = rng.random((groups, k)) < 0.5 if family == "flat components" else np.ones((groups, k), bool)
        if family == "flat groups":
            flat[rng.integers(groups)] = groups == 1  # one group mixed, unless it is the only one
        comps = np.where(flat[:, None, :], comps[:, :1, :], comps)
    weights = np.ones(k) if family == "weights 1" else rng.choice([0.0, 0.5, 1.0, 2.0, rng.uniform(0.1, 3)], size=k)
    return comps, weights, rng.integers(1, 41, (groups, g))


FAMILIES = ("weights 1", "weights drawn", "flat components", "flat groups")


def main() -> None:
    args, rng = random_cases_args(__doc__)
    report: dict[str, dict] = {"gdpo vs TRL normalize_then_sum": {}, "gdpo_tokens vs verl gdpo": {}}
    worst = {name: {} for name in report}
    counts = {name: {} for name in report}
    skipped = 0
    for i in range(args.cases):
        family = FAMILIES[i % len(FAMILIES)]
        comps, weights, lengths = _case(rng, family)
        c = torch.from_numpy(comps)
        w = tuple(float(x) for x in weights)
        ours = ADVANTAGES["gdpo"](c[..., 0], 1e-4, c, w).numpy()
        diffs = {"gdpo vs TRL normalize_then_sum": float(np.abs(ours - trl_normalize_then_sum(comps, weights)).max())}
        if lengths.sum() > 1:  # verl's masked_var refuses a single token
            ours_t = ADVANTAGES["gdpo_tokens"](c[..., 0], 1e-6, c, torch.from_numpy(lengths), w).numpy().reshape(-1)
            theirs, mask = verl_gdpo(comps, weights, lengths)
            diffs["gdpo_tokens vs verl gdpo"] = float(np.abs(ours_t[:, None] * mask - theirs)[mask].max())
        else:
            skipped += 1
        for name, d in diffs.items():
            worst[name][family] = max(worst[name].get(family, 0.0), d)
            counts[name][family] = counts[name].get(family, 0) + 1
    print(f"{'estimator vs reference':34} {'case family':18} {'cases':>5} {'largest |difference|':>21}")
    for name in report:
        for family in FAMILIES:
            if family in worst[name]:
                print(f"{name:34} {family:18} {counts[name][family]:5d} {worst[name][family]:21.3g}")
        overall = max(worst[name].values())
        print(f"{name:34} {'all':18} {sum(counts[name].values()):5d} {overall:21.3g}")
        report[name] = {"largest": overall, "by_family": worst[name], "cases": counts[name]}
    if skipped:
        print(f"left out of the verl comparison: {skipped} cases of one token in all (verl's masked_var refuses them)")
    write_json("gdpo_vs_references", {"cases": args.cases, "seed": args.seed, "references": report})


if __name__ == "__main__":
    main()
