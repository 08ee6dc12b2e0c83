"""A paper's claim as a sweep file declares it: which metric should move, between which runs, which way.

    claims:
      - id: incorrect_length
        paper: "2503.20783"
        statement: Per-response length normalisation lengthens incorrect responses.
        metric: train/length_incorrect_mean          # or {ratio: [numerator, denominator]}
        at: last-10                                  # final | last-K | step N | auc
        contrast: {effect: objective.aggregation, from: constant, to: seq_mean_token_mean}
        direction: increase
        min_effect: 5                                # optional: the smallest effect worth caring about
        quote: "... the lengths of incorrect responses keep increasing ..."   # the paper's words
        where: Section 3.1, Figure 5                 # where in the paper they are

A contrast is a switch's main effect in the factorial model (`effect`, `from`, `to`), one set of runs
against another (`arm`, `vs`), or each arm against its own start (`since: first-10`: every run's value at `at`
minus its value at `since`, claimed in every arm; e.g. that training raises reward). Arm references are an arm's
label or the settings that pick arms, e.g.
`{objective.clip_high: 0.28}`: settings that pick several arms must say `pool: true`, and then pick the same
combinations of the other settings on both sides. With `fold: k` an arm contrast is about mean(arm) − k·mean(vs)
("at least k times"; it needs a positive reference). The claim is that the effect is above (`increase`) or below
(`decrease`) `threshold` (default 0): a "not worse by more than m" claim is `increase` with `threshold: -m`.

A claim with `quote` and `where` is the paper's; one without is harness's own (about the paper, if it names one).
How claims are judged: harness.analysis.claims.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterator
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from harness.config.at import DEFAULT_AT, At, AtField
from harness.config.errors import ConfigError
from harness.config.yaml_io import MAX_NAME, Name
from trainer import metric_names as M
from trainer.config import STRICT as _STRICT

_ARXIV = re.compile(r"\d{4}\.\d{4,5}(v\d+)?")
ArmRef = str | dict[str, Any]
"""An arm's label, or dotted-key settings that pick the arms whose runs have them."""

MAX_TEXT = 1_000
"""Most characters of a claim's `statement` or `question`: a sentence (the shipped claims' longest has 164)."""
MAX_QUOTE = 2_000
"""Most characters of a claim's `quote`: a passage of the paper; arXiv caps a whole abstract at 1,920."""
MAX_REF = 1_000
"""Most characters of a string in a claim's `contrast` (an arm's label, a setting or its value)."""
_BIDI = frozenset("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")


def check_text(text: str) -> str:
    """`text`, if it prints as written: refuses a control character (C0, newline and tab included; DEL; C1), a lone
    surrogate, a line or paragraph separator or a bidirectional override, any of which a terminal or a page acts on
    instead of showing (ESC starts an escape sequence that can clear the screen or forge a line of output)."""
    for i, ch in enumerate(text):
        if unicodedata.category(ch) in ("Cc", "Cs", "Zl", "Zp") or ch in _BIDI:
            hint = "; a folded YAML block (>-) joins lines with spaces" if ch in "\n\r" else ""
            raise ValueError(
                f"holds {ch!r} (character {i + 1}): harness prints this text as written, so it may hold no control "
                f"characters{hint}"
            )
    return text


def _strings(value: Any) -> Iterator[str]:
    """Every string in a YAML value: itself, a list's items, a mapping's keys and values."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _strings(key)
            yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)


class Ratio(BaseModel):
    """A derived metric: numerator / denominator, each read at the claim's `at` (a ratio of window means)."""

    model_config = _STRICT

    ratio: list[str] = Field(min_length=2, max_length=2)
    """[numerator metric, denominator metric]."""


class Difference(BaseModel):
    """A derived metric: first − second, each read at the claim's `at` (e.g. how much longer incorrect responses
    are than correct ones); a main effect on it is the effect on the first minus the effect on the second."""

    model_config = _STRICT

    difference: list[str] = Field(min_length=2, max_length=2)
    """[minuend metric, subtrahend metric]."""


