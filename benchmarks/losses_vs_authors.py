"""Each policy loss against its reference implementation's formula, on random cases, in float64: the loss and its
gradient with respect to the policy's log-probabilities.

    python benchmarks/losses_vs_authors.py [--cases 300] [--seed 0]

For each switch: harness's `policy_loss` (its gradient by autograd) and a transcription, written in NumPy from
reading the reference code named below (none of it is copied, and nothing here imports it), with the gradient
derived by hand from that code (where it takes a min of two equal branches, torch splits the gradient between them,
which sums to the unclipped one). The cases draw 1-8 responses of 1-12 tokens (each with at least one loss token),
probabilities in (0.02, 0.98), π_old a perturbation of π (so that clips, trust regions and caps bind), advantages
normal with some exactly 0, and the switches' parameters at random. Prints the largest absolute difference per
switch and how many cases had a token whose gradient the switch zeroed; writes
results/benchmarks/losses_vs_authors.json. verl's GMPO divides the summed log-ratios by T_i + 1e-8 where harness and
TRL divide by T_i: its largest difference is that 1e-8 times large ratios (ρ up to ~e^4.6 in these cases).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch
from _report import random_cases_args, write_json

from trainer.objective import ObjectiveSettings, policy_loss

Case = dict
"""lp, olp [B, T] (log π, log π_old), m [B, T] (0/1), a [B] (advantages), and the switch's parameters."""


def _case(rng: np.random.Generator) -> Case:
    b, t = int(rng.integers(1, 9)), int(rng.integers(1, 13))
    lengths = rng.integers(1, t + 1, b)
    m = (np.arange(t) < lengths[:, None]).astype(float)
    p = rng.uniform(0.02, 0.98, (b, t))
    old = np.clip(p + rng.normal(0, rng.choice([0.02, 0.1, 0.3]), (b, t)), 0.01, 0.99)
    a = rng.normal(size=b) * (rng.random(b) > 0.2)
    return {
        "lp": np.log(p),
        "olp": np.log(old),
        "m": m,
        "a": a,
        "eps": (float(rng.uniform(0.05, 0.5)), float(rng.uniform(0.05, 0.5))),
        "delta": (float(rng.uniform(0.01, 0.2)), float(rng.uniform(0.01, 0.2))),
        "cap": float(rng.choice([1.05, 1.5, 20.0])),
        "beta": float(rng.uniform(0.01, 2.0)),
    }


# ---- the references: (loss, ∂loss/∂log π) --------------------------------------------------------------------------
def _agg(loss: np.ndarray, grad: np.ndarray, m: np.ndarray, mode: str) -> tuple[float, np.ndarray]:
    """verl's `agg_loss` on one rank: token-mean Σ ℓ m / Σ m; seq-mean-token-sum Σ_i (Σ_t ℓ m) / #responses with a
    loss token."""
    div = m.sum() if mode == "token-mean" else float((m.sum(-1) > 0).sum())
    return float((loss * m).sum() / div), grad * m / div


def geo_mean_verl(c: Case) -> tuple[float, np.ndarray]:
    """verl 0.9.1 `compute_policy_loss_geo_mean`: sgn(A)·min(sgn(A)·log r, sgn(A)·clamp(log r, −ε_low, ε_high)),
    ρ = exp(Σ m·that / (Σ m + 1e-8)), loss = mean over responses of −A·ρ. ∂/∂log r = 1 where the min keeps log r
    (A > 0: log r ≤ ε_high; A < 0: log r ≥ −ε_low), else 0; 0 for A = 0."""
    lr, m, a = c["lp"] - c["olp"], c["m"], c["a"][:, None]
    low, high = c["eps"]
    sgn = np.sign(a)
    clamp = np.clip(lr, -low, high)
    kept = sgn * np.minimum(sgn * lr, sgn * clamp)
    n = m.sum(-1, keepdims=True) + 1e-8
    rho = np.exp((kept * m).sum(-1, keepdims=True) / n)
    free = np.where(a > 0, lr <= high, lr >= -low) & (sgn != 0)
    b = lr.shape[0]
    return float((-a * rho).mean()), -a * rho * m * free / n / b


