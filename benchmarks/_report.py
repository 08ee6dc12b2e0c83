"""Where benchmark scripts write their JSON (run them as `python benchmarks/NAME.py`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parents[1] / "results" / "benchmarks"


def write_json(name: str, data: Any) -> Path:
    """Write `data` to results/benchmarks/<name>.json and say so."""
    out = RESULTS / f"{name}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(data, indent=2))
    print(f"wrote {out}")
    return out