class Contrast(BaseModel):
    """What is compared: a switch's main effect, or arm(s) against arm(s)."""

    model_config = ConfigDict(**_STRICT, populate_by_name=True)

    effect: str | None = None
    """A switch the grid varies (dotted key): its main effect from the factorial (cell-means) model."""
    to: Any = None
    """The switch's level whose effect is claimed (effect only)."""
    from_: Any = Field(None, alias="from")
    """The reference level (effect only)."""
    arm: ArmRef | None = None
    """The runs the claim is about: an arm's label or settings."""
    vs: ArmRef | None = None
    """The runs they are compared with."""
    fold: float = Field(1.0, gt=0)
    """arm vs arm only: the effect is mean(arm) − fold·mean(vs) ("at least fold times as large"); a reference whose
    mean is not positive makes the claim inconclusive (no test), since the ratio then reads the other way."""
    since: AtField | None = None
    """Each arm against its own start: every run's value at the claim's `at` minus its value here (first-K, step N;
    as `at`), tested in each arm on its own (one-sample t). The claim holds only if it holds in every arm: its p is
    the largest of the arms' (an intersection-union test, exact at α with no correction), and an arm significant
    the other way contradicts it. With `arm`, only the arms it picks (one or several) are claimed."""
    pool: bool = False
    """arm vs arm only: settings that pick several arms on a side pool them, as the unweighted mean of their arms'
    means; both sides must then pick the same combinations of the sweep's other varying settings (checked before
    any job), so that nothing else differs between the sides."""

    @field_validator("effect", "to", "from_", "arm", "vs")
    @classmethod
    def _plain(cls, value: Any) -> Any:
        for text in _strings(value):
            if len(text) > MAX_REF:
                raise ValueError(f"a string of {len(text)} characters, over the limit of {MAX_REF}")
            check_text(text)
        return value

    @model_validator(mode="after")
    def _one_kind(self) -> Contrast:
        if self.since is not None:
            if self.effect is not None or self.vs is not None or self.fold != 1.0 or self.pool:
                raise ValueError(
                    "since compares each arm with its own start: give it without effect or vs (arm may narrow it "
                    "to the arms it picks)"
                )
            if self.since.kind == "best":
                raise ValueError("since: best is a selection on the curve; use first-K or step N")
        elif self.effect is not None:
            if self.arm is not None or self.vs is not None or self.fold != 1.0 or self.pool:
                raise ValueError("give either effect/from/to or arm/vs (with fold, pool), not both")
            if self.to is None or self.from_ is None:
                raise ValueError("effect needs `from` and `to`: the reference level and the claimed one")
        elif self.arm is None or self.vs is None:
            raise ValueError("needs effect/from/to (a switch's main effect) or arm/vs (arm against arm)")
        return self

    def describe(self) -> str:
        if self.since is not None:
            where = "every arm" if self.arm is None else f"each arm with {_ref_text(self.arm)}"
            return f"change since {self.since}, in {where}"
        if self.effect is not None:
            return f"{self.effect}: {self.from_} → {self.to}"
        arm, vs = (_ref_text(r) for r in (self.arm, self.vs))
        pooled = " (pooled)" if self.pool else ""
        return f"{arm} vs {'' if self.fold == 1 else f'{self.fold:g} × '}{vs}{pooled}"


def _ref_text(ref: ArmRef) -> str:
    return ref if isinstance(ref, str) else ", ".join(f"{k}={v}" for k, v in ref.items())


