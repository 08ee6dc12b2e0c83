"""Whether a sweep's effects on your runs agree with the same sweep's effects on other runs (another machine, CPU
path or store: the published ones, say).

    python -m report.agreement ablations/dr_grpo_bias.yaml --against docs/evidence/dr_grpo_bias.json
    python -m report.agreement ablations/dr_grpo_bias.yaml \
        --yours docs/evidence/dr_grpo_bias.json --against docs/evidence/dr_grpo_bias-avx512.json

Your runs are a store (`--tracking-uri`, default as `harness claims`) or an evidence file (`--yours`, written by
`harness evidence`); theirs (`--against`) another store, an evidence file, or a JSON this command wrote (its "yours"
side). First, run by run: the runs are matched by job id and
seed and every value the claims read is compared to the last bit ("bit-identical: k of n runs", and where each
run that differs first does). Then, for each claim of the sweep file: its effect and interval on each side, their
difference with its 95 % and 90 % t intervals, a two-sided test of a zero difference (Holm-adjusted across the
claims), the minimum detectable difference, and an equivalence test (TOST) against the claim's
`equivalence_margin` (default its `min_effect`): equivalent, different or undetermined
(`harness.analysis.agreement`). An every-arm claim (`since`: the health claim) is compared arm by arm.

Refused in one line (exit 3): a side of another sweep, with claims the sweep file lacks, or on other seeds; a file
that is neither. A claim that cannot be compared (missing from a side, a side with no spread, an arm one side
lacks) is printed as "not compared" with why. Writes results/reports/agreement.json (valid JSON: null where a
number could not be had). Exit code 1 when a difference is significant after Holm, lies beyond its margin, or a
claim was not compared.
"""

from __future__ import annotations

import argparse
import json
import math
import os
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

import pandas as pd

from harness.analysis.evidence import Evidence
from harness.config.errors import ConfigError, DataError
from report.select import resolve, run_tool

if TYPE_CHECKING:
    from harness.analysis.agreement import Agreement
    from harness.runs.sweep_data import SweepData

REFERENCE_MAX_BYTES = 1 << 20
"""A reference is one record of ~1 KB a claim: a larger file is refused before it is read."""


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("sweep", help="the sweep file (its claims are compared) or a sweep's name or id")
    ap.add_argument("--tracking-uri", default=None, help="your runs' store (default: as `harness claims`)")
    ap.add_argument("--yours", metavar="JSON", default=None, help="your runs as an evidence file instead of a store")
    ap.add_argument(
        "--against",
        metavar="URI|JSON",
        required=True,
        help="the other runs: a store, an evidence file (docs/evidence/), or a JSON this command wrote",
    )
    ap.add_argument("--profile", default=None, help="the sweep file's profile both sweeps ran with")
    ap.add_argument("--alpha", type=float, default=0.05)
    ap.add_argument("--out", default="results/reports/agreement.json")
    args = ap.parse_args(argv)
    run_tool("agreement", lambda: _main(args))