def geo_mean_trl(c: Case) -> tuple[float, np.ndarray]:
    """TRL 1.16 `trl/experimental/gmpo/gmpo_trainer.py`, `_compute_loss` (β = 0, one micro-batch): for A > 0
    min(log r, clamp), else max(log r, clamp); ρ = exp(Σ m·that / max(Σ m, 1)); loss = mean of −A·ρ."""
    lr, m, a = c["lp"] - c["olp"], c["m"], c["a"][:, None]
    low, high = c["eps"]
    clamp = np.clip(lr, -low, high)
    kept = np.where(a > 0, np.minimum(lr, clamp), np.maximum(lr, clamp))
    n = np.maximum(m.sum(-1, keepdims=True), 1.0)
    rho = np.exp((kept * m).sum(-1, keepdims=True) / n)
    free = np.where(a > 0, lr <= high, lr >= -low)
    b = lr.shape[0]
    return float((-a * rho).mean()), -a * rho * m * free / n / b


def dppo_verl(c: Case, kind: str, mode: str) -> tuple[float, np.ndarray]:
    """verl 0.9.1 `compute_policy_loss_dppo_tv` / `_kl`: r = exp(clamp(log r, ±20)), weight sg(min(r, c)); TV: valid
    = (π − π_old ≤ δ_high) for A > 0, (π − π_old ≥ −δ_low) otherwise; KL: D = p(log p − log π) + (1 − p)·log((1 − p +
    1e-8)/(1 − π + 1e-8)), p = π_old, valid = (D ≤ δ_high or π ≤ p) for A > 0, (D ≤ δ_low or π ≥ p) otherwise;
    ℓ = −A·weight·log π·valid. ∂ℓ/∂log π = −A·weight·valid (weight and mask detached)."""
    lp, olp, a = c["lp"], c["olp"], c["a"][:, None]
    low, high = c["delta"]
    w = np.minimum(np.exp(np.clip(lp - olp, -20, 20)), c["cap"])
    q, p = np.exp(lp), np.exp(olp)
    if kind == "tv":
        valid = np.where(a > 0, q - p <= high, q - p >= -low)
    else:
        d = p * (olp - lp) + (1 - p) * np.log((1 - p + 1e-8) / (1 - q + 1e-8))
        valid = np.where(a > 0, (d <= high) | (q <= p), (d <= low) | (q >= p))
    return _agg(-a * w * lp * valid, -a * w * valid, c["m"], mode)


def dro_verl(c: Case, mode: str) -> tuple[float, np.ndarray]:
    """verl 0.9.1 `compute_policy_loss_dro`: ℓ = −(log π·A − ½β(log π − log π_old)²); ∂ℓ/∂log π = −A + β·log r."""
    lp, lr, a, beta = c["lp"], c["lp"] - c["olp"], c["a"][:, None], c["beta"]
    return _agg(-(lp * a - 0.5 * beta * lr**2), -a + beta * lr, c["m"], mode)


def gpg_verl(c: Case, mode: str) -> tuple[float, np.ndarray]:
    """verl 0.9.1 `compute_policy_loss_gpg`: ℓ = −log π·A; ∂ℓ/∂log π = −A."""
    a = c["a"][:, None]
    return _agg(-c["lp"] * a, -a * np.ones_like(c["lp"]), c["m"], mode)


def rloo_trl(c: Case) -> tuple[float, np.ndarray]:
    """TRL 1.16 `trl/trainer/rloo_trainer.py`, `_compute_loss`: log w = Σ_t m log π − Σ_t m log π_old, w = exp,
    loss = mean over responses of −min(w·A, clamp(w, 1 − ε_low, 1 + ε_high)·A); ∂/∂log π_t = −A·w·m_t where the
    unclipped branch is the min (or ties), else 0."""
    m, a = c["m"], c["a"]
    low, high = c["eps"]
    w = np.exp(((c["lp"] - c["olp"]) * m).sum(-1))
    clipped = np.clip(w, 1 - low, 1 + high)
    loss = -np.minimum(w * a, clipped * a)
    free = (w * a <= clipped * a)[:, None]
    b = len(a)
    return float(loss.mean()), -(a * w)[:, None] * m * free / b