class Claim(BaseModel):
    """One published claim, judged on the sweep's runs (reproduced / contradicted / inconclusive)."""

    model_config = _STRICT

    id: Name
    """Short identifier, unique in the file."""
    statement: str = Field(min_length=1, max_length=MAX_TEXT)
    """The claim in one sentence (at most 1,000 characters). Like every text of a claim it is shown as written, in a
    terminal, the report and the dashboard, so it holds no control characters: no newline, tab or escape sequence
    (a folded YAML block, `>-`, writes a long text over several lines)."""
    paper: str | None = None
    """The paper's arXiv id, e.g. 2503.20783; none for a claim of harness's own (e.g. that two engines agree)."""
    question: str | None = Field(None, min_length=1, max_length=MAX_TEXT)
    """The question the claim answers, in words, shared by the claims of other papers about the same switch (e.g.
    "What does clipping do to entropy?"): `harness claims`, the report and the dashboard show the claims of one
    question side by side, so that a reader sees which paper holds on these runs. At most 1,000 characters."""
    metric: str | Ratio | Difference
    """A logged metric (trainer.metric_names), {ratio: [numerator, denominator]} or {difference: [first, second]}."""
    at: AtField = At.parse(DEFAULT_AT)
    """Where each run's value is read: final, last-K, step N or auc (as `harness report --at`)."""
    contrast: Contrast
    direction: Literal["increase", "decrease"]
    """The claim: the effect is above (increase) or below (decrease) the threshold."""
    threshold: float = 0.0
    """The value the effect is tested against (0: "there is an effect"; −m with increase: "not worse by m")."""
    min_effect: float | None = Field(None, gt=0)
    """The smallest effect of interest: an inconclusive claim whose CI lies within threshold ± this is "a small
    effect" rather than "underpowered"; it also sets the seeds a decisive sweep needs."""
    equivalence_margin: float | None = Field(None, gt=0)
    """The largest difference in this claim's effect between two sets of runs (two machines, CPU paths or stores)
    that counts as the same: `python -m report.agreement` tests equivalence against it. Unset: `min_effect`."""
    failed: Literal["worst", "exclude"] | None = None
    """How a failed (or diverged) run of an arm the claim reads counts: `worst` gives it the worst value among the
    claim's finished runs (the lowest for an increase claim, the highest for a decrease one), `exclude` leaves it
    out; either way the verdict shows the failed runs per side. Unset: `worst` for a "not worse by m" claim
    (a method that fails more often must not look safer), `exclude` otherwise."""
    quote: str | None = Field(None, min_length=1, max_length=MAX_QUOTE)
    """The paper's own sentence the claim tests (with `where`); a claim without it is harness's own. At most a
    passage: arXiv caps a whole abstract at 1,920 characters."""
    where: str | None = Field(None, min_length=1, max_length=MAX_NAME)
    """Where in the paper the quote is: section, figure or table (at most 200 characters)."""
    planning_sd: float | None = Field(None, gt=0)
    """A guess of the spread of one run's value across seeds within an arm, used only to plan a sequential
    sweep (`harness sweep --dry-run --until-decided`) before any run exists; the runs' own spread replaces it."""

    @field_validator("statement", "question", "quote", "where")
    @classmethod
    def _plain(cls, text: str | None) -> str | None:
        return text if text is None else check_text(text)

    @field_validator("paper")
    @classmethod
    def _paper(cls, paper: str | None) -> str | None:
        if paper is not None and not _ARXIV.fullmatch(paper):
            raise ValueError(f"{paper!r} is not an arXiv id such as 2503.20783")
        return paper

    @model_validator(mode="after")
    def _quoted(self) -> Claim:
        if (self.quote is None) != (self.where is None):
            raise ValueError("quote and where go together: the paper's sentence and where it is")
        if self.quote is not None and self.paper is None:
            raise ValueError("a quote needs the paper it is from (paper: its arXiv id)")
        return self

    @property
    def own(self) -> bool:
        """Whether the claim is harness's own (no quote from its paper)."""
        return self.quote is None

    def source(self) -> str:
        """Where the claim comes from: `arXiv <id> (where)` for the paper's, `harness` or `harness, on arXiv <id>`
        for harness's own."""
        if not self.own:
            return f"arXiv {self.paper} ({self.where})"
        return f"harness, on arXiv {self.paper}" if self.paper else "harness"

    @property
    def failed_as(self) -> str:
        """How failed runs count (`failed`, or its default for this claim)."""
        if self.failed is not None:
            return self.failed
        not_worse = self.threshold < 0 if self.direction == "increase" else self.threshold > 0
        return "worst" if not_worse else "exclude"

    @field_validator("at")
    @classmethod
    def _at(cls, at: At) -> At:
        if at.kind == "best":
            raise ValueError("best is a selection on the curve being tested; use final, last-K, step N or auc")
        return at

    @field_validator("metric")
    @classmethod
    def _metric(cls, metric: str | Ratio | Difference) -> str | Ratio | Difference:
        for name in (metric,) if isinstance(metric, str) else _pair(metric):
            if len(name) > MAX_NAME:
                raise ValueError(f"a metric name of {len(name)} characters, over the limit of {MAX_NAME}")
            check_text(name)
            if not M.is_known(name):
                raise ValueError(
                    f"unknown metric {name!r} (see trainer/metric_names.py: e.g. {M.ENTROPY}, "
                    f"{M.LENGTH_INCORRECT_MEAN}, eval/<benchmark>/accuracy)"
                )
        if not isinstance(metric, str) and len(set(_pair(metric))) == 1:
            kind, value = ("difference", 0) if isinstance(metric, Difference) else ("ratio", 1)
            raise ValueError(f"a {kind} of {_pair(metric)[0]} with itself is {value} in every run: name two metrics")
        return metric

    @property
    def metrics(self) -> tuple[str, ...]:
        """The logged metrics the claim reads."""
        return (self.metric,) if isinstance(self.metric, str) else _pair(self.metric)

    def metric_text(self) -> str:
        return (" − " if isinstance(self.metric, Difference) else " / ").join(self.metrics)

    def expectation(self) -> str:
        """The claim in symbols, e.g. 'effect > 0' or 'effect < 5'."""
        return f"effect {'>' if self.direction == 'increase' else '<'} {self.threshold:g}"