def _main(args: argparse.Namespace) -> int:
    from harness.runs.evidence_file import check_evidence

    against = Path(args.against)
    theirs_kept = reference = None
    if args.against.endswith(".json"):
        if _is_evidence(against):
            theirs_kept = check_evidence(against, "--against")
        else:
            reference = _reference(against)
    elif not urlsplit(args.against).scheme and not os.environ.get("MLFLOW_ALLOW_FILE_STORE"):
        raise DataError(
            f"{args.against}: --against: neither an evidence file or report.agreement JSON (.json) nor a store's "
            "URI (sqlite:///PATH for a SQLite file, http(s)://HOST:PORT for a tracking server)"
        )
    yours_kept = None
    if args.yours is not None:
        if args.tracking_uri is not None:
            raise ConfigError("--yours: give your runs as a store (--tracking-uri) or as an evidence file, not both")
        yours_kept = check_evidence(Path(args.yours), "--yours")
        if Path(args.sweep).is_file():
            name, claims = _file_claims(args)
        else:  # a sweep's name: the claims are those the evidence file keeps
            name, claims = yours_kept.sweep, yours_kept.claims
            if args.sweep != name:
                raise DataError(f"{args.yours}: --yours: evidence of sweep '{name}', not of '{args.sweep}'")
        _check_reference(Path(args.yours), yours_kept.sweep, {c.id for c in yours_kept.claims}, name,
                         [c.id for c in claims], "--yours")  # fmt: skip
        uri = args.yours
    else:
        uri, sweep, claims, _ = resolve(args.sweep, args.tracking_uri, args.profile)
        name = sweep.name
    if not claims:
        raise ConfigError(f"{args.sweep}: claims: the sweep declares none")
    if reference is not None:
        _check_reference(against, reference[2], set(reference[0]), name, [c.id for c in claims])
    if theirs_kept is not None:
        _check_reference(against, theirs_kept.sweep, {c.id for c in theirs_kept.claims}, name, [c.id for c in claims])
        if yours_kept is not None:
            _check_seeds(yours_kept.seeds, theirs_kept.seeds, "--against")
    # the stores' readers and the statistics are imported here, after every check a bad flag or file fails: a
    # refusal takes a fraction of a second, not the ~2 s they take to import
    from harness.runs.reader import reader_for
    from harness.runs.sweep_data import read_sweep

    mine = yours_kept.read().data if yours_kept is not None else read_sweep(reader_for(uri), sweep)
    if reference is not None:
        theirs = [reference[0].get(c.id, Evidence(pd.DataFrame(), note="not in the reference")) for c in claims]
        return _judge(
            args, name, claims, _side(mine, claims, args.alpha), (theirs, reference[1], None), (uri, args.against),
            None,
        )  # fmt: skip
    if theirs_kept is not None:
        other = theirs_kept.read().data
    else:
        other_uri, found, _, _ = resolve(args.sweep, args.against, args.profile, "--against")
        other = read_sweep(reader_for(other_uri), found)
    _check_seeds(_finished_seeds(mine), _finished_seeds(other), args.against)
    return _judge(
        args, name, claims, _side(mine, claims, args.alpha), _side(other, claims, args.alpha), (uri, args.against),
        _not_promised(mine, other),
    )  # fmt: skip


def _file_claims(args: argparse.Namespace) -> tuple[str, list]:
    """The sweep file's name and claims (with their margins): what both sides are judged by."""
    from harness.config.plan import plan_sweep

    path = Path(args.sweep)
    if not path.is_file():
        raise ConfigError(f"{args.sweep}: no such sweep file")
    plan = plan_sweep(path, profile=args.profile)
    return plan.name, list(plan.settings.claims)


def _is_evidence(path: Path) -> bool:
    """Whether the .json at `path` is an evidence file (`harness evidence`) rather than a JSON of this command."""
    from harness.runs.evidence_file import FORMAT

    try:
        with path.open("rb") as f:
            return FORMAT.encode() in f.read(256)
    except OSError:
        return False  # `_reference` says why in one line


def _finished_seeds(data: SweepData) -> list[int]:
    return sorted({int(s) for s in data.runs.loc[data.runs["state"] == "done", "seed"]})


def _check_seeds(yours: list[int], theirs: list[int], flag: str) -> None:
    """Refuse, in one line, two sets of runs on different seeds: agreement compares machines, not seed draws."""
    if yours != theirs:
        raise DataError(
            f"{flag}: other seeds ({_seed_range(theirs)} against yours {_seed_range(yours)}): agreement "
            "compares the same jobs on two machines; a replication on fresh seeds is judged by `harness claims`"
        )


def _seed_range(seeds: list[int]) -> str:
    if not seeds:
        return "none finished"
    return f"{seeds[0]}–{seeds[-1]}" if seeds == list(range(seeds[0], seeds[-1] + 1)) else ", ".join(map(str, seeds))


def _side(data: SweepData, claims: list, alpha: float) -> tuple[list[Evidence], list[str], pd.DataFrame]:
    """One side: each claim's evidence, the machines its runs computed on, and each run's values."""
    from harness.analysis.claims import gather
    from harness.runs.evidence_file import per_run_values

    return gather(data, claims, alpha=alpha), _machines(data), per_run_values(data, claims)


def _pairs(claims: list, yours: list[Evidence], theirs: list[Evidence]) -> list[tuple[str, Evidence, Evidence, float]]:
    """What is compared: each claim's effect, and an every-arm (`since`) claim arm by arm, since its effect is its
    weakest arm's and the two sides' weakest arms need not be the same arm."""
    out = []
    for c, a, b in zip(claims, yours, theirs):
        margin = c.equivalence_margin or c.min_effect or math.nan
        if c.contrast.since is None:
            out.append((c.id, a, b, margin))
            continue
        arms = {side: {x.arm: x.as_evidence() for x in e.per_arm} for side, e in (("a", a), ("b", b))}
        if not arms["a"] or not arms["b"]:
            why = "no per-arm values (a report.agreement JSON keeps the weakest arm only: compare evidence files)"
            out.append((c.id, a, Evidence(pd.DataFrame(), note=why), margin))
            continue
        for arm in dict.fromkeys([*arms["a"], *arms["b"]]):
            none = Evidence(pd.DataFrame(), note=f"no arm {arm}")
            out.append((f"{c.id} · {arm}", arms["a"].get(arm, none), arms["b"].get(arm, none), margin))
    return out


