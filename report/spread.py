"""An effect's spread across base models against its spread across RL seeds on one base model.

    python -m report.spread ablations/base_models.yaml ablations/dr_grpo_bias.yaml \
        --claim incorrect_length_across_base_models \
        --arm objective.aggregation=seq_mean_token_mean --arm objective.advantage=group_std \
        --vs objective.aggregation=constant --vs objective.advantage=group_mean

The first sweep's seeds are builds (`model.toy.seed: run`), the second's are RL seeds on one build. Each side's
paired effect per seed (arm − vs) is read with the claim's metric and window (`at`); the table gives each side's
effects, mean and SD, the variance ratio with its F interval and test, and the SD the base model adds. Writes
results/reports/spread.json.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict
from pathlib import Path

from harness.analysis.claims import claim_values
from harness.analysis.spread import compare_spread, paired_effects
from harness.config.errors import ConfigError
from harness.runs.reader import reader_for
from harness.runs.sweep_data import read_sweep
from report.select import resolve, run_tool


def _settings(items: list[str], flag: str) -> dict[str, str]:
    bad = [item for item in items if "=" not in item]
    if bad:
        raise ConfigError(f"{flag}: {bad[0]!r} is not KEY=VALUE")
    return dict(item.split("=", 1) for item in items)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("builds", help="sweep file whose seeds are builds")
    ap.add_argument("seeds", help="sweep file whose seeds are RL seeds on one build")
    ap.add_argument("--claim", required=True, help="a claim of the first file: its metric and `at` are read")
    ap.add_argument("--arm", action="append", required=True, metavar="KEY=VALUE", help="settings of one side")
    ap.add_argument("--vs", action="append", required=True, metavar="KEY=VALUE", help="settings of the other")
    ap.add_argument("--tracking-uri", default=None)
    ap.add_argument("--seeds-tracking-uri", default=None, help="the second sweep's store (default: --tracking-uri)")
    ap.add_argument("--out", default="results/reports/spread.json")
    args = ap.parse_args(argv)
    run_tool("spread", lambda: _main(args))


def _main(args: argparse.Namespace) -> None:
    arm, vs = _settings(args.arm, "--arm"), _settings(args.vs, "--vs")
    uri, sweep, claims, _ = resolve(args.builds, args.tracking_uri)
    found = [c for c in claims if c.id == args.claim]
    if not found:
        raise ConfigError(f"{args.builds}: --claim: no claim {args.claim!r} (it has {', '.join(c.id for c in claims)})")
    claim = found[0]
    sides = []
    for ref, store, label in (
        (args.builds, args.tracking_uri, "across base models"),
        (args.seeds, args.seeds_tracking_uri or args.tracking_uri, "across RL seeds, one base model"),
    ):
        uri, sweep, _, _ = resolve(ref, store)
        values = claim_values(read_sweep(reader_for(uri), sweep), claim)
        sides.append(paired_effects(values, arm, vs, f"{label} ({sweep.name})"))
    result = compare_spread(*sides)
    print(f"{claim.metric_text()} at {claim.at.describe()}: ({', '.join(args.arm)}) − ({', '.join(args.vs)})")
    print(f"{'':44} {'n':>3} {'mean':>8} {'SD':>8}  effects")
    for s in sides:
        print(f"{s.label:44} {s.n:>3} {s.mean:8.2f} {s.sd:8.2f}  {', '.join(f'{e:+.1f}' for e in s.effects)}")
    lo, hi = result.ci
    print(
        f"variance ratio {result.ratio:.2f} [{lo:.2f}, {hi:.2f}], F test p {result.p:.3g}; "
        f"SD the base model adds {result.build_sd:.2f}"
    )
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(asdict(result), indent=2))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