def _pair(metric: Ratio | Difference) -> tuple[str, str]:
    return tuple(metric.ratio if isinstance(metric, Ratio) else metric.difference)


def check_unique(claims: list[Claim]) -> list[Claim]:
    ids = [c.id for c in claims]
    repeated = sorted({i for i in ids if ids.count(i) > 1})
    if repeated:
        raise ValueError(f"claim ids repeat ({', '.join(repeated)})")
    return claims


def canonical(value: Any) -> str:
    """A setting as comparable text: a claim's YAML value, a resolved config's value and an MLflow param (its
    str) agree, e.g. 3.0e-4, 0.0003 and '0.0003'; True and 'True'."""
    text = str(value).strip()
    if isinstance(value, bool) or text.lower() in ("true", "false"):
        return text.lower()
    try:
        return repr(float(text))
    except ValueError:
        return text


RESOLVED_AS = {"objective.preset": "objective_preset"}
"""Keys an arm reference may use as a sweep file writes them, whose resolved settings hold them under another key:
the preset a run started from is written `objective.preset` and resolved (and logged) as `objective_preset`."""


def picks(ref: ArmRef, label: str, settings: dict[str, Any]) -> bool:
    """Whether an arm (its label and dotted settings) is one the reference names."""
    if isinstance(ref, str):
        return ref == label
    # null also picks an arm that leaves the setting out (a field dumped only when set, e.g. random_reward)
    return all(
        canonical(settings[key]) == canonical(v) if (key := RESOLVED_AS.get(k, k)) in settings else v is None
        for k, v in ref.items()
    )


def _unknown_keys(ref: ArmRef | None, arms: dict[str, dict[str, Any]]) -> list[str]:
    """The keys of a settings reference that no arm of the sweep has (a typo, since null picks an absent key)."""
    if ref is None or isinstance(ref, str):
        return []
    return [k for k in ref if not any(RESOLVED_AS.get(k, k) in s for s in arms.values())]


def check_claims(
    claims: list[Claim], arms: dict[str, dict[str, Any]], levels: dict[str, list[Any]], where: str
) -> None:
    """Raise one `ConfigError` line for the first claim that names what the sweep does not have.

    `arms`: each arm's label → its resolved dotted settings; `levels`: each switch the grid varies → its values."""
    for i, claim in enumerate(claims):
        key, c = f"{where}: claims[{i}] ({claim.id}).contrast", claim.contrast
        for name, ref in (("arm", c.arm), ("vs", c.vs)):
            if unknown := _unknown_keys(ref, arms):
                raise ConfigError(f"{key}.{name}: {', '.join(unknown)} is no setting of this sweep's arms")
        _check_steps(f"{where}: claims[{i}] ({claim.id})", claim, arms)
        _check_logged(f"{where}: claims[{i}] ({claim.id}).metric", claim, arms)
        if c.since is not None:
            if c.arm is not None and not any(picks(c.arm, label, s) for label, s in arms.items()):
                raise ConfigError(f"{key}.arm: {_ref_text(c.arm)!r} matches no arm (arms: {'; '.join(arms)})")
            continue
        if c.effect is not None:
            if c.effect not in levels:
                raise ConfigError(
                    f"{key}.effect: {c.effect} is not varied by this sweep's grid "
                    f"(varied: {', '.join(levels) or 'nothing'})"
                )
            known = [canonical(v) for v in levels[c.effect]]
            for name, level in (("from", c.from_), ("to", c.to)):
                if canonical(level) not in known:
                    raise ConfigError(
                        f"{key}.{name}: {level!r} is not a level of {c.effect} "
                        f"(levels: {', '.join(map(str, levels[c.effect]))})"
                    )
            if canonical(c.from_) == canonical(c.to):
                raise ConfigError(f"{key}: from and to are the same level")
            continue
        sides = {}
        for name, ref in (("arm", c.arm), ("vs", c.vs)):
            sides[name] = {label for label, settings in arms.items() if picks(ref, label, settings)}
            if not sides[name]:
                raise ConfigError(f"{key}.{name}: {_ref_text(ref)!r} matches no arm (arms: {'; '.join(arms)})")
        if sides["arm"] & sides["vs"]:
            raise ConfigError(f"{key}: arm and vs both pick {'; '.join(sorted(sides['arm'] & sides['vs']))}")
        _check_pool(key, c, sides, arms)


