"""Every published verdict in one ledger, judged again from the evidence files (docs/evidence/).

- **Seed sets.** Evidence files of one sweep on the same seeds are one seed set; the file whose first run started
  first is its primary test, the others (the same seeds on another CPU path, say) are re-analyses: listed, not
  counted again. A fixed design on the seeds an `--until-decided` file of the same sweep took as its first look
  is that design's first look, judged at α before it went on: a re-analysis too, the sequential design the test.
- **Verdicts.** A fixed design is judged as `harness claims` judges it (`claims.judge`, Holm across the file's
  claims); an `--until-decided` sweep's verdict of record is its looks replayed by today's rules on the rounds it
  ran (`replay`), and its fixed-design p is what enters the false-discovery rate.
- **Replication.** Over a claim's seed sets: reproduced on all, some or none, and a pooled estimate
  (inverse-variance weighted, fixed effect: Σ wᵢeᵢ / Σ wᵢ with wᵢ = 1/seᵢ², normal 95 % CI; none for an every-arm
  claim, whose sets' weakest arms may differ).
- **False-discovery rate.** Benjamini–Hochberg q-values across every primary test in the ledger (each claim on
  each seed set once), from each test's raw p against its threshold.
- **Flags.** A design continued after looking: a sequential sweep whose first look's seeds had been judged by a
  fixed design already (an evidence file of the same sweep on those seeds).
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field, replace

import numpy as np
from scipy import stats as sps

from harness.analysis import stats
from harness.analysis.claims import Verdict, judge
from harness.analysis.replay import replay
from harness.analysis.sequential import Record
from harness.runs.evidence_file import EvidenceFile


@dataclass(frozen=True)
class Entry:
    """One claim judged on one evidence file."""

    sweep: str
    file: str
    """The evidence file's name (docs/evidence/NAME)."""
    seeds: tuple[int, ...]
    machine: str
    """Where its runs computed: CPU and torch's CPU path ('AMD EPYC AVX2'; several joined by ' + ')."""
    primary: bool
    """The seed set's primary test (False: a re-analysis of seeds another file holds)."""
    design: str
    """fixed, or sequential (an `--until-decided` record: its verdict of record)."""
    continued: bool
    """A sequential design whose first look's seeds a fixed design had judged already."""
    verdict: Verdict
    """The fixed-design verdict (the sequential one's verdict and stop are `sequential`, `stop`)."""
    sequential: str = ""
    stop: str = ""
    q: float = math.nan
    """Benjamini–Hochberg q-value across the ledger's primary tests (NaN for a re-analysis)."""
    first_look_of: str = ""
    """The sequential evidence file whose first look this fixed design is (a re-analysis of its seeds)."""

    @property
    def claim(self) -> str:
        return self.verdict.claim.id

    @property
    def of_record(self) -> str:
        """The verdict the ledger counts: the sequential one where the design was sequential."""
        return self.sequential or self.verdict.verdict


@dataclass(frozen=True)
class Line:
    """One claim of one sweep across its seed sets."""

    sweep: str
    claim: str
    entries: list[Entry]
    """Its primary tests, one per seed set, in the order the seed sets were run."""
    effect: float
    low: float
    high: float
    """Pooled estimate and its 95 % CI (NaN with fewer than one estimate)."""

    @property
    def replicated(self) -> str:
        """How many seed sets reached the decided verdict: 'both' / 'one' / 'neither' of two ('k of n' with more,
        'one set only' with one), followed by ', contradicted' when that verdict is a contradiction, so that a
        contradiction found again reads as replicated; 'conflicting' when one set reproduced it and another
        contradicted it."""
        records = [e.of_record for e in self.entries]
        n, reproduced, contradicted = len(records), records.count("reproduced"), records.count("contradicted")
        if n == 1:
            return "one set only"
        if reproduced and contradicted:
            return "conflicting"
        k = reproduced or contradicted
        word = ("neither", "one", "both")[k] if n == 2 else f"{k} of {n}"
        return f"{word}, contradicted" if contradicted else word


@dataclass
class Ledger:
    entries: list[Entry]
    lines: list[Line]
    totals: dict[str, int] = field(default_factory=dict)
    """Verdicts of record over the primary tests, and discoveries at q < 0.05."""


