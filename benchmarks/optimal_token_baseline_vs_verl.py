"""The optimal token baseline against verl's own functions, on random cases, in float64.

    python benchmarks/optimal_token_baseline_vs_verl.py [--cases 300] [--seed 0]
        [--verl-repo PATH] [--verl-rev REV] [--verl-wheel verl-0.9.1-py3-none-any.whl]

harness's `optimal_token_baseline` against verl's `compute_optimal_token_baseline_advantage` (adv_estimator
optimal_token_baseline) and `compute_multi_turn_optimal_token_baseline_advantage` (tir_optimal_token_baseline), the
functions themselves: `verl/trainer/ppo/core_algos.py` is read from a git snapshot of verl (`git show REV:...`, the
`fetch github:volcengine/verl` mirror by default) and, when given, from verl's released wheel; the two functions'
source is taken out of the file as written (the module imports omegaconf and the rest of verl, which are not
installed here, so the file is not imported whole) and compiled into a namespace with torch, numpy and
`collections.defaultdict`, their only names. Nothing is transcribed.

Each case: 1-4 prompt groups of 2-12 responses each, rows shuffled (verl groups them by `index`), response lengths of
1-24 tokens with ties (a tied longest response, a unique one), rewards 0/1, continuous, or flat in a group; each
token's probability and Σ_v π² from random logits over a vocabulary of 3-40 (softmax at temperatures 0.3-2, so some
tokens are near-certain) and a sampled token; in a third of the cases a rollout weight ρ̄ per token. The reward sits on
each response's last token (verl's token-level rewards), so every token's return is the response's reward, which is
what harness hands. ε = 1e-8 (verl's default, the preset `otb`'s adv_eps). Groups of one response are left out
(harness gives 0, verl the reward: a stated difference). verl's b178a3c (0.8.0.dev) OTB function defaults to
`handle_zero_tail=False`; 0.9.1's to True, which harness follows: the snapshot's is called with True, and is also
reported with its own default beside, to show what the zero tail changes. Prints a table of the largest absolute
difference per reference and case family; writes results/benchmarks/optimal_token_baseline_vs_verl.json.
"""

from __future__ import annotations

import argparse
import ast
import subprocess
import tempfile
import zipfile
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
import torch
from _report import write_json

from trainer.objective import ADVANTAGES, TokenProbabilities, token_logprobs, token_sum_pi_squared

CORE_ALGOS = "verl/trainer/ppo/core_algos.py"
FUNCTIONS = ("compute_optimal_token_baseline_advantage", "compute_multi_turn_optimal_token_baseline_advantage")
MIRROR = "/work/.mirror/volcengine+verl/repo"
EPS = 1e-8