def _check_steps(key: str, claim: Claim, arms: dict[str, dict[str, Any]]) -> None:
    """A claim read at (or since) step N can be judged only if every arm it reads trains for N steps or more."""
    steps = [int(arms[a]["train.steps"]) for a in claim_arms(claim, arms) if "train.steps" in arms[a]]
    for name, at in (("at", claim.at), ("contrast.since", claim.contrast.since)):
        if steps and at is not None and at.kind == "step" and at.n > min(steps):
            raise ConfigError(
                f"{key}.{name}: step {at.n} is beyond the {min(steps)} train.steps of the arms it reads: "
                "it can never be judged"
            )


def _check_logged(key: str, claim: Claim, arms: dict[str, dict[str, Any]]) -> None:
    """policy/kl is logged only where the reference policy is run: `train.reference_kl` on, or a KL in the loss or
    the reward. `train.reference_kl` is not part of a run's identity, so the claim is checked here, before any job."""
    if M.KL not in claim.metrics:
        return
    for label in sorted(claim_arms(claim, arms)):
        s = arms[label]
        if s.get("train.reference_kl") is False and not (
            s.get("objective.kl_coef", 0) > 0 or s.get("objective.kl_reward_coef", 0) > 0
        ):
            raise ConfigError(f"{key}: {M.KL} is not logged in arm {label!r}, which sets train.reference_kl: false")


def _check_pool(key: str, c: Contrast, sides: dict[str, set[str]], arms: dict[str, dict[str, Any]]) -> None:
    """A side that picks several arms must say `pool: true`, and pooled sides must cover the same combinations of
    the other varying settings (all but those the two references set to different values, and those that move in
    lockstep with them): otherwise the pooled means differ in those settings too, and their effects leak into the
    contrast."""
    several = {name: sorted(picked) for name, picked in sides.items() if len(picked) > 1}
    if several and not c.pool:
        name, picked = next(iter(several.items()))
        raise ConfigError(
            f"{key}.{name}: {_ref_text(getattr(c, name))!r} picks {len(picked)} arms ({'; '.join(picked)}): name "
            "one arm, or say pool: true to compare the unweighted means of each side's arms"
        )
    if not c.pool:
        return
    refs = [ref if isinstance(ref, dict) else {} for ref in (c.arm, c.vs)]
    named = {
        RESOLVED_AS.get(k, k) for k in refs[0].keys() & refs[1].keys() if canonical(refs[0][k]) != canonical(refs[1][k])
    }
    picked = sides["arm"] | sides["vs"]
    varying = [
        k
        for k in dict.fromkeys(k for a in arms.values() for k in a)
        if len({canonical(a.get(k)) for a in arms.values()}) > 1
    ]
    others = [k for k in varying if k not in named and not any(_lockstep(arms, picked, k, n) for n in named)]

    def combos(name: str) -> set[tuple[str, ...]]:
        return {tuple(canonical(arms[a].get(k)) for k in others) for a in sides[name]}

    if combos("arm") != combos("vs"):
        only = sorted(combos("arm") ^ combos("vs"))
        shown = "; ".join(", ".join(f"{k}={v}" for k, v in zip(others, combo)) for combo in only[:4])
        raise ConfigError(
            f"{key}: pool: the two sides do not pick the same combinations of the other settings ({shown} on one "
            "side only), so a pooled contrast would mix their effects into this one"
        )


def _lockstep(arms: dict[str, dict[str, Any]], picked: set[str], a: str, b: str) -> bool:
    """Whether settings a and b move together over the picked arms (each value of one comes with one of the other)."""
    pairs = {(canonical(arms[x].get(a)), canonical(arms[x].get(b))) for x in picked}
    return len({p[0] for p in pairs}) == len(pairs) == len({p[1] for p in pairs})


def claim_arms(claim: Claim, arms: dict[str, dict[str, Any]]) -> set[str]:
    """The arms (labels) a claim's contrast reads: for a main effect every cell at its `from` or `to` level, for
    arm/vs the arms each side picks, for since every arm. `arms`: each arm's label → its resolved dotted settings."""
    c = claim.contrast
    if c.since is not None:
        return {label for label, s in arms.items() if c.arm is None or picks(c.arm, label, s)}
    if c.effect is not None:
        wanted = {canonical(c.from_), canonical(c.to)}
        return {label for label, s in arms.items() if c.effect in s and canonical(s[c.effect]) in wanted}
    return {label for label, s in arms.items() if picks(c.arm, label, s) or picks(c.vs, label, s)}
