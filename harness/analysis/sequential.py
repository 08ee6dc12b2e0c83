"""Seeds until decided: a group-sequential test of a sweep's claims that keeps its error rate at α across looks.

The procedure (one home for it; the sweep loop and the report only call it):

- **Looks.** The claims are judged after the shipped seeds and again after every `batch` seeds added per arm,
  up to `max_seeds` per arm. A claim's information fraction at a look is its seeds per arm over `max_seeds`.
- **Boundaries.** Two-sided group-sequential boundaries from the Lan–DeMets spending function of
  O'Brien–Fleming type, α(t) = 2 − 2Φ(z_{1−α/2}/√t) (Lan & DeMets 1983, Biometrika 70:659–663): the critical
  |Z| at each look spends α(t_k) − α(t_{k−1}) given the looks before, for the canonical joint law
  corr(Z_i, Z_j) = √(t_i/t_j) (Jennison & Turnbull 2000, Group Sequential Methods, ch. 7). No maintained Python
  library computes these; scipy's multivariate-normal CDF does the integration, the rest is below.
- **Unknown variance.** A claim's statistic is the fixed design's t (harness.analysis.claims.evidence: a contrast
  of cell means with each cell's own variance and Welch–Satterthwaite df, against the claim's threshold), mapped
  to the normal scale by its p-value, z = Φ⁻¹(F_t(t; df)) (the significance-level approach, Jennison & Turnbull
  §3.8). Its null error rate with unequal cell variances is simulated in tests/test_unequal_variances.py.
- **Decisions.** Efficacy: |z| crosses the boundary → reproduced (on the claimed side) or contradicted, by the
  fixed design's rules: not when the repeated CI lies within threshold ± min_effect (a small effect), and
  contradicted only when it clears the threshold by min_effect.
  Small effect: the repeated confidence interval (effect ± t-quantile at the look's nominal level × SE; its
  coverage holds at every look at once, Jennison & Turnbull ch. 9) lies within threshold ± the claim's smallest
  effect of interest. The interval is at the level the claim's boundary is at (α / claims still open), so the
  interval printed beside a verdict is the one its test used: it excludes the threshold exactly when |z|
  crosses. Budget: `max_seeds` reached with neither → inconclusive.
- **Across claims.** Holm's procedure as a graph in the group-sequential setting (Maurer & Bretz 2013,
  Stat. Biopharm. Res. 5:311–320): each claim still open is tested at α / (claims not yet reproduced or
  contradicted); when one is, the others' boundaries are recomputed at the larger level and checked at every
  look they have had. The familywise error stays at α.
"""

from __future__ import annotations

import functools
import math
from dataclasses import asdict, dataclass, field

import numpy as np
from scipy import optimize, stats

from harness.analysis.evidence import Evidence, VerdictKind
from harness.config.claims import Claim
from harness.runs.reader import Sweep, sequential_record

STOPS = ("efficacy", "small effect", "budget")


def obf_spent(t: float, alpha: float) -> float:
    """Two-sided α spent by information fraction t: each side spends the Lan–DeMets O'Brien–Fleming-type
    f(t; α/2) = 2 − 2Φ(z_{1−α/4}/√t), as ldbounds and gsDesign do for a symmetric two-sided test."""
    if t <= 0:
        return 0.0
    return float(2 * (2 * stats.norm.sf(stats.norm.isf(alpha / 4) / math.sqrt(min(t, 1.0)))))


GRID = 801
"""Points of the Simpson grid the crossing probabilities are integrated on (odd)."""


def spent(t: float, alpha: float, first: float = 0.0, t1: float = 0.0) -> float:
    """Two-sided α spent by information fraction t. By default O'Brien–Fleming type (`obf_spent`). A design whose
    first look (at t1) was a fixed test at `first` · α (a fixed-seed sweep judged before `--until-decided` went on
    with the same seeds: `first` 1, the whole α) spends that at t1, and the rest of α from there to t = 1 in the
    proportions O'Brien–Fleming's function would: first·α + (1 − first)·α·(f(t) − f(t1))/(α − f(t1))."""
    if not first:
        return obf_spent(t, alpha)
    if t < t1:
        return 0.0
    if t == t1:
        return first * alpha
    f1 = obf_spent(t1, alpha)
    return first * alpha + (1 - first) * alpha * (obf_spent(t, alpha) - f1) / (alpha - f1)