def _judge(
    args, name: str, claims: list, yours: tuple, theirs: tuple, where: tuple[str, str], not_promised: str | None
) -> int:
    """Compare run by run (where both sides have runs) and claim by claim, print, write; the exit code.
    `not_promised`: why the two sides' machines need not give the same bits ('' where they should; None: not
    known, a written JSON keeps no machines' fields)."""
    (uri, other_uri), (mine, machines, my_runs), (other, their_machines, their_runs) = where, yours, theirs
    from harness.analysis.agreement import compare_all, identity

    found = compare_all(_pairs(claims, mine, other))
    print(f"{name}: {len(claims)} claims' effects, yours ({uri}) against theirs ({other_uri})")
    print(f"  yours:  {'; '.join(machines) or 'machine not recorded'}")
    print(f"  theirs: {'; '.join(their_machines) or 'machine not recorded'}")
    same = identity(my_runs, their_runs) if my_runs is not None and their_runs is not None else None
    if not_promised:
        print(
            f"bit-identity is not promised here ({not_promised}): harness promises the same bits only on one CPU "
            "vendor and family, CPU path, torch and base model (docs/reproducibility.md); read the equivalence column"
        )
    elif not_promised == "":
        print("bit-identity is promised here: same CPU vendor and family, CPU capability, torch and base model")
    if same is not None:
        print(same.line())
        for line in same.differences[:5]:
            print(f"  first difference: {line}")
        if len(same.differences) > 5:
            print(f"  ... and {len(same.differences) - 5} more runs differ")
    else:
        print("bit-identical: not checked (a report.agreement JSON keeps no per-run values)")
    w = max([len("claim"), *(len(g.claim) for g in found)])  # an every-arm claim's rows name their arm in full
    print(
        f"{'claim':{w}} {'yours':>26} {'theirs':>26} {'difference [95 % CI]':>28} {'p (Holm)':>9} "
        f"{'90 % CI':>20} {'MDD':>8}  equivalence (TOST p)"
    )
    for g in found:
        if g.not_compared:
            print(f"{g.claim:{w}} {_effect(g.a):>26} {_effect(g.b):>26}  not compared: {g.not_compared}")
            continue
        print(
            f"{g.claim:{w}} {_effect(g.a):>26} {_effect(g.b):>26} {_interval(g.difference, g.low, g.high):>28} "
            f"{g.p_holm:9.3g} {f'[{g.low90:+.3g}, {g.high90:+.3g}]':>20} {g.mdd:8.3g}  {_equivalence(g)}"
        )
    differ = [g.claim for g in found if g.p_holm < args.alpha]
    missing = [g.claim for g in found if g.not_compared]
    by = {kind: [g.claim for g in found if g.equivalence == kind] for kind in ("equivalent", "different")}
    print(
        f"within their margins (TOST, α 0.05, no correction needed for all of them): {len(by['equivalent'])} of "
        f"{len(found)}" + (f"; beyond their margins: {', '.join(by['different'])}" if by["different"] else "")
    )
    if missing:
        print(f"not compared: {', '.join(missing)}")
    print(
        f"differ at α {args.alpha:g} after Holm: {', '.join(differ)}"
        if differ
        else f"no compared claim's effect differs at α {args.alpha:g} after Holm"
    )
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(
        json.dumps(
            {
                "sweep": name,
                "yours": uri,
                "machines": machines,
                "theirs": other_uri,
                "their_machines": their_machines,
                "bitwise_promised": None if not_promised is None else not not_promised,
                "why_not_bitwise": not_promised or None,
                "identity": None
                if same is None
                else {
                    "matched": same.matched,
                    "identical": same.identical,
                    "only_yours": same.only_a,
                    "only_theirs": same.only_b,
                    "differences": list(same.differences),
                },
                "claims": [_record(g) for g in found],
            },
            indent=2,
            allow_nan=False,
        )
    )
    return 1 if differ or missing or by["different"] else 0