def build(files: list[EvidenceFile], alpha: float = 0.05) -> Ledger:
    """The ledger of `files` (see the module docstring)."""
    firsts = {id(f): _first_start(f) for f in files}
    seeds = {id(f): _seeds(f) for f in files}
    ordered = sorted(files, key=lambda f: (f.data.sweep.name, firsts[id(f)], f.path.name))
    records = {id(f): Record.from_json(f.record) for f in files if f.record}
    first_looks = {
        (f.data.sweep.name, seeds[id(f)][: records[id(f)].design.first]): f.path.name
        for f in ordered
        if id(f) in records
    }
    fixed_seeds: dict[str, list[tuple[int, ...]]] = {}
    for f in ordered:
        if id(f) not in records:
            fixed_seeds.setdefault(f.data.sweep.name, []).append(seeds[id(f)])
    taken: set[tuple[str, tuple[int, ...]]] = set()
    raw: list[Entry] = []
    for f in ordered:
        name, own = f.data.sweep.name, seeds[id(f)]
        record = replay(f.data, f.claims, records[id(f)]) if id(f) in records else None
        first_look_of = "" if record else first_looks.get((name, own), "")
        primary = (name, own) not in taken and not first_look_of
        taken.add((name, own))
        continued = bool(record) and any(
            set(s) <= set(own) and len(s) >= record.design.first for s in fixed_seeds.get(name, [])
        )
        for v in judge(f.data, f.claims, alpha=alpha):
            track = record.track(v.claim.id) if record else None
            raw.append(
                Entry(
                    name,
                    f.path.name,
                    own,
                    _machine(f),
                    primary,
                    "sequential" if record else "fixed",
                    continued,
                    v,
                    track.verdict if track else "",
                    _stop(track) if track else "",
                    first_look_of=first_look_of,
                )  # fmt: skip
            )
    prim = [i for i, e in enumerate(raw) if e.primary]
    q = stats.benjamini_hochberg([raw[i].verdict.p for i in prim])
    for i, qi in zip(prim, q):
        raw[i] = replace(raw[i], q=float(qi))
    lines = []
    for key in dict.fromkeys((e.sweep, e.claim) for e in raw if e.primary):
        mine = [e for e in raw if e.primary and (e.sweep, e.claim) == key]
        lines.append(Line(*key, mine, *_pooled([e.verdict for e in mine])))

    counted = Counter(e.of_record for e in raw if e.primary)
    totals = {k: counted.get(k, 0) for k in ("reproduced", "contradicted", "inconclusive")}
    totals["tests"] = len(prim)
    totals["re-analyses"] = len(raw) - len(prim)
    totals["q < 0.05"] = int(np.sum(q < 0.05))
    return Ledger(raw, lines, totals)


def _stop(track) -> str:
    """'efficacy at look 1', 'budget at look 3': why and where a sequential claim stopped."""
    return f"{track.stop} at look {track.stopped_at}" if track.stopped_at else track.stop


def _pooled(verdicts: list[Verdict]) -> tuple[float, float, float]:
    """Inverse-variance weighted effect and its normal 95 % CI; NaN without a standard error, and for an every-arm
    (`since`) claim, whose effect is its weakest arm's, which need not be the same arm in each set. One set: its own
    effect and t interval."""
    if any(v.claim.contrast.since is not None for v in verdicts):
        return math.nan, math.nan, math.nan
    if len(verdicts) == 1:
        return verdicts[0].effect, verdicts[0].low, verdicts[0].high
    pairs = [(v.effect, v.se) for v in verdicts]
    pairs = [(e, s) for e, s in pairs if math.isfinite(e) and math.isfinite(s) and s > 0]
    if not pairs:
        return math.nan, math.nan, math.nan
    w = np.array([1 / s**2 for _, s in pairs])
    effect = float(np.sum(w * [e for e, _ in pairs]) / w.sum())
    half = float(sps.norm.isf((1 - stats.CONFIDENCE) / 2) / math.sqrt(w.sum()))
    return effect, effect - half, effect + half


def _machine(f: EvidenceFile) -> str:
    found = dict.fromkeys(
        f"{m.machine.cpu_model} {m.machine.cpu_capability}" if m.machine.recorded else "not recorded"
        for m in f.data.machines
    )
    return " + ".join(found)


def _seeds(f: EvidenceFile) -> tuple[int, ...]:
    runs = f.data.runs
    return tuple(sorted({int(s) for s in runs.loc[runs["state"] == "done", "seed"]}))


def _first_start(f: EvidenceFile) -> float:
    starts = f.data.runs["start_time"].dropna()
    return float(starts.min()) if len(starts) else math.inf
