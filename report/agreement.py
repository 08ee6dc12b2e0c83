"""Whether a sweep's effects on your runs agree with the same sweep's effects on other runs (another machine, CPU
path or store: the published ones, say).

    python -m report.agreement ablations/dr_grpo_bias.yaml \
        --tracking-uri sqlite:///results/mlflow.db --against docs/reference/dr_grpo_bias.json
    python -m report.agreement ablations/dr_grpo_bias.yaml --rejudge docs/reference/dr_grpo_bias.json

The second judges again the two sides a JSON of this command holds (a published comparison), with no store.

For each claim of the sweep file: its effect and interval on each store, their difference with its 95 % and 90 % t
intervals, a two-sided test of a zero difference (Holm-adjusted across the claims), the minimum detectable
difference, and an equivalence test (TOST) against the claim's `equivalence_margin` (default its `min_effect`):
equivalent, different or undetermined (`harness.analysis.agreement`).
`--against` takes another store, or the JSON this command wrote (its "yours" side is read: docs/reference/ holds
the published main job's; a reference of another sweep, or with claims the sweep file lacks, is refused). Writes
results/reports/agreement.json (valid JSON: null where a number could not be had). A claim that cannot be compared
(missing from a side, or a side with no spread) is printed as "not compared" with why. Exit code 1 when a
difference is significant after Holm, lies beyond its margin, or a claim was not compared.
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
    given = ap.add_mutually_exclusive_group(required=True)
    given.add_argument(
        "--against",
        metavar="URI|JSON",
        help="the other runs' store, or the JSON this command wrote for them (the published effects: docs/reference/)",
    )
    given.add_argument(
        "--rejudge",
        metavar="JSON",
        help="judge again the two sides a JSON of this command holds (a published comparison), with no store",
    )
    ap.add_argument("--profile", default=None, help="the sweep file's profile both sweeps ran with")
    ap.add_argument("--alpha", type=float, default=0.05)
    ap.add_argument("--out", default="results/reports/agreement.json")
    args = ap.parse_args(argv)
    run_tool("agreement", lambda: _main(args))


def _main(args: argparse.Namespace) -> int:
    if args.rejudge is not None:
        return _rejudge(args)
    reference = _reference(Path(args.against)) if args.against.endswith(".json") else None
    if reference is None and not urlsplit(args.against).scheme and not os.environ.get("MLFLOW_ALLOW_FILE_STORE"):
        raise DataError(
            f"{args.against}: --against: neither a report.agreement JSON (.json) nor a store's URI "
            "(sqlite:///PATH for a SQLite file, http(s)://HOST:PORT for a tracking server)"
        )
    uri, sweep, claims, _ = resolve(args.sweep, args.tracking_uri, args.profile)
    if not claims:
        raise ConfigError(f"{args.sweep}: claims: the sweep declares none")
    if reference is not None:
        _check_reference(Path(args.against), reference[2], set(reference[0]), sweep.name, [c.id for c in claims])
    # the stores' readers and the statistics are imported here, after every check a bad flag or file fails: a
    # refusal takes a fraction of a second, not the ~2 s they take to import
    from harness.analysis.claims import gather
    from harness.runs.reader import reader_for
    from harness.runs.sweep_data import read_sweep

    data = read_sweep(reader_for(uri), sweep)
    yours, machines = gather(data, claims, alpha=args.alpha), _machines(data)
    if reference is not None:
        other_uri, their_machines = args.against, reference[1]
        theirs = [reference[0].get(c.id, Evidence(pd.DataFrame(), note="not in the reference")) for c in claims]
    else:
        other_uri, other, _, _ = resolve(args.sweep, args.against, args.profile, "--against")
        other_data = read_sweep(reader_for(other_uri), other)
        theirs, their_machines = gather(other_data, claims, alpha=args.alpha), _machines(other_data)
    return _judge(args, sweep.name, claims, yours, theirs, ((uri, machines), (other_uri, their_machines)))


def _rejudge(args: argparse.Namespace) -> int:
    """Both sides from a JSON this command wrote, the claims (and their margins) from the sweep file."""
    from harness.config.plan import plan_sweep

    path, written = Path(args.sweep), Path(args.rejudge)
    if not path.is_file():
        raise ConfigError(f"{args.sweep}: no such sweep file")
    yours, machines, name = _reference(written, "yours", "--rejudge")
    theirs = _reference(written, "theirs", "--rejudge")[0]
    plan = plan_sweep(path, profile=args.profile)
    claims = list(plan.settings.claims)
    _check_reference(written, name, set(yours), plan.name, [c.id for c in claims], "--rejudge")
    missing = Evidence(pd.DataFrame(), note="not in the JSON")
    sides = [[side.get(c.id, missing) for c in claims] for side in (yours, theirs)]
    return _judge(args, plan.name, claims, *sides, ((f"{written}: yours", machines), (f"{written}: theirs", [])))


def _judge(args, name: str, claims: list, yours: list[Evidence], theirs: list[Evidence], sides: tuple) -> int:
    """Compare, print and write; the exit code."""
    (uri, machines), (other_uri, their_machines) = sides
    from harness.analysis.agreement import compare_all

    margins = [c.equivalence_margin or c.min_effect or math.nan for c in claims]
    found = compare_all([(c.id, a, b, m) for c, a, b, m in zip(claims, yours, theirs, margins)])
    print(f"{name}: {len(found)} claims' effects, yours ({uri}) against theirs ({other_uri})")
    print(f"  yours:  {'; '.join(machines) or 'machine not recorded'}")
    print(f"  theirs: {'; '.join(their_machines) or 'machine not recorded'}")
    print(
        f"{'claim':34} {'yours':>28} {'theirs':>28} {'difference [95 % CI]':>28} {'p (Holm)':>9} "
        f"{'90 % CI':>20} {'MDD':>8}  equivalence (TOST p)"
    )
    for g in found:
        if g.not_compared:
            print(f"{g.claim[:34]:34} {_side(g.a):>28} {_side(g.b):>28}  not compared: {g.not_compared}")
            continue
        print(
            f"{g.claim[:34]:34} {_side(g.a):>28} {_side(g.b):>28} {_interval(g.difference, g.low, g.high):>28} "
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
                "claims": [_record(g) for g in found],
            },
            indent=2,
            allow_nan=False,
        )
    )
    return 1 if differ or missing or by["different"] else 0


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


def _side(e: Evidence) -> str:
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