# ---- harness ---------------------------------------------------------------------------------------------------
def ours(c: Case, preset: str, **over) -> tuple[float, np.ndarray]:
    s = ObjectiveSettings.preset(preset, max_len=c["m"].shape[1], **over)
    lp = torch.from_numpy(c["lp"]).requires_grad_(True)
    out = policy_loss(lp, torch.from_numpy(c["olp"]), torch.from_numpy(c["a"]), torch.from_numpy(c["m"]), s)
    (g,) = torch.autograd.grad(out.loss, lp)
    return out.loss.item(), g.numpy()


AGGREGATION = {"token-mean": "token_mean", "seq-mean-token-sum": "seq_mean_token_sum"}


def _ours_gmpo(c: Case) -> tuple[float, np.ndarray]:
    return ours(c, "gmpo", clip_low=c["eps"][0], clip_high=c["eps"][1])


def _ours_dppo(c: Case, kind: str, mode: str) -> tuple[float, np.ndarray]:
    over = {"dppo_bounds": c["delta"], "dppo_ratio_cap": c["cap"], "aggregation": AGGREGATION[mode]}
    return ours(c, f"dppo_{kind}", **over)


SWITCHES: dict[str, tuple[Callable[[Case], tuple], Callable[[Case], tuple]]] = {
    "GMPO (gmpo) vs verl geo_mean (÷ T_i + 1e-8)": (_ours_gmpo, geo_mean_verl),
    "GMPO (gmpo) vs TRL GMPOTrainer": (_ours_gmpo, geo_mean_trl),
    **{
        f"DPPO-Binary-{kind.upper()} (dppo_{kind}) vs verl dppo_{kind}, {mode}": (
            lambda c, kind=kind, mode=mode: _ours_dppo(c, kind, mode),
            lambda c, kind=kind, mode=mode: dppo_verl(c, kind, mode),
        )
        for kind in ("tv", "kl")
        for mode in AGGREGATION
    },
    **{
        f"DRO (dro) vs verl dro, {mode}": (
            lambda c, mode=mode: ours(c, "grpo", surrogate="dro", dro_beta=c["beta"], aggregation=AGGREGATION[mode]),
            lambda c, mode=mode: dro_verl(c, mode),
        )
        for mode in AGGREGATION
    },
    **{
        f"GPG loss (gpg) vs verl gpg, {mode}": (
            lambda c, mode=mode: ours(c, "gpg", aggregation=AGGREGATION[mode]),
            lambda c, mode=mode: gpg_verl(c, mode),
        )
        for mode in AGGREGATION
    },
    "Π_t r_t (ratio sequence_product) vs TRL RLOOTrainer": (
        lambda c: ours(c, "grpo", ratio="sequence_product", clip_low=c["eps"][0], clip_high=c["eps"][1]),
        rloo_trl,
    ),
}
"""Switch → (harness, the reference), each (loss, gradient w.r.t. log π)."""


def main() -> None:
    args, rng = random_cases_args(__doc__)
    cases = [_case(rng) for _ in range(args.cases)]
    report = {}
    print(f"{'switch':62} {'cases':>5} {'|Δ loss|':>10} {'|Δ grad|':>10} {'clipped':>7}")
    for name, (ours_of, theirs_of) in SWITCHES.items():
        d_loss = d_grad = 0.0
        acted = 0  # cases where the switch's clip, trust region or cap changed a gradient from −A (or −A·r)
        for c in cases:
            (l1, g1), (l2, g2) = ours_of(c), theirs_of(c)
            d_loss, d_grad = max(d_loss, abs(l1 - l2)), max(d_grad, float(np.abs(g1 - g2).max()))
            acted += int(np.any((g2 == 0) & (c["m"] > 0) & (c["a"][:, None] != 0)))
        print(f"{name:62} {len(cases):5d} {d_loss:10.3g} {d_grad:10.3g} {acted:7d}")
        report[name] = {"cases": len(cases), "largest_loss": d_loss, "largest_grad": d_grad, "cases_clipped": acted}
    write_json("losses_vs_authors", {"cases": args.cases, "seed": args.seed, "switches": report})


if __name__ == "__main__":
    main()
