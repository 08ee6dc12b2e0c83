"""Each advantage variant against its authors' released formula, on random cases, in float64.

    python benchmarks/advantages_vs_authors.py [--cases 300] [--seed 0]

For each variant: harness's estimator and a transcription, written in NumPy from reading the authors' code (named
below; none of it is copied, and nothing here imports it), run on the same random rewards. The cases cover groups
of 1, 2, odd and even sizes, 0/1 and continuous rewards, flat groups, ties at the median, and several groups at
once. Prints the largest absolute difference per variant and case family, and the cases where the authors' code is
not defined; writes results/benchmarks/advantages_vs_authors.json. ReMax's is compared per token (verl's advantage is a
[responses, tokens] matrix), with each group's greedy reward drawn from its rewards' bytes.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch
from _report import random_cases_args, write_json

from trainer.objective.registry import ADVANTAGES


def mc_grpo_authors(rewards: np.ndarray, eps: float = 1e-3) -> np.ndarray:
    """MC-GRPO, `lotusroot-kim/MC-GRPO`, `src/open_r1/grpo_trainer_gsm.py`, `_generate_and_score_completions` with
    `mc=True` in training: per group of n = G + 1, the lower median m (`Tensor.median`), MAD = lower median of
    |R − m|, A = (R − m) / (MAD + 1e-3); then in each group the advantages not within 1e-6 of 0 are multiplied by
    n / their count; no std scaling."""
    out = np.empty_like(rewards)
    for g, row in enumerate(rewards):
        n = row.size
        m = np.sort(row)[(n - 1) // 2]
        mad = np.sort(np.abs(row - m))[(n - 1) // 2]
        a = (row - m) / (mad + eps)
        nonzero = ~np.isclose(a, 0.0, rtol=1e-5, atol=1e-6)  # torch.isclose's defaults, atol as the authors set
        if nonzero.any():
            a = np.where(nonzero, a * n / nonzero.sum(), a)
        out[g] = a
    return out


def ngrpo_authors(rewards: np.ndarray, eps: float = 1e-6, max_reward: float = 1.0) -> np.ndarray:
    """NGRPO, `nangongrui-ngr/NGRPO`, `verl/trainer/ppo/core_algos.py`, `compute_ngrpo_outcome_advantage`: for a
    group of one, mean 0 and std 1; else mean and (Bessel) std over the group's rewards and one `max_reward`;
    A = (R − mean)/(std + ε)."""
    if rewards.shape[1] == 1:
        return (rewards - 0.0) / (1.0 + eps)
    aug = np.concatenate([rewards, np.full((rewards.shape[0], 1), max_reward)], axis=1)
    return (rewards - aug.mean(axis=1, keepdims=True)) / (aug.std(axis=1, ddof=1, keepdims=True) + eps)


def bnpo_authors(rewards: np.ndarray, cap: float = 1e6) -> np.ndarray:
    """BNPO, `changyi7231/BNPO`, `recipe/bnpo/src/bnpo_ray_trainer.py`, `compute_bnpo_outcome_advantage` (rewards
    already in [0, 1]): each group's p its mean (0 for a group of one), μ and σ² (Bessel) over the groups' p,
    a = (μ(1 − μ)/σ² − 1)·μ, b = (μ(1 − μ)/σ² − 1)·(1 − μ), α = max(1 + a/3, 1), β = max(1 + b/3, 1), and each
    response's advantage min(1/Beta(α, β).pdf(p), 1e6)·(R − p)."""
    from scipy import stats as sps

    p = rewards.mean(axis=1) if rewards.shape[1] > 1 else np.zeros(rewards.shape[0])
    mu, var = (p.mean(), p.var(ddof=1)) if p.size > 1 else (0.0, 1.0)
    k = mu * (1 - mu) / var - 1
    alpha, beta = max(1 + k * mu / 3, 1.0), max(1 + k * (1 - mu) / 3, 1.0)
    with np.errstate(divide="ignore"):
        weight = np.clip(1 / np.exp(sps.beta.logpdf(p, alpha, beta)), 0, cap)
    return weight[:, None] * (rewards - p[:, None])