@functools.lru_cache(maxsize=4096)
def boundaries(fractions: tuple[float, ...], alpha: float, first: float = 0.0) -> tuple[float, ...]:
    """Two-sided critical |Z| at looks with these (increasing) information fractions: look k rejects with
    probability α(t_k) − α(t_{k−1}) under the null, given no rejection before (α(t): `spent`, whose `first` says
    what a fixed test at the first look spent; no α left gives ∞).

    The null law of the looks is that of a Brownian motion S observed at t_1 < t_2 < ...(Z_k = S(t_k)/√t_k); the
    density of S on the continuation region is carried from look to look on a grid (Armitage, McPherson & Rowe
    1969; Jennison & Turnbull ch. 19), each boundary found by root-finding on the crossing probability."""
    t = np.asarray(fractions, float)
    if t.size == 0 or np.any(np.diff(t) <= 0) or t[0] <= 0:
        raise ValueError(f"information fractions must increase from above 0, got {list(fractions)}")
    t1 = float(t[0])
    out = [float(stats.norm.isf(spent(t1, alpha, first, t1) / 2))]
    grid, dens = _region(out[0], t[0])
    dens *= stats.norm.pdf(grid / math.sqrt(t[0])) / math.sqrt(t[0])
    for k in range(1, t.size):
        spend = spent(t[k], alpha, first, t1) - spent(t[k - 1], alpha, first, t1)
        sd, root_t = math.sqrt(t[k] - t[k - 1]), math.sqrt(t[k])
        carried = (grid, dens, sd, root_t)
        if spend <= 1e-15 or _crossing(40.0, *carried) >= spend:
            c = math.inf
        else:
            c = float(optimize.brentq(lambda x, a=carried, s=spend: _crossing(x, *a) - s, 0.0, 40.0, xtol=1e-9))
        out.append(c)
        new_grid, weights = _region(c, t[k])
        kernel = stats.norm.pdf((new_grid[:, None] - grid[None, :]) / sd) / sd
        grid, dens = new_grid, weights * (kernel @ dens)
    return tuple(out)


def _crossing(c: float, grid: np.ndarray, dens: np.ndarray, sd: float, root_t: float) -> float:
    """P(|Z_k| ≥ c, no crossing before) from the weighted density of S(t_{k−1}) on its grid."""
    b = c * root_t
    return float(dens @ (stats.norm.sf((b - grid) / sd) + stats.norm.cdf((-b - grid) / sd)))


def _region(c: float, t: float) -> tuple[np.ndarray, np.ndarray]:
    """Grid over the continuation region |S(t)| < c√t (at most 10 SDs) and its Simpson weights."""
    half = min(c, 10.0) * math.sqrt(t)
    grid = np.linspace(-half, half, GRID)
    w = np.ones(GRID)
    w[1:-1:2], w[2:-1:2] = 4, 2
    return grid, w * (grid[1] - grid[0]) / 3


def z_of_t(t: float, df: float) -> float:
    """The normal deviate with the same tail probability as t on df degrees of freedom (sign kept)."""
    if not np.isfinite(t) or not df > 0:
        return math.nan
    return float(math.copysign(stats.norm.isf(stats.t.sf(abs(t), df)), t))


def t_of_z(z: float, df: float) -> float:
    """The t quantile (df degrees of freedom) with the tail probability of the normal deviate z."""
    return float(stats.t.isf(stats.norm.sf(z), df)) if np.isfinite(z) else math.inf


@dataclass
class Look:
    """One claim at one look: the fixed design's estimate and the sequential quantities."""

    look: int
    """1-based look number (round of the sweep)."""
    seeds: int
    """Seeds per arm (per cell of a factorial effect) the claim's runs had."""
    fraction: float
    effect: float
    se: float
    df: float
    z: float
    """The t statistic against the threshold, on the normal scale (NaN: no test at this look)."""
    boundary: float = math.nan
    """Critical |z| at this look, at the level the claim was tested at (α / claims still undecided)."""
    low: float = math.nan
    """Repeated confidence interval (holds over all looks at once) at `level`: the one the verdict used."""
    high: float = math.nan
    level: float = math.nan
    """The error rate the boundary and the interval are at: α / claims still undecided (sequential Holm); the
    interval's coverage is 1 − level."""


@dataclass
class Track:
    """A claim's path through the looks and where it stopped."""

    claim_id: str
    looks: list[Look] = field(default_factory=list)
    stop: str = ""
    """'' while open; efficacy, small effect or budget."""
    verdict: VerdictKind = "inconclusive"
    stopped_at: int = 0
    """The look it stopped at (0: open)."""

    @property
    def open(self) -> bool:
        return not self.stop

    def fractions(self) -> tuple[float, ...]:
        """Information fractions of the looks with a test (a look without one spends nothing)."""
        return tuple(lk.fraction for lk in self.looks if np.isfinite(lk.z))