def verl_functions(source: str, origin: str) -> dict[str, Any]:
    """verl's two OTB functions compiled from `source` (core_algos.py's text) as written, without their registering
    decorators; a temporary copy of the file is what is parsed, named by `origin` in tracebacks."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "core_algos.py"
        path.write_text(source)
        tree = ast.parse(path.read_text(), filename=origin)
    namespace: dict[str, Any] = {"torch": torch, "np": np, "defaultdict": defaultdict}
    found = {}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name in FUNCTIONS:
            node.decorator_list = []
            module = ast.Module(body=[node], type_ignores=[])
            exec(compile(module, origin, "exec"), namespace)  # verl's own function body
            found[node.name] = namespace[node.name]
    missing = set(FUNCTIONS) - set(found)
    if missing:
        raise SystemExit(f"{origin}: no {', '.join(sorted(missing))}")
    return found


def from_git(repo: str, rev: str) -> tuple[str, str]:
    """(core_algos.py's text at `rev` of the git repository `repo`, its label)."""
    head = subprocess.run(["git", "-C", repo, "rev-parse", "--short", rev], capture_output=True, text=True)
    if head.returncode != 0:
        raise SystemExit(f"{repo}: not a git snapshot of verl (fetch github:volcengine/verl): {head.stderr.strip()}")
    text = subprocess.run(
        ["git", "-C", repo, "show", f"{rev}:{CORE_ALGOS}"], capture_output=True, text=True, check=True
    )
    return text.stdout, f"verl {head.stdout.strip()}"


def from_wheel(wheel: str) -> tuple[str, str]:
    """(core_algos.py's text in verl's wheel, its label)."""
    with zipfile.ZipFile(wheel) as archive:
        return archive.read(CORE_ALGOS).decode(), Path(wheel).name.split("-py3")[0].replace("-", " ")


def draw_case(rng: np.random.Generator) -> dict[str, Any]:
    """One random batch (see the module's docstring)."""
    groups, G = int(rng.integers(1, 5)), int(rng.integers(2, 13))
    kind = str(rng.choice(["binary", "continuous", "flat"]))
    if kind == "binary":
        rewards = rng.integers(0, 2, (groups, G)).astype(float)
    elif kind == "continuous":
        rewards = rng.normal(size=(groups, G))
    else:
        rewards = np.repeat(rng.choice([0.0, 1.0, rng.normal()], (groups, 1)), G, axis=1)
    lengths = rng.integers(1, 25, (groups, G))
    if rng.random() < 0.4:  # a tied longest response in each group
        for row in lengths:
            row[rng.choice(G, 2, replace=False)] = row.max()
    width = int(lengths.max())
    vocab, temperature = int(rng.integers(3, 41)), float(rng.uniform(0.3, 2.0))
    logits = torch.tensor(rng.normal(size=(groups, G, width, vocab)) * 3 / temperature)
    probs = torch.softmax(logits, -1)
    gen = torch.Generator().manual_seed(int(rng.integers(2**31)))
    tokens = torch.multinomial(probs.reshape(-1, vocab), 1, generator=gen).view(groups, G, width)
    mask = torch.arange(width)[None, None, :] < torch.tensor(lengths)[..., None]
    logp = torch.where(mask, token_logprobs(logits, tokens), 0.0)
    squares = torch.where(mask, token_sum_pi_squared(logits), 0.0)
    weight = None
    if rng.random() < 1 / 3:
        weight = torch.where(mask, torch.tensor(rng.uniform(0.2, 3.0, (groups, G, width))), 0.0)
    return {
        "family": kind + (" + ρ̄" if weight is not None else ""),
        "rewards": torch.tensor(rewards),
        "lengths": torch.tensor(lengths),
        "probs": TokenProbabilities(logp, squares, weight),
        "order": torch.tensor(rng.permutation(groups * G)),
    }


def harness(case: dict[str, Any]) -> torch.Tensor:
    """harness's advantages, [responses, width], rows group by group."""
    adv = ADVANTAGES["optimal_token_baseline"](case["rewards"], EPS, case["lengths"], case["probs"])
    return adv.flatten(0, 1)


def verl(fn: Any, case: dict[str, Any], **kwargs: Any) -> torch.Tensor:
    """verl's advantages for the case's rows in its shuffled order, put back group by group: the reward on each
    response's last token, the response mask from the lengths, `index` each row's group."""
    order = case["order"]
    rewards, lengths, probs = case["rewards"].flatten(), case["lengths"].flatten(), case["probs"]
    G = case["rewards"].shape[1]
    width = probs.logp.shape[-1]
    mask = (torch.arange(width)[None, :] < lengths[:, None]).double()
    token_rewards = torch.zeros(len(rewards), width, dtype=torch.float64)
    token_rewards[torch.arange(len(rewards)), lengths - 1] = rewards
    weights = None if probs.rollout_weight is None else probs.rollout_weight.flatten(0, 1)[order]
    advantages, _ = fn(
        token_level_rewards=token_rewards[order],
        response_mask=mask[order],
        index=np.array([f"p{int(i) // G}" for i in order], dtype=object),
        old_log_probs=probs.logp.flatten(0, 1)[order],
        sum_pi_squared=probs.sum_pi_squared.flatten(0, 1)[order],
        rollout_is_weights=weights,
        epsilon=EPS,
        **kwargs,
    )
    out = torch.empty_like(advantages)
    out[order] = advantages
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", type=int, default=300)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--verl-repo", default=MIRROR, help="a git snapshot of github.com/volcengine/verl")
    ap.add_argument("--verl-rev", default="HEAD")
    ap.add_argument("--verl-wheel", default=None, help="verl's released wheel (pip download verl==0.9.1 --no-deps)")
    args = ap.parse_args()
    rng = np.random.default_rng(args.seed)
    sources = [from_git(args.verl_repo, args.verl_rev)]
    if args.verl_wheel:
        sources.append(from_wheel(args.verl_wheel))
    references: dict[str, tuple[Any, dict[str, Any]]] = {}
    for text, label in sources:
        fns = verl_functions(text, f"{label}:{CORE_ALGOS}")
        otb, tir = (fns[name] for name in FUNCTIONS)
        references[f"{label} optimal_token_baseline, zero tail"] = (otb, {"handle_zero_tail": True})
        references[f"{label} tir_optimal_token_baseline"] = (tir, {})
        references[f"{label} optimal_token_baseline, its default"] = (otb, {})
    worst: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    counts: dict[str, int] = defaultdict(int)
    for _ in range(args.cases):
        case = draw_case(rng)
        counts[case["family"]] += 1
        mine = harness(case)
        for name, (fn, kwargs) in references.items():
            diff = (verl(fn, case, **kwargs) - mine).abs().max().item()
            worst[name][case["family"]] = max(worst[name][case["family"]], diff)
    families = sorted(counts)
    print(f"largest |harness − verl| over {args.cases} cases, by family (ρ̄: with rollout weights)")
    print(f"{'reference':<52}" + "".join(f"{f:>17}" for f in families) + f"{'all':>10}")
    print(f"{'cases':<52}" + "".join(f"{counts[f]:>17}" for f in families) + f"{args.cases:>10}")
    result = {}
    for name in references:
        row = worst[name]
        overall = max(row.values())
        print(f"{name:<52}" + "".join(f"{row[f]:>17.1e}" for f in families) + f"{overall:>10.1e}")
        result[name] = {"by_family": dict(row), "largest": overall}
    write_json(
        "optimal_token_baseline_vs_verl",
        {"cases": args.cases, "seed": args.seed, "families": dict(counts), "eps": EPS, "references": result},
    )


if __name__ == "__main__":
    main()