def reinforce_pp_authors(rewards: np.ndarray, lengths: np.ndarray, baseline: bool) -> np.ndarray:
    """REINFORCE++, verl 0.9.1: `compute_reinforce_plus_plus_outcome_advantage` (each token's return the outcome
    reward, γ = 1) and `..._baseline_outcome_advantage` (the group's mean reward subtracted first, 0 for a group of
    one), then `masked_whiten` over the [responses, tokens] matrix: masked_mean = Σ/(Σ mask + 1e-8), masked_var
    Bessel-corrected by N/(N − 1), (x − mean)·rsqrt(var + 1e-8). Each response's advantage read at its first token."""
    x = rewards - rewards.mean(axis=1, keepdims=True) if baseline and rewards.shape[1] > 1 else rewards
    x, t = x.reshape(-1), lengths.reshape(-1)
    width = max(int(t.max()), 1)
    mask = (np.arange(width)[None, :] < t[:, None]).astype(float)
    values = np.repeat(x[:, None], width, axis=1) * mask
    n = mask.sum()
    mean = (values * mask).sum() / (n + 1e-8)
    var = (((values - mean) ** 2) * mask).sum() / (n + 1e-8) * (n / (n - 1))
    return ((values - mean) / np.sqrt(var + 1e-8))[:, 0].reshape(rewards.shape)


def reinforce_no_std_openrlhf(rewards: np.ndarray, lengths: np.ndarray, baseline: bool) -> np.ndarray:
    """OpenRLHF's REINFORCE++ (`reinforce`) and REINFORCE++-baseline (`reinforce_baseline`, the group mean subtracted
    first) with `--algo.advantage.no_std_norm` (`trainer/ppo_utils/experience_maker.py`): each of response i's T_i
    tokens holds its return (γ = 1, no KL in the reward), the masked mean over all the batch's action tokens is
    subtracted and the rstd is 1. Per response, the value on its tokens."""
    r = rewards - rewards.mean(axis=1, keepdims=True) if baseline else rewards
    tokens = np.concatenate([np.full(int(t), v) for v, t in zip(r.ravel(), lengths.ravel())])
    return r - tokens.sum() / lengths.sum()


def rloo_verl(rewards: np.ndarray) -> np.ndarray:
    """RLOO as verl computes it (`verl/trainer/ppo/core_algos.py`, `compute_rloo_outcome_advantage`): per group of
    n > 1, the group mean m, then R · n/(n − 1) − m · n/(n − 1); a group of one keeps R (left out: harness gives 0)."""
    n = rewards.shape[1]
    m = rewards.mean(axis=1, keepdims=True)
    return rewards * n / (n - 1) - m * n / (n - 1)


def rloo_openrlhf(rewards: np.ndarray) -> np.ndarray:
    """RLOO as OpenRLHF computes it (`advantage_estimator=rloo`, its experience maker): the baseline is the other
    responses' mean, (Σ_j R_j − R_i)/(n − 1), subtracted from R_i."""
    n = rewards.shape[1]
    return rewards - (rewards.sum(axis=1, keepdims=True) - rewards) / (n - 1)


