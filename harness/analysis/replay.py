"""An `--until-decided` sweep's looks taken again on its runs, by today's rules: each look reads the seeds its
round had (the record's rounds), so the claims' paths can be re-judged from a store or an evidence file alone."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pandas as pd

from harness.analysis import sequential as seq
from harness.analysis.claims import gather
from harness.config.claims import Claim
from harness.runs.sweep_data import SweepData


def seeds_of(allowed: dict[str, set[int]]) -> Callable[[pd.DataFrame], np.ndarray]:
    """A row mask (`claims.gather`'s `keep`): the runs whose seed is among their arm's `allowed` seeds."""

    def keep(values: pd.DataFrame) -> np.ndarray:
        return np.array([seed in allowed.get(arm, ()) for arm, seed in zip(values["arm"], values["seed"])], bool)

    return keep


def replay(data: SweepData, claims: list[Claim], record: seq.Record) -> seq.Record:
    """The record's looks, each on the first k seeds per arm its round had (the seeds in the order the sweep
    planned them), observed and decided again: the same design and rounds, today's paths and verdicts."""
    order = list(dict.fromkeys(int(p["seed"]) for p in data.planned)) or sorted(set(data.runs["seed"]))
    design, tracks = record.design, [seq.Track(c.id) for c in claims]
    last = len(design.schedule())
    for r in record.rounds:
        allowed = {arm: set(order[:n]) for arm, n in r.seeds.items()}
        open_ = [(c, t) for c, t in zip(claims, tracks) if t.open]
        found = gather(data, [c for c, _ in open_], alpha=design.alpha, keep=seeds_of(allowed))
        for (claim, track), ev in zip(open_, found):
            seq.observe(track, r.look, ev, design, claim.threshold)
        final = r.look == last or max(r.seeds.values(), default=0) >= design.max_seeds
        seq.decide(claims, tracks, design, final=final)
    return seq.Record(design, record.rounds, tracks, record.procedure)
