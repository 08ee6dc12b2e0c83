"""Writes addition.jsonl, the example's dataset: 1,000 addition problems in the toy model's notation.

    python examples/custom_task/make_data.py

Each row: `problem` (`457+68=`, or `4?7+68=` with one digit hidden, as the toy shows it), `answer` (the true sum,
which a hidden digit makes a guess) and `hidden` (whether a digit is hidden). Seeded: the same file every time.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

ROWS, SEED, HIDE_PROB = 1000, 2026, 0.3


def rows(n: int = ROWS, seed: int = SEED) -> list[dict]:
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        a, b = (str(int(rng.integers(10 ** (d - 1) if d > 1 else 0, 10**d))) for d in rng.integers(1, 5, size=2))
        shown, hidden = [a, b], bool(rng.random() < HIDE_PROB)
        if hidden:
            operand = int(rng.integers(2))
            place = int(rng.integers(len(shown[operand])))
            shown[operand] = shown[operand][:place] + "?" + shown[operand][place + 1 :]
        out.append({"problem": f"{shown[0]}+{shown[1]}=", "answer": str(int(a) + int(b)), "hidden": hidden})
    return out


if __name__ == "__main__":
    path = Path(__file__).with_name("addition.jsonl")
    path.write_text("".join(json.dumps(r) + "\n" for r in rows()))
    print(f"wrote {path} ({ROWS} rows)")