def opo_verl(rewards: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """OPO as verl computes it (`compute_opo_outcome_advantage`): per group of n > 1, the baseline Σ T_j R_j / Σ T_j
    with T_j a response's mask length, subtracted from each R_i; a group of one keeps R (left out: harness gives 0)."""
    return rewards - (lengths * rewards).sum(axis=1, keepdims=True) / lengths.sum(axis=1, keepdims=True)


def remax_verl(rewards: np.ndarray, baselines: np.ndarray, lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """ReMax as verl 0.9.1 computes it, per token (`compute_remax_outcome_advantage`; `ray_trainer.py` sets each
    prompt's `reward_baselines` to its greedy response's summed score and repeats the batch `rollout.n` times,
    interleaved, so every response of a prompt carries it): the token-level rewards hold each response's outcome
    reward on its last response token, the returns are their reverse cumulative sum under the response mask, and the
    advantage is returns − baseline·mask. Returns ([responses, tokens] advantages, the response mask)."""
    x, t = rewards.reshape(-1), lengths.reshape(-1)
    b = np.repeat(baselines.reshape(-1), rewards.shape[1])
    width = max(int(t.max()), 1)
    mask = (np.arange(width)[None, :] < t[:, None]).astype(float)
    token_rewards = np.zeros((x.size, width))
    token_rewards[np.arange(x.size), t - 1] = x
    returns = np.flip(np.cumsum(np.flip(token_rewards * mask, axis=-1), axis=-1), axis=-1)
    return returns - b[:, None] * mask, mask.astype(bool)


def _greedy(r: np.ndarray) -> np.ndarray:
    """[groups, 1] greedy rewards, drawn from the rewards' bytes so both sides see the same: for each group one of
    its own rewards (ties: some advantages exactly 0) or, half the time, a value of its family (0/1 or normal)."""
    seed = int.from_bytes(r.tobytes()[-8:].ljust(8, b"\0"), "little") % (2**32) + 7 * r.size
    rng = np.random.default_rng(seed)
    own = r[np.arange(r.shape[0]), rng.integers(0, r.shape[1], r.shape[0])]
    other = (
        rng.integers(0, 2, r.shape[0]).astype(float) if np.isin(r, (0.0, 1.0)).all() else rng.normal(size=r.shape[0])
    )
    return np.where(rng.random(r.shape[0]) < 0.5, own, other)[:, None]


def _ours_remax(r: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """harness's per-response advantage on each of the response's tokens (what the loss reads), and the mask."""
    adv = ADVANTAGES["remax"](torch.from_numpy(r), 0.0, torch.from_numpy(_greedy(r))).numpy().reshape(-1)
    t = _lengths(r).reshape(-1)
    mask = np.arange(max(int(t.max()), 1))[None, :] < t[:, None]
    return adv[:, None] * mask, mask


def passk_verl(rewards: np.ndarray, eps: float = 1e-6) -> np.ndarray:
    """Pass@k as verl computes it (`compute_grpo_passk_outcome_advantage`, std on): per group of n ≥ 2, 0 everywhere
    but the top response (its `topk` index), which gets (R_max − R_second) / (std + ε), std with ddof 1."""
    out = np.zeros_like(rewards)
    for g, row in enumerate(rewards):
        order = np.argsort(-row, kind="stable")
        out[g, order[0]] = (row[order[0]] - row[order[1]]) / (row.std(ddof=1) + eps)
    return out


def gpg_verl(rewards: np.ndarray) -> np.ndarray:
    """GPG as verl computes it (`compute_gpg_outcome_advantage`, f_norm 1): α = B / max(#non-zero rewards, 1) over the
    batch, A = α·(R − the group mean); a group of one has mean 0 (left out: harness gives 0)."""
    alpha = rewards.size / max(np.count_nonzero(rewards), 1)
    return alpha * (rewards - rewards.mean(axis=1, keepdims=True))


def gpg_authors(rewards: np.ndarray) -> np.ndarray:
    """GPG as its authors compute it (`AMAP-ML/GPG`, `open-r1/src/open_r1/gpg_trainer.py`, F_norm 1, one generation
    round): A = R − the group mean; inverse_alpha = min(1, #groups whose std is not 0 / #groups), and `compute_loss`
    divides the loss −A·log π by it, the same as A / inverse_alpha. Not defined when every group is flat (÷ 0)."""
    valid = (rewards.std(axis=1, ddof=1) != 0).sum()
    return (rewards - rewards.mean(axis=1, keepdims=True)) / min(1.0, valid / rewards.shape[0])


def _lengths(r: np.ndarray) -> np.ndarray:
    """Each response's token count (1–40), drawn from the rewards' bytes so both sides see the same ones."""
    seed = int.from_bytes(r.tobytes()[:8].ljust(8, b"\0"), "little") % (2**32) + r.size
    return np.random.default_rng(seed).integers(1, 41, r.shape)


def _ours_tokens(r: np.ndarray, name: str) -> np.ndarray:
    return ADVANTAGES[name](torch.from_numpy(r), 0.0, torch.from_numpy(_lengths(r))).numpy()


def _bnpo_defined(r: np.ndarray) -> bool:
    """Rewards in [0, 1], groups of more than one, and one group or success rates that vary (else σ² = 0)."""
    return bool(((r >= 0) & (r <= 1)).all()) and r.shape[1] > 1 and (r.shape[0] == 1 or r.mean(axis=1).var() > 0)


def psr_nsr_authors(rewards: np.ndarray, mode: str, weight: float = 0.1) -> tuple[np.ndarray, np.ndarray]:
    """NSR and W-REINFORCE, `TianHongZXY/RLVR-Decomposed`, `verl/trainer/ppo/core_algos.py`,
    `compute_psr_nsr_outcome_advantage` (γ = 1, so each response's return is its reward R) and `ray_trainer.py`'s
    batch subset: `negative` gives R − 1 and keeps only the incorrect responses (score 0); `weighted` gives R·λ to a
    correct response (score 1) and R − 1 to an incorrect one, and keeps all. Returns (advantage, kept)."""
    correct, incorrect = rewards == 1, rewards == 0
    if mode == "negative":
        return rewards - 1, incorrect
    return np.where(correct, rewards * weight, np.where(incorrect, rewards - 1, rewards)), np.ones_like(correct)


def _ours_psr_nsr(rewards: np.ndarray, preset: str) -> tuple[np.ndarray, np.ndarray]:
    """harness's preset: the advantage times its loss weight (`sign_weight`), and the rows it trains."""
    from trainer.objective import ObjectiveSettings
    from trainer.objective.masks import sign_weight
    from trainer.objective.sampling import trained_samples

    s = ObjectiveSettings.preset(preset)
    r = torch.from_numpy(rewards)
    adv = ADVANTAGES[s.advantage](r, s.adv_eps)
    if s.positive_weight is not None:
        adv = adv * sign_weight(adv, s.positive_weight)
    return adv.numpy(), trained_samples(r, s, r == 1).numpy()


def _cases(rng: np.random.Generator, count: int, binary: bool = False) -> list[tuple[str, np.ndarray]]:
    """(family, rewards [groups, n]) drawn across the families the docstring lists; with `binary`, 0/1 rewards
    only (for the variants whose authors' code splits by correct and incorrect), flat groups of each kind among
    them."""
    families = (
        ("binary", "binary, all wrong", "binary, all correct") if binary else ("binary", "continuous", "ties", "flat")
    )
    out = []
    for i in range(count):
        n = int(rng.choice([1, 2, 3, 4, 5, 6, 8, 9, 17]))
        groups = int(rng.integers(1, 6))
        family = families[i % len(families)]
        if family == "binary":
            r = rng.integers(0, 2, (groups, n)).astype(float)
        elif family.startswith("binary, all"):  # some groups flat at 0 or 1 beside mixed ones
            r = rng.integers(0, 2, (groups, n)).astype(float)
            r[rng.random(groups) < 0.5] = 0.0 if family.endswith("wrong") else 1.0
        elif family == "continuous":
            r = rng.normal(size=(groups, n))
        elif family == "ties":  # a few distinct values, many ties at the median
            r = rng.choice([0.0, 0.25, 0.5, 1.0], size=(groups, n))
        else:
            r = np.repeat(rng.normal(size=(groups, 1)), n, axis=1)
        out.append((f"{family}, n {'1' if n == 1 else '2' if n == 2 else 'odd' if n % 2 else 'even'}", r))
    return out


VARIANTS: dict[str, tuple[Callable, Callable, Callable[[np.ndarray], bool]]] = {
    "RLOO (rloo) vs verl": (
        lambda r: (ADVANTAGES["rloo"](torch.from_numpy(r), 0.0).numpy(), np.ones(r.shape, bool)),
        lambda r: (rloo_verl(r), np.ones(r.shape, bool)),
        lambda r: r.shape[1] > 1,
    ),
    "RLOO (rloo) vs OpenRLHF": (
        lambda r: (ADVANTAGES["rloo"](torch.from_numpy(r), 0.0).numpy(), np.ones(r.shape, bool)),
        lambda r: (rloo_openrlhf(r), np.ones(r.shape, bool)),
        lambda r: r.shape[1] > 1,
    ),
    "OPO (opo) vs verl": (
        lambda r: (_ours_tokens(r, "opo"), np.ones(r.shape, bool)),
        lambda r: (opo_verl(r, _lengths(r)), np.ones(r.shape, bool)),
        lambda r: r.shape[1] > 1,
    ),
    "ReMax (remax) vs verl, per token": (
        _ours_remax,
        lambda r: remax_verl(r, _greedy(r), _lengths(r)),
        lambda r: True,
    ),
    "pass@k (passk) vs verl": (
        lambda r: (ADVANTAGES["passk"](torch.from_numpy(r), 1e-6).numpy(), np.ones(r.shape, bool)),
        lambda r: (passk_verl(r), np.ones(r.shape, bool)),
        lambda r: r.shape[1] > 1,
    ),
    "GPG (gpg) vs the authors": (
        lambda r: (ADVANTAGES["gpg"](torch.from_numpy(r), 0.0).numpy(), np.ones(r.shape, bool)),
        lambda r: (gpg_authors(r), np.ones(r.shape, bool)),
        lambda r: r.shape[1] > 1 and bool((r.std(axis=1) > 0).any()),
    ),
    "GPG (gpg_nonzero) vs verl": (
        lambda r: (ADVANTAGES["gpg_nonzero"](torch.from_numpy(r), 0.0).numpy(), np.ones(r.shape, bool)),
        lambda r: (gpg_verl(r), np.ones(r.shape, bool)),
        lambda r: r.shape[1] > 1,
    ),
    "MC-GRPO (mc_grpo)": (
        lambda r: (ADVANTAGES["group_median_mad"](torch.from_numpy(r), 1e-3).numpy(), np.ones(r.shape, bool)),
        lambda r: (mc_grpo_authors(r), np.ones(r.shape, bool)),
        lambda r: True,
    ),
    "NGRPO (ngrpo)": (
        lambda r: (ADVANTAGES["ngrpo"](torch.from_numpy(r), 1e-6, (0.0, 1.0), "unit").numpy(), np.ones(r.shape, bool)),
        lambda r: (ngrpo_authors(r), np.ones(r.shape, bool)),
        lambda r: bool(((r >= 0) & (r <= 1)).all()),
    ),
    "BNPO (bnpo)": (
        lambda r: (ADVANTAGES["bnpo"](torch.from_numpy(r), 0.0, (0.0, 1.0), None, 1e6).numpy(), np.ones(r.shape, bool)),
        lambda r: (bnpo_authors(r), np.ones(r.shape, bool)),
        lambda r: (
            bool(((r >= 0) & (r <= 1)).all()) and r.shape[1] > 1 and (r.shape[0] == 1 or r.mean(axis=1).var() > 0)
        ),
    ),
    "REINFORCE++ (reinforce_pp)": (
        lambda r: (_ours_tokens(r, "batch_norm_tokens"), np.ones(r.shape, bool)),
        lambda r: (reinforce_pp_authors(r, _lengths(r), False), np.ones(r.shape, bool)),
        lambda r: r.size > 1,
    ),
    "REINFORCE++ baseline (reinforce_pp_baseline)": (
        lambda r: (_ours_tokens(r, "group_mean_batch_norm_tokens"), np.ones(r.shape, bool)),
        lambda r: (reinforce_pp_authors(r, _lengths(r), True), np.ones(r.shape, bool)),
        lambda r: r.size > 1,
    ),
    "REINFORCE++ no_std_norm (batch_mean_tokens) vs OpenRLHF": (
        lambda r: (_ours_tokens(r, "batch_mean_tokens"), np.ones(r.shape, bool)),
        lambda r: (reinforce_no_std_openrlhf(r, _lengths(r), False), np.ones(r.shape, bool)),
        lambda r: True,
    ),
    "REINFORCE++-baseline no_std_norm (group_mean_batch_mean_tokens) vs OpenRLHF": (
        lambda r: (_ours_tokens(r, "group_mean_batch_mean_tokens"), np.ones(r.shape, bool)),
        lambda r: (reinforce_no_std_openrlhf(r, _lengths(r), True), np.ones(r.shape, bool)),
        lambda r: True,
    ),
    "NSR (nsr)": (
        lambda r: _ours_psr_nsr(r, "nsr"),
        lambda r: psr_nsr_authors(r, "negative"),
        lambda r: bool(np.isin(r, (0.0, 1.0)).all()),
    ),
    "W-REINFORCE (w_reinforce)": (
        lambda r: _ours_psr_nsr(r, "w_reinforce"),
        lambda r: psr_nsr_authors(r, "weighted"),
        lambda r: bool(np.isin(r, (0.0, 1.0)).all()),
    ),
}
"""Variant → (harness: (advantage × loss weight, rows trained), the authors' formula: the same, where the authors'
code is defined). MC-GRPO's pivot is left out of the comparison (which tied median response, docs/objective.md)."""


BINARY_ONLY = (
    "NSR (nsr)",
    "W-REINFORCE (w_reinforce)",
    "BNPO (bnpo)",
    "NGRPO (ngrpo)",
    "GPG (gpg) vs the authors",
    "GPG (gpg_nonzero) vs verl",
    "ReMax (remax) vs verl, per token",
)
"""Variants run on `--cases` more 0/1 cases: those whose authors' code is defined on 0/1 (BNPO: [0, 1]) rewards only,
and GPG's, whose α moves with the flat groups (the authors') and the correct answers (verl's) those cases hold."""


def main() -> None:
    args, rng = random_cases_args(__doc__)
    cases = _cases(rng, args.cases)
    binary = _cases(rng, args.cases, binary=True)
    # 100 groups at p = 1/2 and one at 1/8: BNPO's 1/f there is ~4.4e9, so the cap binds
    binary.append(("binary, cap binds", np.array([[1.0] * 4 + [0.0] * 4] * 100 + [[1.0] + [0.0] * 7])))
    report = {}
    print(f"{'variant':44} {'case family':30} {'cases':>5} {'largest |difference|':>21}")
    for variant, (ours_of, authors, defined) in VARIANTS.items():
        worst: dict[str, float] = {}
        counts: dict[str, int] = {}
        undefined: dict[str, int] = {}
        for family, rewards in cases + (binary if variant in BINARY_ONLY else []):
            if not defined(rewards):
                undefined[family] = undefined.get(family, 0) + 1
                continue
            (ours, kept), (theirs, their_kept) = ours_of(rewards), authors(rewards)
            if not np.array_equal(kept, their_kept):
                diff = float("inf")  # another set of responses trained
            else:
                diff = float(np.max(np.abs(ours - theirs)[kept], initial=0.0))
            worst[family] = max(worst.get(family, 0.0), diff)
            counts[family] = counts.get(family, 0) + 1
        for family in sorted(worst):
            print(f"{variant:44} {family:30} {counts[family]:5d} {worst[family]:21.3g}")
        overall = max(worst.values())
        print(f"{variant:44} {'all':30} {sum(counts.values()):5d} {overall:21.3g}")
        if undefined:
            print(f"{variant:44} left out: where the authors' code is not defined (rewards it does not take; BNPO's "
                  "batches of one success rate, where it divides by 0; REINFORCE++'s single token; GPG's all-flat "
                  "batches, where the authors' divides by 0) or departs by design (BNPO's, RLOO's, OPO's, pass@k's "
                  "and GPG's groups of one, named in their docstrings): "
                  + ", ".join(f"{k} ({v})" for k, v in sorted(undefined.items())))  # fmt: skip
        report[variant] = {"largest": overall, "by_family": worst, "cases": counts, "undefined": undefined}
    write_json("advantages_vs_authors", {"cases": args.cases, "seed": args.seed, "variants": report})


if __name__ == "__main__":
    main()