def _not_promised(a: SweepData, b: SweepData) -> str:
    """Why runs of `a` and `b` need not agree to the bit ('' where the pinned path promises they do), over each
    pair of their recorded machines."""
    from harness.runs.sweep_data import machine_runs

    ours, others = ([m.machine for m in machine_runs(d.runs["machine"]) if m.machine.recorded] for d in (a, b))
    return "; ".join(r for r in dict.fromkeys(x.bits_differ(y) for x in ours for y in others) if r)


def _machines(data: SweepData) -> list[str]:
    from harness.runs.sweep_data import machine_runs

    return [f"{m.runs} runs on {m.machine.text()}" for m in machine_runs(data.runs["machine"])]


def _reference(path: Path, side: str = "yours", flag: str = "--against") -> tuple[dict[str, Evidence], list[str], str]:
    """Each claim's effect as an earlier run of this command wrote it (its "yours" side, a published reference, or
    its "theirs"), the machines its "yours" side ran on, and its sweep's name."""
    fields = ("effect", "low", "high", "se", "df")
    try:
        if (size := path.stat().st_size) > REFERENCE_MAX_BYTES:
            raise DataError(
                f"{path}: {flag}: {size} bytes; a reference holds a record a claim (at most {REFERENCE_MAX_BYTES})"
            )
        written = json.loads(path.read_text(), parse_constant=_not_json)
        found = {
            str(r["claim"]): Evidence(
                pd.DataFrame(),
                **{k: _number(r[side][k]) for k in fields},
                seeds=int(r[side].get("seeds") or 0),
            )
            for r in written["claims"]
        }
        return found, [str(m) for m in written.get("machines", [])], str(written["sweep"])
    except FileNotFoundError:
        raise DataError(f"{path}: {flag}: no such file") from None
    except OSError as exc:
        raise DataError(f"{path}: {flag}: cannot be read ({exc.strerror or type(exc).__name__})") from None
    except (ValueError, UnicodeDecodeError, KeyError, TypeError, AttributeError) as exc:
        raise DataError(f"{path}: {flag}: not a report.agreement JSON ({type(exc).__name__}: {exc})") from None


def _not_json(constant: str) -> float:
    raise ValueError(f"{constant} is not JSON (this command writes null where it has no number)")


def _number(x: object) -> float:
    """A number of the JSON (null, written where none could be had, reads back as NaN)."""
    return math.nan if x is None else float(x)  # type: ignore[arg-type]


def _check_reference(
    path: Path, its_sweep: str, its_claims: set[str], sweep: str, claims: list[str], flag: str = "--against"
) -> None:
    """Refuse, in one line, a reference written for another sweep or holding claims the sweep file lacks (a claim
    the reference lacks is "not compared" instead)."""
    if its_sweep != sweep:
        raise DataError(f"{path}: {flag}: a reference of sweep '{its_sweep}', not of '{sweep}'")
    if extra := sorted(its_claims - set(claims)):
        raise DataError(f"{path}: {flag}: claims the sweep file does not declare: {', '.join(extra)}")


def _equivalence(g: Agreement) -> str:
    if not g.equivalence:
        return "no margin: set the claim's equivalence_margin or min_effect"
    return f"{g.equivalence} (margin ±{g.margin:.3g}, TOST p {g.p_tost:.3g})"


def _effect(e: Evidence) -> str:
    return _interval(e.effect, e.low, e.high) if math.isfinite(e.effect) else "—"


def _interval(x: float, low: float, high: float) -> str:
    return f"{x:+.3g} [{low:+.3g}, {high:+.3g}]" if math.isfinite(low) else f"{x:+.3g}"


def _record(g: Agreement) -> dict:
    def number(x: float) -> float | None:
        return float(x) if math.isfinite(x) else None

    def side(e) -> dict:
        return {k: number(getattr(e, k)) for k in ("effect", "low", "high", "se", "df")} | {"seeds": int(e.seeds)}

    return {
        "claim": g.claim,
        "yours": side(g.a),
        "theirs": side(g.b),
        "difference": number(g.difference),
        "low": number(g.low),
        "high": number(g.high),
        "p": number(g.p),
        "p_holm": number(g.p_holm),
        "low90": number(g.low90),
        "high90": number(g.high90),
        "mdd": number(g.mdd),
        "margin": number(g.margin),
        "p_tost": number(g.p_tost),
        "equivalence": g.equivalence or None,
        "each_inside": bool(g.each_inside),
        "overlap": bool(g.overlap),
        "not_compared": g.not_compared or None,
    }


if __name__ == "__main__":
    main()