@dataclass(frozen=True)
class Design:
    """The looks a sequential sweep may take: the shipped seeds, then `batch` more per arm, up to `max_seeds`."""

    first: int
    """Seeds per arm at the first look (the sweep file's seeds)."""
    batch: int
    max_seeds: int
    alpha: float = 0.05
    fixed_first: float = 0.0
    """The share of α a fixed-design test of the first look's seeds spent before this design went on with them
    (1: `harness sweep` judged them at α already); that look's boundary is the fixed test's, and only the rest of
    α is left for the looks after it (`spent`)."""

    def __post_init__(self):
        if not (1 <= self.first <= self.max_seeds and self.batch >= 1 and 0 < self.alpha < 1) or not (
            0 <= self.fixed_first <= 1
        ):
            raise ValueError(f"invalid design: {self}")

    def schedule(self) -> list[int]:
        """Seeds per arm at each planned look."""
        out = [self.first]
        while out[-1] < self.max_seeds:
            out.append(min(out[-1] + self.batch, self.max_seeds))
        return out

    def fraction(self, seeds: int) -> float:
        return min(1.0, seeds / self.max_seeds)


def observe(track: Track, look: int, evidence: Evidence, design: Design, threshold: float) -> Look:
    """Append a look from a claim's fixed-design evidence (its effect, se, df and seeds)."""
    effect, se, df, seeds = float(evidence.effect), float(evidence.se), float(evidence.df), int(evidence.seeds)
    z = z_of_t((effect - threshold) / se, df) if se > 0 and np.isfinite(effect) else math.nan
    lk = Look(look, seeds, design.fraction(seeds), effect, se, df, z)
    if track.looks and np.isfinite(z) and lk.fraction <= max(track.fractions(), default=0):
        lk.z = math.nan  # no new information since the last tested look (e.g. every new job failed)
    track.looks.append(lk)
    if np.isfinite(lk.z):
        _at_level(lk, boundaries(track.fractions(), design.alpha, design.fixed_first)[-1], design.alpha)
    return lk


def _at_level(lk: Look, c: float, level: float) -> None:
    """The look's boundary and its repeated CI at that boundary (`level`)."""
    half = t_of_z(c, lk.df) * lk.se
    lk.boundary, lk.low, lk.high, lk.level = c, lk.effect - half, lk.effect + half, level


def decide(claims: list[Claim], tracks: list[Track], design: Design, *, final: bool) -> None:
    """Update every open track after its newest look: efficacy under sequential Holm, small effect by the
    repeated CI, budget when `final` (the last planned look). Stopped tracks stay stopped; a stopped one may
    still be reproduced later when Holm raises its level (the other stops are not binding)."""
    m = len(claims)
    rejected = {t.claim_id for t in tracks if t.verdict in ("reproduced", "contradicted")}
    changed = True
    while changed:
        changed = False
        level = design.alpha / max(1, m - len(rejected))
        for claim, track in zip(claims, tracks):
            if track.claim_id in rejected:
                continue
            tested = [lk for lk in track.looks if np.isfinite(lk.z)]
            if not tested:
                continue
            bounds = boundaries(track.fractions(), level, design.fixed_first)
            for lk, c in zip(tested, bounds):
                _at_level(lk, c, level)
            hit = next((lk for lk, c in zip(tested, bounds) if abs(lk.z) >= c and _decisive(claim, lk)), None)
            if hit is not None:
                side = math.copysign(1, hit.z) * (1 if claim.direction == "increase" else -1)
                track.verdict = "reproduced" if side > 0 else "contradicted"
                track.stop, track.stopped_at = "efficacy", hit.look
                rejected.add(track.claim_id)
                changed = True
    for claim, track in zip(claims, tracks):
        if not track.open or not track.looks:
            continue
        lk = track.looks[-1]
        if (
            claim.min_effect is not None
            and np.isfinite(lk.z)
            and claim.threshold - claim.min_effect <= lk.low
            and lk.high <= claim.threshold + claim.min_effect
        ):
            track.stop, track.stopped_at = "small effect", lk.look
            continue
        if final:
            track.stop, track.stopped_at = "budget", lk.look


def _decisive(claim: Claim, lk: Look) -> bool:
    """Whether a look whose |z| crossed its boundary decides the claim, by the fixed design's rules
    (`claims.decide`): not when its repeated CI lies within threshold ± min_effect (a small effect, which the
    stop below reports), and a contradiction only when the CI clears the threshold by min_effect."""
    band = claim.min_effect
    if band is None:
        return True
    if claim.threshold - band <= lk.low and lk.high <= claim.threshold + band:
        return False
    sign = 1 if claim.direction == "increase" else -1
    if math.copysign(1, lk.z) * sign > 0:
        return True
    return lk.high < claim.threshold - band if sign > 0 else lk.low > claim.threshold + band


PROCEDURE = "group-sequential, Lan-DeMets O'Brien-Fleming alpha spending, sequential Holm"


