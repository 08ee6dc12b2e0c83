"""harness's refreshed reference (train.reference_sync_steps, reference_mixup_alpha) against TRL 1.16's own
`SyncRefModelCallback`, on random parameter sets and training trajectories, in float64.

    python benchmarks/reference_refresh_vs_trl.py [--cases 300] [--seed 0]

Each case builds a random small model (embeddings and linear layers of random shapes, float64), a random α in (0, 1]
(1, the hard update, in a fifth of the cases), a refresh every N RL steps of K optimiser steps each, and T RL steps.
After each optimiser step the policy's parameters move at random (the same move on both sides); harness's
`ReferenceRefresh` is called after each RL step, as the loop calls it, and TRL's callback `on_step_end` after each
optimiser step with `global_step` and `ref_model_sync_steps` = N × K, as harness's engine maps it. Prints the largest
absolute difference between the two references at the end of each trajectory (and between `mixup` and one TRL sync
of the same two parameter sets) and the refresh counts, and writes results/benchmarks/reference_refresh_vs_trl.json.
"""

from __future__ import annotations

import copy
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _report import random_cases_args, write_json

from trainer.reference import ReferenceRefresh, mixup


def random_model(rng: np.random.Generator) -> torch.nn.Module:
    """An embedding then 1-3 linear layers of random widths (some without bias), float64, random values."""
    width = int(rng.integers(1, 9))
    layers: list[torch.nn.Module] = [torch.nn.Embedding(int(rng.integers(2, 17)), width)]
    for _ in range(int(rng.integers(1, 4))):
        out = int(rng.integers(1, 9))
        layers.append(torch.nn.Linear(width, out, bias=bool(rng.integers(2))))
        width = out
    model = torch.nn.Sequential(*layers).double()
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.from_numpy(rng.normal(scale=rng.uniform(0.01, 10), size=tuple(p.shape))))
    return model


def one_case(rng: np.random.Generator, accelerator) -> tuple[float, float, int, int]:
    """(largest |Δ| of the references after the trajectory, largest |Δ| of one mixup against one TRL sync, harness's
    refreshes, TRL's syncs)."""
    from trl.trainer.callbacks import SyncRefModelCallback

    policy = random_model(rng)
    alpha = 1.0 if rng.random() < 0.2 else float(rng.uniform(1e-3, 1.0))
    every, per_step, steps = int(rng.integers(1, 5)), int(rng.integers(1, 5)), int(rng.integers(1, 13))

    # one sync of two unrelated parameter sets
    other = copy.deepcopy(policy)
    with torch.no_grad():
        for p in other.parameters():
            p.copy_(torch.from_numpy(rng.normal(scale=rng.uniform(0.01, 10), size=tuple(p.shape))))
    with torch.no_grad():
        ours_once = mixup(dict(other.named_parameters()), dict(policy.named_parameters()), alpha)
    theirs_once = copy.deepcopy(other)
    SyncRefModelCallback._sync_target_model(policy, theirs_once, alpha)
    once = max(float((ours_once[n] - p).abs().max()) for n, p in theirs_once.named_parameters())

    # a trajectory
    ours, theirs = copy.deepcopy(policy).requires_grad_(False), copy.deepcopy(policy).requires_grad_(False)
    refresh = ReferenceRefresh(every, alpha)
    callback = SyncRefModelCallback(ref_model=theirs, accelerator=accelerator)
    args = SimpleNamespace(ref_model_sync_steps=every * per_step, ref_model_mixup_alpha=alpha)
    synced = refreshed = 0
    for step in range(1, steps + 1):
        for k in range(1, per_step + 1):
            with torch.no_grad():
                for p in policy.parameters():
                    p.add_(torch.from_numpy(rng.normal(scale=0.1, size=tuple(p.shape))))
            global_step = (step - 1) * per_step + k
            before = [t.clone() for t in theirs.parameters()]
            callback.on_step_end(args, SimpleNamespace(global_step=global_step), None, model=policy)
            synced += any(not torch.equal(a, b) for a, b in zip(before, theirs.parameters()))
        refreshed += len(refresh(step, ours, policy)) == 2
    trajectory = max(float((a - b).abs().max()) for a, b in zip(ours.parameters(), theirs.parameters()))
    return trajectory, once, refreshed, synced


def main() -> None:
    args, rng = random_cases_args(__doc__)
    from accelerate import Accelerator

    accelerator = Accelerator(cpu=True)  # TRL's callback asks accelerate's state whether DeepSpeed ZeRO-3 is on
    worst_trajectory = worst_once = 0.0
    refreshes = syncs = mismatched = 0
    for _ in range(args.cases):
        trajectory, once, refreshed, synced = one_case(rng, accelerator)
        worst_trajectory, worst_once = max(worst_trajectory, trajectory), max(worst_once, once)
        refreshes, syncs, mismatched = refreshes + refreshed, syncs + synced, mismatched + (refreshed != synced)
    print(
        f"{args.cases} cases (float64): largest |Δ| after a trajectory {worst_trajectory:.3g}, "
        f"of one mixup {worst_once:.3g}"
    )
    print(f"refreshes: harness {refreshes}, TRL {syncs}; cases whose counts differ: {mismatched}")
    write_json(
        "reference_refresh_vs_trl",
        {
            "cases": args.cases,
            "seed": args.seed,
            "largest_difference_trajectory": worst_trajectory,
            "largest_difference_one_mixup": worst_once,
            "refreshes_harness": refreshes,
            "syncs_trl": syncs,
            "cases_with_different_counts": mismatched,
        },
    )


if __name__ == "__main__":
    main()
