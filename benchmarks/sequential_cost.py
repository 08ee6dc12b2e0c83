"""What a sweep would have cost run until decided: its kept runs replayed as a group-sequential design.

    python benchmarks/sequential_cost.py docs/evidence/dr_grpo_bias.json [--first 3] [--batch 2] [--max-seeds 7]

Replays `harness sweep --until-decided`'s rounds on an evidence file's finished runs, seeds taken in ascending order:
the first look at `--first` seeds per arm, then `--batch` more for each arm an open claim reads, up to `--max-seeds`,
each look judged as the sweep judges it (O'Brien–Fleming α spending, Holm across claims, `--alpha`). It prints each
look's claims and the jobs run so far, and stops where every claim is decided, the design's seeds are spent, or the
file holds no more seeds (then the jobs the design would still run are unknown). The fixed design's jobs are the
file's runs. Writes results/benchmarks/sequential_cost.json.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from _report import write_json

from harness.analysis import sequential as seq
from harness.analysis.claims import gather, logged_arm_settings
from harness.analysis.replay import seeds_of
from harness.config.claims import claim_arms
from harness.config.errors import DataError
from harness.runs.evidence_file import read_evidence
from harness.until_decided import more_seeds, state


def replay(path: Path, first: int, batch: int, max_seeds: int, alpha: float) -> dict:
    """The design's looks on the evidence file at `path`, as printed rows, and the jobs it ran."""
    ev = read_evidence(path, "EVIDENCE")
    runs = ev.data.runs
    done = runs[runs["state"] == "done"] if "state" in runs else runs
    seeds = sorted(set(done["seed"]))
    arms = list(dict.fromkeys(runs["arm"]))
    settings = logged_arm_settings(ev.data)
    needs = {c.id: claim_arms(c, settings) for c in ev.claims}
    design = seq.Design(first=first, batch=batch, max_seeds=max_seeds, alpha=alpha)
    tracks = [seq.Track(c.id) for c in ev.claims]
    given, looks, ran_out = dict.fromkeys(arms, first), [], False
    for look, target in enumerate(design.schedule(), 1):
        if look > 1:
            given = more_seeds(given, target, [needs[t.claim_id] for t in tracks if t.open])
        if max(given.values()) > len(seeds):
            ran_out = True
            break
        allowed = {arm: set(seeds[:n]) for arm, n in given.items()}
        open_ = [(c, t) for c, t in zip(ev.claims, tracks) if t.open]
        judged = gather(ev.data, [c for c, _ in open_], alpha=alpha, keep=seeds_of(allowed))
        for (claim, track), e in zip(open_, judged):
            seq.observe(track, look, e, design, claim.threshold)
        seq.decide(ev.claims, tracks, design, final=target >= max_seeds)
        looks.append(
            {
                "look": look,
                "seeds_per_arm": dict(given),
                "jobs": sum(given.values()),
                "claims": {t.claim_id: state(t) for t in tracks},
            }
        )
        if not any(t.open for t in tracks):
            break
    return {
        "evidence": str(path),
        "design": {"first": first, "batch": batch, "max_seeds": max_seeds, "alpha": alpha},
        "fixed_design_jobs": len(runs),
        "seeds_in_file": seeds,
        "looks": looks,
        "decided": not any(t.open for t in tracks),
        "ran_out_of_seeds": ran_out,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("evidence", nargs="+", type=Path)
    ap.add_argument("--first", type=int, default=3, help="seeds per arm at the first look")
    ap.add_argument("--batch", type=int, default=2, help="seeds added per round to the arms an open claim reads")
    ap.add_argument("--max-seeds", type=int, default=7)
    ap.add_argument("--alpha", type=float, default=0.05)
    args = ap.parse_args()
    try:
        results = [replay(p, args.first, args.batch, args.max_seeds, args.alpha) for p in args.evidence]
    except (DataError, ValueError) as error:  # not an evidence file, or a design Design refuses: one line
        raise SystemExit(f"sequential_cost: {error}") from None
    for r in results:
        print(f"{r['evidence']}: fixed design {r['fixed_design_jobs']} jobs (seeds {r['seeds_in_file']})")
        for lk in r["looks"]:
            print(f"  look {lk['look']}: {lk['jobs']} jobs")
            for claim, st in lk["claims"].items():
                print(f"    {claim:32} {st}")
        last = r["looks"][-1]["jobs"] if r["looks"] else 0
        if r["decided"]:
            print(f"  every claim decided after {last} jobs")
        elif r["ran_out_of_seeds"]:
            print(f"  open after {last} jobs; the next round needs more seeds than the file holds")
        else:
            print(f"  open after {last} jobs, the design's seeds spent")
    write_json("sequential_cost", results)


if __name__ == "__main__":
    main()
