"""Where benchmark scripts write their JSON (run them as `python benchmarks/NAME.py`)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import numpy as np

RESULTS = Path(__file__).resolve().parents[1] / "results" / "benchmarks"


def write_json(name: str, data: Any) -> Path:
    """Write `data` to results/benchmarks/<name>.json and say so."""
    out = RESULTS / f"{name}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(data, indent=2))
    print(f"wrote {out}")
    return out


def random_cases_args(doc: str, cases: int = 300) -> tuple[argparse.Namespace, np.random.Generator]:
    """The options of a script that checks harness against a reference on random cases (`--cases`, `--seed`), and
    the generator its cases are drawn from."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("--cases", type=int, default=cases)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    return args, np.random.default_rng(args.seed)