@dataclass(frozen=True)
class Round:
    """One round of a sequential sweep."""

    look: int
    seeds: dict[str, int]
    """Seeds per arm after the round."""
    jobs: int
    """Jobs the round ran (those already finished are skipped)."""
    failed: int
    open: list[str]
    """The claims still open after the round's look."""


@dataclass(frozen=True)
class Record:
    """A sequential sweep's design, rounds and every claim's path: what `--until-decided` logs on the sweep's parent
    run (as `to_json`, non-finite numbers as null) and what `harness claims`, the report and the dashboard read
    back as its verdicts of record."""

    design: Design
    rounds: list[Round]
    tracks: list[Track]
    procedure: str = PROCEDURE

    def track(self, claim_id: str) -> Track | None:
        return next((t for t in self.tracks if t.claim_id == claim_id), None)

    def to_json(self) -> dict:
        return _finite_or_null(
            {
                "procedure": self.procedure,
                "design": asdict(self.design),
                "rounds": [asdict(r) for r in self.rounds],
                "claims": [asdict(t) for t in self.tracks],
            }
        )

    @classmethod
    def from_json(cls, d: dict) -> Record:
        """The record as `to_json` wrote it (null read back as NaN); KeyError or TypeError on anything else."""
        tracks = [
            Track(
                t["claim_id"],
                [Look(**{k: math.nan if v is None else v for k, v in lk.items()}) for lk in t["looks"]],
                t["stop"],
                t["verdict"],
                t["stopped_at"],
            )
            for t in d["claims"]
        ]
        return cls(Design(**d["design"]), [Round(**r) for r in d["rounds"]], tracks, d["procedure"])


def _finite_or_null(x):
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, dict):
        return {k: _finite_or_null(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_finite_or_null(v) for v in x]
    return x


def stored_record(sweep: Sweep) -> Record | None:
    """The sweep's `--until-decided` record (None for a fixed-seed sweep, or one whose record cannot be read)."""
    raw = sequential_record(sweep)
    try:
        return Record.from_json(raw) if raw else None
    except (KeyError, TypeError):
        return None


# ---------------------------------------------------------------------------------------------
# Planning: expected and maximum seeds under the smallest effect of interest
# ---------------------------------------------------------------------------------------------


@dataclass
class Plan:
    """Operating characteristics of the design for one claim, under a true effect `delta` from the threshold."""

    delta: float
    sd1: float
    """The claim's standard error at one seed per arm (SE at n seeds = sd1/√n)."""
    expected_seeds: float
    max_seeds: int
    power: float
    """P(reproduced) under delta."""
    fixed_seeds: int | None
    """Seeds per arm of a fixed design with the same power (normal approximation), None if beyond 1000."""
    fixed_80: int | None = None
    """Seeds per arm of a fixed design with 80% power against delta (None if beyond 1000)."""


def operating(
    design: Design,
    delta: float,
    sd1: float,
    level: float,
    *,
    sesoi: float | None = None,
    draws: int = 20000,
    seed: int = 0,
) -> Plan:
    """Expected seeds and power of the design by simulating the canonical normal process (known variance):
    the estimate at n seeds is delta + sd1·W(n)/n, W a Brownian motion in seeds, with the boundaries at `level`
    and the small-effect stop at `sesoi` (none if None). Power: P(reproduced) on delta's side (with delta 0,
    P(either verdict): the false-positive rate)."""
    n = np.array(design.schedule(), float)
    c = np.array(boundaries(tuple(design.fraction(int(k)) for k in n), level, design.fixed_first))
    rng = np.random.default_rng(seed)
    w = np.cumsum(rng.standard_normal((draws, n.size)) * np.sqrt(np.diff(n, prepend=0.0)), axis=1)
    se = sd1 / np.sqrt(n)
    est = delta + sd1 * w / n
    z = est / se
    reject = np.abs(z) >= c
    small = np.abs(est) + c * se <= (sesoi if sesoi is not None else -np.inf)
    stop = reject | small
    stop[:, -1] = True
    first = stop.argmax(axis=1)
    rows = np.arange(draws)
    hit = reject[rows, first]
    power = float(np.mean(hit & (np.sign(z[rows, first]) == np.sign(delta)) if delta else hit))
    fixed = fixed_seeds(delta, sd1, power, level)
    return Plan(delta, sd1, float(n[first].mean()), design.max_seeds, power, fixed, fixed_seeds(delta, sd1, 0.8, level))


def fixed_seeds(delta: float, sd1: float, power: float, level: float, limit: int = 1000) -> int | None:
    """Seeds per arm of a one-look two-sided z-test at `level` with this power against delta."""
    if not (0 < power < 1 and delta != 0 and sd1 > 0):
        return None
    n = ((stats.norm.isf(level / 2) + stats.norm.ppf(power)) * sd1 / abs(delta)) ** 2
    return int(math.ceil(n)) if n <= limit else None
