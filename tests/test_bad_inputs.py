"""A battery of malformed sweep and run files, each through the real `harness` command.

For every case: exit code 2, exactly one stderr line naming the file and the key, no MLflow store
and nothing else written (so no job started), and at most `CPU_BOUND_S` of CPU time. The bound is CPU time, which a
busy machine hardly stretches, not wall-clock time, which it does: how fast an answer comes on a given machine and
load is measured by benchmarks/bad_input_latency.py (figures in docs/benchmarks.md).
"""

from __future__ import annotations

import gzip
import importlib.util
import json
import os
import resource
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
import unicodedata
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from trainer.data.records import MAX_DATA_BYTES, MAX_LINE_BYTES, MAX_ROWS

ROOT = Path(__file__).resolve().parents[1]
CPU_BOUND_S = 4.0
"""CPU seconds (user + system) a command may use to refuse a bad file: what only a blow-up reaches. A refusal took
0.3-0.8 s of CPU on a 2-core AMD EPYC (at most 1.0 s with the cores twice oversubscribed) and ~1 s on a slow, loaded
2-core Intel, most of it Python's start and the config modules' imports; walking an expanded alias bomb (9^8 values)
or planning a 10^6-job grid (~18 s at benchmarks/plan_speed.py's rate) each take well over the bound. Heavy imports
(torch or MLflow: ~2 s each) are caught by name in test_validating_a_config_imports_no_torch_mlflow_or_numpy."""
HANG_S = 30
"""Wall-clock seconds after which a command is killed and reported: a hang guard, which no refusal comes near."""


@dataclass
class Case:
    name: str
    command: str
    """`sweep` or `run`."""
    text: str | None
    """The file's contents (None: `file` names an existing path to pass as is)."""
    key: str
    """What the error line must name, besides the file."""
    args: list[str] = field(default_factory=list)
    file: str | None = None
    env: dict[str, str] = field(default_factory=dict)
    code: int = 2
    """The exit code: 2 a usage or config error, 3 a data error (a store that cannot be used)."""
    setup: Callable[[Path], list[str]] | None = None
    """Makes what the command is pointed at in the case's folder (a store) and returns its args; whatever it made
    must be left byte for byte as it was."""


def _cuda_present() -> bool:
    return any(Path(p).exists() for p in ("/dev/nvidia0", "/proc/driver/nvidia/version"))


SWEEP = "name: s\nbase: base.yaml\nseeds: [0, 1]\n"
"""A valid sweep head; each case adds (or replaces) a key."""
BOMB = (
    "grid:\n  train.lr: [&a [x, x, x, x, x, x, x, x, x], "
    + ", ".join(f"&{b} [{', '.join(['*' + a] * 9)}]" for a, b in zip("abcdefg", "bcdefgh"))
    + "]\n"
)
"""A YAML alias bomb of ~560 bytes in a grid axis: 9^8 values once expanded."""
NESTED = "[" * 50_000 + "]" * 50_000
MILLION_JOBS = (
    SWEEP.replace("[0, 1]", "[0, 1, 2, 3, 4, 5, 6, 7, 8, 9]")
    + "grid:\n"
    + "".join(
        f"  objective.{k}: [{', '.join(str(0.01 * (i + 1)) for i in range(10))}]\n"
        for k in ("clip_low", "clip_high", "kl_coef", "adv_eps", "dual_clip")
    )
)
"""10^5 arms x 10 seeds."""
NEVER = (
    "claims:\n  - id: c\n    statement: s.\n    metric: {m}\n    direction: increase\n    at: {at}\n    contrast: {c}\n"
)
"""A claims section (a `str.format` template: metric, at, contrast)."""

TUNE = (
    "name: t\nbase: base.yaml\nspace:\n  train.lr: {type: log_float, low: 1.0e-6, high: 1.0e-2}\n"
    "objective: {metric: policy/lr, at: final, direction: maximize}\ntrials: 2\n"
)
"""A valid tune file."""


def _foreign_db(workdir: Path) -> list[str]:
    """Another application's SQLite database: a table `customers` with a row."""
    con = sqlite3.connect(workdir / "customers.db")
    with con:
        con.execute("CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT)")
        con.execute("INSERT INTO customers (name) VALUES ('Ada')")
    con.close()
    return ["--tracking-uri", f"sqlite:///{workdir / 'customers.db'}"]


def _text_file(workdir: Path) -> list[str]:
    (workdir / "notes.txt").write_text("not a database\n")
    return ["--tracking-uri", f"sqlite:///{workdir / 'notes.txt'}"]


def _folder(workdir: Path) -> list[str]:
    (workdir / "store").mkdir()
    return ["--tracking-uri", f"sqlite:///{workdir / 'store'}"]


def _no_server(workdir: Path) -> list[str]:
    return ["--tracking-uri", "http://127.0.0.1:9/"]  # the discard port: nothing listens there


STORES = {
    "another application's SQLite file": _foreign_db,
    "a text file": _text_file,
    "a folder": _folder,
    "a server that does not answer": _no_server,
}
"""Stores harness did not make, each refused before anything is written (exit 3: a data error)."""
STORE_COMMANDS = {
    "sweep": SWEEP + "grid:\n  train.lr: [0.1, 0.2]\n",
    "run": "seed: 3\n",
    "tune": TUNE,
    "report": SWEEP + "grid:\n  train.lr: [0.1, 0.2]\n",
    "claims": SWEEP + "grid:\n  train.lr: [0.1, 0.2]\n",
}
"""Each command that opens a store, with a valid file for it."""

DECIDABLE = (
    SWEEP + "grid:\n  train.lr: [0.1, 0.2]\nclaims:\n  - {id: c, statement: s., metric: train/reward_mean, "
    "direction: increase, at: last-10, contrast: {effect: train.lr, from: 0.1, to: 0.2}}\n"
)
"""A valid sweep with a claim, for `--until-decided`."""
BIG = "x" * 700_000
"""A 700 kB string: anchored once and aliased many times, tens of GB once expanded."""
LR = "{effect: train.lr, from: 0.1, to: 0.2}"
FORGED = "\\e[2J\\e]0;pwned\\a\\nREPRODUCED: every claim holds"
"""YAML escapes for a question that clears the screen, sets the window title and prints a forged verdict line."""
ESC_ARM = '{arm: "\\e[31mA", vs: B}'


def _claim_text(key: str, value: str) -> str:
    """A valid sweep whose one claim (a paper's, quoted) has `key` set to `value`, a YAML double-quoted string (its
    escapes, such as \\e for ESC, are YAML's)."""
    fields = {"paper": "2503.20783", "quote": "q", "where": "w", "question": "q?", "statement": "s.", key: value}
    return (
        SWEEP
        + "grid:\n  train.lr: [0.1, 0.2]\nclaims:\n  - id: c\n"
        + "".join(f'    {k}: "{v}"\n' for k, v in fields.items())
        + f"    metric: train/reward_mean\n    direction: increase\n    at: last-10\n    contrast: {LR}\n"
    )


CASES = [
    # duplicates, ints, empty sweeps
    Case("duplicate seeds", "sweep", SWEEP + "seeds: [3]\ngrid:\n  train.lr: [0.1, 0.2]\n", "seeds"),
    Case("duplicate grid key", "sweep", SWEEP + "grid:\n  train.lr: [0.1]\n  train.lr: [0.2]\n", "train.lr"),
    Case("seed true", "sweep", "name: s\nbase: base.yaml\nseeds: [true]\ngrid:\n  train.lr: [0.1, 0.2]\n", "seeds"),
    Case(
        "seed 2^63",
        "sweep",
        "name: s\nbase: base.yaml\nseeds: [9223372036854775808]\ngrid:\n  train.lr: [0.1]\n",
        "seeds",
    ),
    Case("negative seed", "sweep", "name: s\nbase: base.yaml\nseeds: [-1]\ngrid:\n  train.lr: [0.1]\n", "seeds"),
    Case("repeated seeds", "sweep", "name: s\nbase: base.yaml\nseeds: [1, 1]\ngrid:\n  train.lr: [0.1]\n", "seeds"),
    Case("seeds not a list", "sweep", "name: s\nbase: base.yaml\nseeds: 3\ngrid:\n  train.lr: [0.1]\n", "seeds"),
    Case("empty grid", "sweep", SWEEP + "grid: {}\n", "grid"),
    # hyperparameters a job would die on
    Case("lr inf", "sweep", SWEEP + "grid:\n  train.lr: [.inf, 0.1]\n", "train.lr"),
    Case("clip nan", "sweep", SWEEP + "grid:\n  objective.clip_high: [.nan, 0.2]\n", "objective.clip_high"),
    Case(
        "betas out of range",
        "sweep",
        SWEEP + "set:\n  train.betas: [0.9, 1.0]\ngrid:\n  train.lr: [0.1, 0.2]\n",
        "train.betas",
    ),
    Case(
        "max_new_tokens beyond the model",
        "sweep",
        SWEEP + "grid:\n  rollout.max_new_tokens: [64, 1000]\n",
        "max_new_tokens",
    ),
    Case(
        "cache_dir not writable",
        "sweep",
        SWEEP + "set:\n  model.cache_dir: base.yaml/cache\ngrid:\n  train.lr: [0.1, 0.2]\n",
        "model.cache_dir",
    ),
    Case(
        "hub id without hub",
        "sweep",
        SWEEP + "set:\n  model.source: hf\n  model.name_or_path: nobody-xyz/no-such-model\n"
        "grid:\n  train.lr: [0.1, 0.2]\n",
        "model.name_or_path",
        env={"HF_HUB_OFFLINE": "1"},
    ),
    Case("bad preset", "sweep", SWEEP + "grid:\n  objective.preset: [grpo, nope]\n", "objective.preset"),
    Case(
        "bad switch name",
        "sweep",
        SWEEP + "grid:\n  objective.aggregation: [token_mean, nope]\n",
        "objective.aggregation",
    ),
    # the 2025-26 switches
    Case("unknown surrogate", "sweep", SWEEP + "grid:\n  objective.surrogate: [clip, ppo2]\n", "objective.surrogate"),
    Case(
        "entropy coefficient below 0",
        "sweep",
        SWEEP + "grid:\n  objective.entropy_coef: [0.01, -0.5]\n",
        "objective.entropy_coef",
    ),
    Case(
        "top-entropy quantile above 1",
        "sweep",
        SWEEP + "grid:\n  objective.top_entropy_quantile: [0.2, 1.5]\n",
        "objective.top_entropy_quantile",
    ),
    Case(
        "luspo without the sequence ratio",
        "sweep",
        SWEEP + "set:\n  objective.preset: luspo\n  objective.ratio: token\ngrid:\n  train.lr: [0.1, 0.2]\n",
        "objective.ratio",
    ),
    Case(
        "sapo temperatures without sapo",
        "sweep",
        SWEEP + "set:\n  objective.sapo_temperature: [1.0, 1.05]\ngrid:\n  train.lr: [0.1, 0.2]\n",
        "objective: sapo_temperature",
    ),
    Case(
        "run: unknown rollout correction",
        "run",
        "objective:\n  preset: grpo\n  rollout_correction: tis\n",
        "objective.rollout_correction",
    ),
    Case(
        "timeout nan",
        "sweep",
        SWEEP + "executor:\n  timeout_s: .nan\ngrid:\n  train.lr: [0.1, 0.2]\n",
        "executor.timeout_s",
    ),
    # names
    Case(
        "100k-char name",
        "sweep",
        SWEEP.replace("name: s", "name: " + "n" * 100_000) + "grid:\n  train.lr: [0.1, 0.2]\n",
        "name",
    ),
    Case(
        "name with NUL", "sweep", SWEEP.replace("name: s", 'name: "a\\0b"') + "grid:\n  train.lr: [0.1, 0.2]\n", "name"
    ),
    Case(
        "name with newline",
        "sweep",
        SWEEP.replace("name: s", 'name: "a\\nb"') + "grid:\n  train.lr: [0.1, 0.2]\n",
        "name",
    ),
    Case(
        "name with ../",
        "sweep",
        SWEEP.replace("name: s", "name: ../../../../ESCAPED") + "grid:\n  train.lr: [0.1, 0.2]\n",
        "name",
    ),
    Case("experiment with /", "sweep", SWEEP + "experiment: a/b\ngrid:\n  train.lr: [0.1, 0.2]\n", "experiment"),
    Case("arm name with ../", "sweep", SWEEP + "arms:\n  - {name: ../x, set: {train.lr: 0.1}}\n", "arms[0].name"),
    # structure
    Case("unknown key", "sweep", SWEEP + "gird:\n  train.lr: [0.1, 0.2]\n", "gird"),
    Case("unknown run key in grid", "sweep", SWEEP + "grid:\n  train.lrr: [0.1, 0.2]\n", "train.lrr"),
    Case(
        "missing base", "sweep", SWEEP.replace("base.yaml", "nowhere.yaml") + "grid:\n  train.lr: [0.1, 0.2]\n", "base"
    ),
    Case("zip lengths differ", "sweep", SWEEP + "zip:\n  - train.lr: [0.1, 0.2]\n    seed: [1]\n", "zip[0]"),
    Case(
        "exclude of a fixed key",
        "sweep",
        SWEEP + "grid:\n  train.lr: [0.1, 0.2]\nexclude:\n  - {train.steps: 3}\n",
        "exclude[0]",
    ),
    Case(
        "arm names repeat",
        "sweep",
        SWEEP + "arms:\n  - {name: a, set: {train.lr: 0.1}}\n  - {name: a, set: {train.lr: 0.2}}\n",
        "arms",
    ),
    Case("not a mapping", "sweep", "- name\n- seeds\n", "top level"),
    Case("bad YAML", "sweep", SWEEP + "grid: [unclosed\n", "line"),
    Case("50k nested brackets", "sweep", SWEEP + "grid:\n  train.lr: " + NESTED + "\n", "grid"),
    Case("anchor bomb", "sweep", SWEEP + BOMB, "grid.train.lr"),
    Case("recursive alias", "sweep", SWEEP + "grid:\n  train.lr: &r [*r]\n", "grid"),
    Case(
        "10^6 jobs",
        "sweep",
        MILLION_JOBS,
        "--max-jobs",
    ),
    Case("/dev/zero", "sweep", None, "/dev/zero", file="/dev/zero"),
    Case("over 1 MiB", "sweep", SWEEP + "grid:\n  train.lr: [0.1, 0.2]\n" + "#" * (2 << 20) + "\n", "MiB"),
    # options that were silently dropped
    Case(
        "--set on a grid key",
        "sweep",
        SWEEP + "grid:\n  objective.preset: [grpo, dr_grpo]\n",
        "objective.preset",
        args=["--set", "objective.preset=gspo"],
    ),
    Case("--set seed in a sweep", "sweep", SWEEP + "grid:\n  train.lr: [0.1, 0.2]\n", "seed", args=["--set", "seed=7"]),
    Case(
        "--set on an arm key",
        "sweep",
        SWEEP + "arms:\n  - {name: a, set: {train.lr: 0.1}}\n",
        "train.lr",
        args=["--set", "train.lr=0.3"],
    ),
    # run files
    Case("run: seed true", "run", "seed: true\n", "seed"),
    Case("run: seed 2^63", "run", "seed: 9223372036854775808\n", "seed"),
    Case("run: lr inf", "run", "train:\n  lr: .inf\n", "train.lr"),
    Case("run: temperature nan", "run", "rollout:\n  temperature: .nan\n", "rollout.temperature"),
    Case("run: toy lr inf", "run", "model:\n  toy:\n    lr: .inf\n", "model.toy.lr"),
    Case("run: duplicate key", "run", "train:\n  steps: 3\n  steps: 4\n", "steps"),
    Case("run: name with newline", "run", 'name: "a\\nb"\n', "name"),
    Case("run: 100k-char experiment", "run", "tracking:\n  experiment: " + "e" * 100_000 + "\n", "tracking.experiment"),
    Case("run: run_name with /", "run", "tracking:\n  run_name: a/b\n", "tracking.run_name"),
    Case("run: betas negative", "run", "train:\n  betas: [-0.1, 0.999]\n", "train.betas"),
    Case("run: max_new_tokens beyond the model", "run", "rollout:\n  max_new_tokens: 4000\n", "max_new_tokens"),
    Case("run: nested brackets", "run", "train:\n  lr: " + NESTED + "\n", "train"),
    Case("run: /dev/zero", "run", None, "/dev/zero", file="/dev/zero"),
    # sizes no real run reaches: a typo, refused before it runs until killed
    Case(
        "steps 10^12",
        "sweep",
        SWEEP + "set:\n  train.steps: 1000000000000\ngrid:\n  train.lr: [0.1, 0.2]\n",
        "train.steps",
    ),
    Case("run: steps 10^12", "run", "train:\n  steps: 1000000000000\n", "train.steps"),
    Case("run: toy SFT steps 10^9", "run", "model:\n  toy:\n    sft_steps: 1000000000\n", "model.toy.sft_steps"),
    Case("run: epochs 10^6", "run", "train:\n  epochs: 1000000\n", "train.epochs"),
    # hostile battery, round 3: counts that size memory (bounded before anything is allocated)
    Case("run: group_size 10^9", "run", "rollout:\n  group_size: 1000000000\n", "rollout.group_size"),
    Case(
        "run: 2^11 prompts x 2^10 samples",
        "run",
        "rollout:\n  prompts_per_step: 2048\n  group_size: 1024\n",
        "rollout",
    ),
    Case("run: max_new_tokens 10^9", "run", "rollout:\n  max_new_tokens: 1000000000\n", "rollout.max_new_tokens"),
    Case(
        "--until-decided --max-seeds 10^12",
        "sweep",
        DECIDABLE,
        "--max-seeds",
        args=["--until-decided", "--max-seeds", "1000000000000"],
    ),
    Case(
        "--until-decided --max-seeds 10^12 --dry-run",
        "sweep",
        DECIDABLE,
        "--max-seeds",
        args=["--until-decided", "--max-seeds", "1000000000000", "--dry-run"],
    ),
    Case(
        "--until-decided: 2 arms x --max-seeds 6000 over the job limit",
        "sweep",
        DECIDABLE,
        "--max-seeds",
        args=["--until-decided", "--max-seeds", "6000", "--dry-run"],
    ),
    Case(
        "--until-decided --batch 10^12",
        "sweep",
        DECIDABLE,
        "--batch",
        args=["--until-decided", "--batch", "1000000000000"],
    ),
    Case(
        "10001 seeds",
        "sweep",
        SWEEP.replace("[0, 1]", str(list(range(10_001)))) + "grid:\n  train.lr: [0.1, 0.2]\n",
        "seeds",
    ),
    Case(
        "--max-jobs 10^12 on 10^6 jobs",
        "sweep",
        MILLION_JOBS,
        "--max-jobs",
        args=["--max-jobs", "1000000000000"],
    ),
    Case(
        "700 kB string aliased 90,000 times in an unused profile",
        "sweep",
        SWEEP
        + "grid:\n  train.lr: [0.1, 0.2]\nprofiles:\n  p:\n    a: &s "
        + BIG
        + "\n    b: ["
        + ",".join(["*s"] * 90_000)
        + "]\n",
        "profiles.p.b",
    ),
    Case(
        "700 kB string aliased as 2000 claims' statements",
        "sweep",
        SWEEP
        + "grid:\n  train.lr: [0.1, 0.2]\nprofiles:\n  p:\n    a: &s "
        + BIG
        + "\nclaims:\n"
        + "".join(
            f"  - {{id: c{i}, statement: *s, metric: train/reward_mean, direction: increase, at: last-10, "
            "contrast: {effect: train.lr, from: 0.1, to: 0.2}}\n"
            for i in range(2000)
        ),
        "claims",
    ),
    Case(
        "tune grid: step 1e-12 over [1e-4, 1e-3]",
        "tune",
        "name: t\nbase: base.yaml\nsampler: {name: grid}\n"
        "space:\n  train.lr: {type: float, low: 1.0e-4, high: 1.0e-3, step: 1.0e-12}\n",
        "space.train.lr",
    ),
    Case(
        "tune grid: step 1e-300 over [1e-4, 1e-3]",
        "tune",
        "name: t\nbase: base.yaml\nsampler: {name: grid}\n"
        "space:\n  train.lr: {type: float, low: 1.0e-4, high: 1.0e-3, step: 1.0e-300}\n",
        "space.train.lr",
    ),
    Case(
        "tune grid: three int settings x 1000 values",
        "tune",
        "name: t\nbase: base.yaml\nsampler: {name: grid}\nspace:\n"
        "  train.steps: {type: int, low: 1, high: 1000, step: 1}\n"
        "  rollout.group_size: {type: int, low: 2, high: 1001, step: 1}\n"
        "  rollout.prompts_per_step: {type: int, low: 1, high: 1000, step: 1}\n",
        "space",
    ),
    # hostile battery, round 3: config text printed as data (markup, terminal control, length)
    *[
        Case(
            f"{' '.join([command, *args])}: claim {key} {what}",
            command,
            _claim_text(key, value),
            f"claims[0].{key}",
            args=args,
        )
        for command, args in (("sweep", []), ("claims", []), ("report", []), ("sweep", ["--until-decided"]))
        for key, what, value in (
            ("question", "clears the screen, sets the title, forges a row", FORGED),
            ("statement", "of 200,000 characters", "x" * 200_000),
        )
    ],
    Case("claim question with a newline", "sweep", _claim_text("question", "Why?\\nREPRODUCED"), "claims[0].question"),
    Case("claim statement with C1 OSC", "sweep", _claim_text("statement", "s\\x9d0;t\\x9c"), "claims[0].statement"),
    Case("claim statement with a bidi override", "sweep", _claim_text("statement", "\\u202es"), "claims[0].statement"),
    Case("claim quote with DEL", "sweep", _claim_text("quote", "q\\x7f"), "claims[0].quote"),
    Case("claim quote of 2001 characters", "sweep", _claim_text("quote", "q" * 2001), "claims[0].quote"),
    Case("claim where with a tab", "sweep", _claim_text("where", "Section\\t3"), "claims[0].where"),
    Case("claim where with BEL", "sweep", _claim_text("where", "Fig. 1\\a"), "claims[0].where"),
    Case("claim paper id with a newline", "sweep", _claim_text("paper", "2503.20783\\n"), "claims[0].paper"),
    Case(
        "claim metric with an escape sequence",
        "sweep",
        SWEEP + "grid:\n  train.lr: [0.1, 0.2]\n" + NEVER.format(m='"eval/\\e[2J/accuracy"', at="final", c=LR),
        "claims[0].metric",
    ),
    Case(
        "claim contrast naming an arm with an escape sequence",
        "sweep",
        SWEEP + "grid:\n  train.lr: [0.1, 0.2]\n" + NEVER.format(m="train/reward_mean", at="final", c=ESC_ARM),
        "claims[0].contrast.arm",
    ),
    Case(
        "arm label made of a value with an escape sequence",
        "sweep",
        SWEEP + 'grid:\n  task.math.fields.id: ["\\e[2J", id]\n',
        "arm 'id=",
    ),
    # hostile battery, round 3: stores harness did not make (foreign, broken, unreachable)
    *[
        Case(f"{command}: store is {store}", command, text, "--tracking-uri", code=3, setup=make)
        for store, make in STORES.items()
        for command, text in STORE_COMMANDS.items()
    ],
    Case(
        "sweep --dry-run: store is another application's SQLite file",
        "sweep",
        STORE_COMMANDS["sweep"],
        "--tracking-uri",
        args=["--dry-run"],
        code=3,
        setup=_foreign_db,
    ),
    Case(
        "tune: Optuna storage is another application's SQLite file",
        "tune",
        TUNE,
        "--storage",
        code=3,
        setup=lambda workdir: ["--storage", _foreign_db(workdir)[1]],
    ),
    # hostile battery, round 3: claims that can never be judged
    Case(
        "claim since a step beyond train.steps",
        "sweep",
        SWEEP
        + "grid:\n  train.lr: [0.1, 0.2]\n"
        + NEVER.format(m="train/reward_mean", at="last-10", c="{since: step 500}"),
        "claims[0] (c).contrast.since",
    ),
    Case(
        "claim on policy/kl in a sweep that does not log it",
        "sweep",
        SWEEP
        + "set:\n  train.reference_kl: false\ngrid:\n  train.lr: [0.1, 0.2]\n"
        + NEVER.format(m="policy/kl", at="last-10", c="{effect: train.lr, from: 0.1, to: 0.2}"),
        "claims[0] (c).metric: policy/kl is not logged",
    ),
    Case(
        "claim at a step beyond train.steps",
        "sweep",
        SWEEP
        + "grid:\n  train.lr: [0.1, 0.2]\n"
        + NEVER.format(m="train/reward_mean", at="step 121", c="{effect: train.lr, from: 0.1, to: 0.2}"),
        "claims[0] (c).at",
    ),
    Case(
        "claim on a difference of a metric with itself",
        "sweep",
        SWEEP
        + "grid:\n  train.lr: [0.1, 0.2]\n"
        + NEVER.format(
            m="{difference: [train/length_mean, train/length_mean]}",
            at="last-10",
            c="{effect: train.lr, from: 0.1, to: 0.2}",
        ),
        "claims[0].metric",
    ),
    Case(
        "claim on a ratio of a metric with itself",
        "sweep",
        SWEEP
        + "grid:\n  train.lr: [0.1, 0.2]\n"
        + NEVER.format(
            m="{ratio: [policy/entropy, policy/entropy]}", at="last-10", c="{effect: train.lr, from: 0.1, to: 0.2}"
        ),
        "claims[0].metric",
    ),
]


def _custom_files(workdir: Path) -> list[str]:
    """A custom task's files beside the run file: a dataset, one whose third row lacks the column `answer`, one with
    a prompt the toy cannot read, reward functions of every kind of wrong, and a class that is not a task."""
    rows = [{"problem": "1+2=", "answer": "3"}, {"problem": "2+2=", "answer": "4"}]
    (workdir / "data.jsonl").write_text("".join(__import__("json").dumps(r) + "\n" for r in rows))
    (workdir / "nocol.jsonl").write_text(
        "".join(__import__("json").dumps(r) + "\n" for r in [*rows, {"problem": "3+3=", "sum": "6"}])
    )
    (workdir / "odd.jsonl").write_text('{"problem": "What is 1+2?", "answer": "3"}\n')
    (workdir / "rewards.py").write_text(
        "score = 3\n\ndef one_arg(text):\n    return 1.0\n\n"
        "def good(completion, reference, prompt):\n    return 1.0\n\n"
        "class NotATask:\n    def grade(self, group, index, completion):\n        return None\n"
    )
    (workdir / "broken.py").write_text("def f(completion, reference, prompt)\n    return 1.0\n")
    (workdir / "heavy.py").write_text("BIG = bytearray(2**33)\n\ndef f(completion, reference, prompt):\n    return 1\n")
    return []


def _custom(data: str = "data.jsonl", reward: str = "rewards.py:good", extra: str = "") -> str:
    return f"task:\n  name: custom\n  custom:\n    data: {data}\n    reward: {reward}\n{extra}"


CASES += [  # a task of the user's: every file and name it points at checked before any job
    Case(
        "run: custom, missing column",
        "run",
        _custom(data="nocol.jsonl"),
        "task.custom.fields.answer",
        setup=_custom_files,
    ),
    Case(
        "run: custom, missing data file", "run", _custom(data="nowhere.jsonl"), "task.custom.data", setup=_custom_files
    ),
    Case(
        "run: custom, module does not import",
        "run",
        _custom(reward="no_such_module_h47:f"),
        "task.custom.reward",
        setup=_custom_files,
    ),
    Case(
        "run: custom, file does not import",
        "run",
        _custom(reward="broken.py:f"),
        "task.custom.reward",
        setup=_custom_files,
    ),
    Case(
        "run: custom, reward file missing",
        "run",
        _custom(reward="nowhere.py:f"),
        "task.custom.reward",
        setup=_custom_files,
    ),
    Case(
        "run: custom, not callable",
        "run",
        _custom(reward="rewards.py:score"),
        "task.custom.reward",
        setup=_custom_files,
    ),
    Case(
        "run: custom, no such function",
        "run",
        _custom(reward="rewards.py:nope"),
        "task.custom.reward",
        setup=_custom_files,
    ),
    Case(
        "run: custom, wrong signature",
        "run",
        _custom(reward="rewards.py:one_arg"),
        "task.custom.reward",
        setup=_custom_files,
    ),
    Case(
        "run: custom, template slot not a column",
        "run",
        _custom(extra="    template: 'Q {question}'\n"),
        "task.custom.template",
        setup=_custom_files,
    ),
    Case(
        "run: custom, prompt the toy cannot read",
        "run",
        _custom(data="odd.jsonl"),
        "task.custom.data",
        setup=_custom_files,
    ),
    Case(
        "run: custom, class not a task",
        "run",
        "task:\n  name: custom\n  custom:\n    class: rewards.py:NotATask\n",
        "task.custom.class",
        setup=_custom_files,
    ),
    Case("run: custom, reward not module:name", "run", _custom(reward="rewards"), "task.custom.reward"),
    Case("run: custom, no reward", "run", "task:\n  name: custom\n  custom:\n    data: data.jsonl\n", "reward"),
    Case(
        "run: custom, class and data",
        "run",
        "task:\n  name: custom\n  custom:\n    class: m:C\n    data: data.jsonl\n",
        "class",
    ),
    Case("run: custom, budget 1 hour", "run", _custom(extra="    budget_s: 3600\n"), "task.custom.budget_s"),
    Case("run: custom, root in the config", "run", _custom(extra="    root: /tmp\n"), "task.custom.root"),
    Case(  # imported in its bounded helper, never in harness's process: 8 GiB at import is refused at once
        "run: custom, module past the memory bound at import",
        "run",
        _custom(reward="heavy.py:f"),
        "task.custom.reward",
        setup=_custom_files,
    ),
    Case("run: custom, memory bound 0", "run", _custom(extra="    memory_mb: 0\n"), "task.custom.memory_mb"),
    Case("run: custom, processes -1", "run", _custom(extra="    processes: -1\n"), "task.custom.processes"),
    Case(
        "custom, missing column in a sweep",
        "sweep",
        SWEEP + "set:\n  task.name: custom\n  task.custom.data: nocol.jsonl\n  task.custom.reward: rewards.py:good\n"
        "grid:\n  train.lr: [0.1, 0.2]\n",
        "task.custom.fields.answer",
        setup=_custom_files,
    ),
]


def _past_bound(name: str) -> Callable[[Path], list[str]]:
    """A setup writing the custom task's files and data file `name`, past one of trainer.data.records' bounds at
    its default in a few hundred kilobytes: gzip bombs of newlines (MAX_ROWS lines) and of a JSON list (past
    MAX_DATA_BYTES once decompressed), a line past MAX_LINE_BYTES, a parquet file of MAX_ROWS + 1 rows."""

    def setup(workdir: Path) -> list[str]:
        _custom_files(workdir)
        path = workdir / name
        if name == "newlines.jsonl.gz":
            path.write_bytes(gzip.compress(b"\n" * (MAX_ROWS + 1)))
        elif name == "list.json.gz":  # gzip members concatenate: ~1 kB each, 1 MiB once decompressed
            path.write_bytes(gzip.compress(b"[") + gzip.compress(b" " * (1 << 20)) * (MAX_DATA_BYTES // (1 << 20)))
        elif name == "line.jsonl":
            path.write_text(json.dumps({"problem": "x" * MAX_LINE_BYTES, "answer": "3"}) + "\n")
        else:
            import pyarrow as pa
            import pyarrow.parquet as pq

            pq.write_table(pa.table({"problem": ["1+2="] * (MAX_ROWS + 1), "answer": ["3"] * (MAX_ROWS + 1)}), path)
        return []

    return setup


CASES += [  # the data a task reads: refused while reading, past a bound, before the whole file is in memory
    Case(
        f"run: custom, {name} past {bound}",
        "run",
        _custom(data=name),
        f"task.custom.data: {name}: {said} ({bound})",
        setup=_past_bound(name),
    )
    for name, said, bound in [
        ("newlines.jsonl.gz", f"more than {MAX_ROWS:,} lines", "MAX_ROWS"),
        ("list.json.gz", f"holds more than {MAX_DATA_BYTES:,} bytes once decompressed", "MAX_DATA_BYTES"),
        ("line.jsonl", f"line 1 holds more than {MAX_LINE_BYTES:,} bytes", "MAX_LINE_BYTES"),
        ("n.parquet", f"{MAX_ROWS + 1:,} rows, more than {MAX_ROWS:,}", "MAX_ROWS"),
    ]
]
CASES.append(
    Case(
        "run: custom, hub dataset neither cached nor reachable",
        "run",
        _custom(data="someorg/no-such-set"),
        "task.custom.data: someorg/no-such-set: no file or folder here, nor a hub dataset in the local Hugging Face "
        "cache, and HF_DATASETS_OFFLINE is set",
        # the hub off, and an empty cache: an empty HF_HUB_CACHE or HF_DATASETS_CACHE falls back to $HF_HOME
        env={"HF_DATASETS_OFFLINE": "1", "HF_HOME": "/nonexistent/hf", "HF_HUB_CACHE": "", "HF_DATASETS_CACHE": ""},
    )
)


# Advantage variants: NGRPO's virtual reward (reward_range) and BNPO's Beta parameters (bnpo_params).
CASES += [
    Case("run: MC-GRPO with no epsilon", "run", "objective:\n  preset: mc_grpo\n  adv_eps: 0\n", "adv_eps"),
    Case("run: BNPO's cap below 0", "run", "objective:\n  preset: bnpo\n  bnpo_max_weight: -1\n", "bnpo_max_weight"),
    Case(
        "run: NGRPO's lone-response rule unknown",
        "run",
        "objective:\n  preset: ngrpo\n  ngrpo_single: half\n",
        "ngrpo_single",
    ),
    Case(
        "run: NGRPO's filter without dynamic sampling",
        "run",
        "objective:\n  preset: ngrpo\n  dynamic_sampling: false\n",
        "dynamic_sampling_drop",
    ),
    Case(
        "run: NSR's drop not a boolean", "run", "objective:\n  preset: nsr\n  drop_correct: sometimes\n", "drop_correct"
    ),
    Case("run: ngrpo without reward_range", "run", "objective:\n  preset: grpo\n  advantage: ngrpo\n", "reward_range"),
    Case(
        "run: ngrpo virtual reward not a number",
        "run",
        "objective:\n  preset: grpo\n  advantage: ngrpo\n  reward_range: [0, one]\n",
        "objective.reward_range",
    ),
    Case(
        "run: ngrpo virtual reward infinite",
        "run",
        "objective:\n  preset: grpo\n  advantage: ngrpo\n  reward_range: [0, .inf]\n",
        "objective.reward_range",
    ),
    Case(
        "run: ngrpo virtual reward below the lowest",
        "run",
        "objective:\n  preset: grpo\n  advantage: ngrpo\n  reward_range: [1, 0]\n",
        "reward_range",
    ),
    Case(
        "run: reward_range under group_std",
        "run",
        "objective:\n  preset: grpo\n  reward_range: [0, 1]\n",
        "reward_range",
    ),
    Case(
        "run: bnpo Beta parameter 0",
        "run",
        "objective:\n  preset: grpo\n  advantage: bnpo\n  reward_range: [0, 1]\n  bnpo_params: [0, 2]\n",
        "bnpo_params",
    ),
    Case(
        "run: bnpo Beta parameter nan",
        "run",
        "objective:\n  preset: grpo\n  advantage: bnpo\n  reward_range: [0, 1]\n  bnpo_params: [1, .nan]\n",
        "objective.bnpo_params",
    ),
    Case(
        "run: bnpo_params under ngrpo",
        "run",
        "objective:\n  preset: ngrpo\n  bnpo_params: [1, 1]\n",
        "bnpo_params",
    ),
    Case(
        "ngrpo sweep, reward_range one number",
        "sweep",
        SWEEP + "set:\n  objective.preset: ngrpo\n  objective.reward_range: 1\ngrid:\n  train.lr: [0.1, 0.2]\n",
        "objective.reward_range",
    ),
]

# MC-GRPO's median pivot (median_pivot) and NSR / W-REINFORCE's weight of positive samples (positive_weight).
CASES += [
    Case(
        "run: median_pivot with a mean baseline",
        "run",
        "objective:\n  preset: grpo\n  median_pivot: true\n",
        "median_pivot",
    ),
    Case(
        "run: median_pivot with an odd group",
        "run",
        "objective:\n  preset: grpo\n  advantage: group_median\n  median_pivot: true\nrollout:\n  group_size: 3\n",
        "objective.median_pivot",
    ),
    Case(
        "median_pivot under trl",
        "sweep",
        SWEEP + "set:\n  objective.advantage: group_median\n  objective.median_pivot: true\n  train.engine: trl\n"
        "grid:\n  train.lr: [0.1, 0.2]\n",
        "objective.median_pivot",
    ),
    Case(
        "run: median_pivot not a bool",
        "run",
        "objective:\n  preset: grpo\n  median_pivot: maybe\n",
        "objective.median_pivot",
    ),
    Case(
        "run: positive_weight 1.5",
        "run",
        "objective:\n  preset: grpo\n  positive_weight: 1.5\n",
        "objective.positive_weight",
    ),
    Case(
        "run: positive_weight negative",
        "run",
        "objective:\n  preset: grpo\n  positive_weight: -0.1\n",
        "objective.positive_weight",
    ),
    Case(
        "positive_weight under trl",
        "sweep",
        SWEEP + "set:\n  objective.positive_weight: 0.1\n  train.engine: trl\ngrid:\n  train.lr: [0.1, 0.2]\n",
        "objective.positive_weight",
    ),
]

# Stratified GRPO (advantage stratified): its stratum key (stratum_key) and its blend with GRPO (stratum_blend).
CASES += [
    Case(
        "run: stratum_key the toy does not report",
        "run",
        "objective:\n  preset: grpo\n  advantage: stratified\n  stratum_key: search_calls\n",
        "objective.stratum_key",
    ),
    Case(
        "run: stratified without a stratum_key",
        "run",
        "objective:\n  preset: grpo\n  advantage: stratified\n",
        "stratum_key",
    ),
    Case(
        "run: stratum_key under group_std",
        "run",
        "objective:\n  preset: grpo\n  stratum_key: hidden_digit\n",
        "stratum_key",
    ),
    Case(
        "run: stratum_blend above 1",
        "run",
        "objective:\n  preset: grpo\n  advantage: stratified\n  stratum_key: hidden_digit\n  stratum_blend: 1.5\n",
        "objective.stratum_blend",
    ),
    Case(
        "stratum_key under trl",
        "sweep",
        SWEEP + "set:\n  objective.advantage: stratified\n  objective.stratum_key: hidden_digit\n  train.engine: trl\n"
        "grid:\n  train.lr: [0.1, 0.2]\n",
        "objective.stratum_key",
    ),
]

# The KL penalty in the reward (kl_reward_coef, kl_reward_estimator).
CASES += [
    Case(
        "run: negative kl_reward_coef",
        "run",
        "objective:\n  preset: grpo\n  kl_reward_coef: -0.1\n",
        "objective.kl_reward_coef",
    ),
    Case(
        "run: kl_reward_estimator with the KL in the reward off",
        "run",
        "objective:\n  preset: grpo\n  kl_reward_estimator: k3\n",
        "kl_reward_estimator",
    ),
    Case(
        "kl_reward_coef under trl",
        "sweep",
        SWEEP + "set:\n  objective.kl_reward_coef: 0.01\n  train.engine: trl\ngrid:\n  train.lr: [0.1, 0.2]\n",
        "objective.kl_reward_coef",
    ),
]

# GMPO, DPPO, DRO, GPG and the sequence ratio Π_t r_t (surrogate gmpo, dppo_tv, dppo_kl, dro, gpg; advantage gpg;
# ratio sequence_product).
_RUN = "objective:\n  preset: grpo\n"
CASES += [
    Case("run: dppo_tv without its trust region", "run", _RUN + "  surrogate: dppo_tv\n", "dppo_bounds"),
    Case("run: dppo_bounds with the clip surrogate", "run", _RUN + "  dppo_bounds: [0.1, 0.1]\n", "dppo_bounds"),
    Case("run: a dppo bound of 0", "run", "objective:\n  preset: dppo_tv\n  dppo_bounds: [0.0, 0.1]\n", "dppo_bounds"),
    Case("run: dppo_ratio_cap of 0", "run", "objective:\n  preset: dppo_kl\n  dppo_ratio_cap: 0\n", "dppo_ratio_cap"),
    Case("run: dro without dro_beta", "run", _RUN + "  surrogate: dro\n", "dro_beta"),
    Case("run: a negative dro_beta", "run", _RUN + "  surrogate: dro\n  dro_beta: -1\n", "objective.dro_beta"),
    Case(
        "run: gmpo with a token mean", "run", "objective:\n  preset: gmpo\n  aggregation: token_mean\n", "aggregation"
    ),
    Case("run: gmpo at the sequence ratio", "run", "objective:\n  preset: gmpo\n  ratio: sequence\n", "ratio"),
    Case(
        "run: gmpo with a top-entropy mask",
        "run",
        "objective:\n  preset: gmpo\n  top_entropy_quantile: 0.2\n",
        "top_entropy_quantile",
    ),
    Case(
        "run: dro at the sequence ratio",
        "run",
        _RUN + "  surrogate: dro\n  dro_beta: 0.1\n  ratio: sequence\n",
        "ratio",
    ),
    Case(
        "gmpo under trl",
        "sweep",
        SWEEP + "set:\n  objective.preset: gmpo\n  train.engine: trl\ngrid:\n  train.lr: [0.1, 0.2]\n",
        "objective.surrogate",
    ),
    Case(
        "the sequence product ratio under trl",
        "sweep",
        SWEEP + "set:\n  objective.ratio: sequence_product\n  train.engine: trl\ngrid:\n  train.lr: [0.1, 0.2]\n",
        "objective.ratio",
    ),
    Case(
        "gpg's advantage under trl",
        "sweep",
        SWEEP + "set:\n  objective.advantage: gpg\n  train.engine: trl\ngrid:\n  train.lr: [0.1, 0.2]\n",
        "objective.advantage",
    ),
]

# ReMax (advantage remax): a baseline from a greedy response, which reads no reward range, has no median response
# and which TRL does not draw.
CASES += [
    Case(
        "run: remax with a reward_range", "run", "objective:\n  preset: remax\n  reward_range: [0, 1]\n", "reward_range"
    ),
    Case(
        "run: remax with a median pivot",
        "run",
        "objective:\n  preset: remax\n  median_pivot: true\n",
        "median_pivot",
    ),
    Case("run: remax misspelt", "run", "objective:\n  preset: grpo\n  advantage: re_max\n", "objective.advantage"),
    Case(
        "remax under trl",
        "sweep",
        SWEEP + "set:\n  objective.advantage: remax\n  train.engine: trl\ngrid:\n  train.lr: [0.1, 0.2]\n",
        "objective.advantage",
    ),
]

# GDPO (advantage gdpo, gdpo_tokens): the reward components it normalises one by one, and their weights.
GDPO = "objective:\n  preset: grpo\n  advantage: gdpo\n"
CASES += [
    Case("run: gdpo without reward_components", "run", GDPO, "reward_components"),
    Case(
        "run: reward_components the toy does not grade",
        "run",
        GDPO + "  reward_components: [reward, answered]\n",
        "objective.reward_components",
    ),
    Case(
        "run: reward_components under group_std",
        "run",
        "objective:\n  preset: grpo\n  reward_components: [reward, format]\n",
        "reward_components",
    ),
    Case(
        "run: one reward_weight for two components",
        "run",
        GDPO + "  reward_components: [reward, format]\n  reward_weights: [1]\n",
        "reward_weights",
    ),
    Case(
        "run: the overlong component without the penalty",
        "run",
        GDPO + "  reward_components: [reward, overlong]\n",
        "overlong_penalty",
    ),
    Case(
        "run: gdpo with the KL in the reward",
        "run",
        GDPO + "  reward_components: [reward, format]\n  kl_reward_coef: 0.1\n",
        "kl_reward_coef",
    ),
    Case("run: gdpo misspelt", "run", "objective:\n  preset: grpo\n  advantage: gdp0\n", "objective.advantage"),
    Case(
        "gdpo_tokens under trl",
        "sweep",
        SWEEP + "set:\n  objective.advantage: gdpo_tokens\n  objective.reward_components: [reward, format]\n"
        "  objective.adv_eps: 0.0001\n  train.engine: trl\ngrid:\n  train.lr: [0.1, 0.2]\n",
        "objective.advantage",
    ),
]

# One response per prompt (rollout.group_size: 1): only an advantage whose baseline is not the group's own rewards.
CASES += [
    Case(
        "run: one response per prompt under a group baseline",
        "run",
        "rollout:\n  group_size: 1\n",
        "rollout.group_size",
    ),
    Case(
        "run: one response per prompt with dynamic sampling",
        "run",
        "objective:\n  preset: dapo\n  advantage: batch_norm\nrollout:\n  group_size: 1\n",
        "dynamic_sampling",
    ),
    Case("run: no response per prompt", "run", "rollout:\n  group_size: 0\n", "rollout.group_size"),
]

# POISE (advantage poise): its value probe's settings (the poise_* fields), its sibling rollout, its buffer, TRL.
CASES += [
    Case(
        "run: poise with one response per prompt (no sibling to take a baseline from)",
        "run",
        "objective:\n  preset: poise\nrollout:\n  group_size: 1\n",
        "rollout.group_size",
    ),
    Case(
        "run: a poise probe setting under group_std",
        "run",
        "objective:\n  preset: grpo\n  poise_depth: 0.5\n",
        "poise_depth",
    ),
    Case(
        "run: poise without its ridge penalty",
        "run",
        "objective:\n  preset: poise\n  poise_ridge_alpha: null\n",
        "poise_ridge_alpha",
    ),
    Case("run: poise depth above 1", "run", "objective:\n  preset: poise\n  poise_depth: 1.5\n", "poise_depth"),
    Case(
        "run: poise with a negative PCA size",
        "run",
        "objective:\n  preset: poise\n  poise_pca_dims: [-1, 64]\n",
        "poise_pca_dims",
    ),
    Case(
        "run: poise's buffer smaller than a group",
        "run",
        "objective:\n  preset: poise\n  poise_buffer_rows: 2\nrollout:\n  group_size: 4\n",
        "objective.poise_buffer_rows",
    ),
    Case(
        "run: poise without the reward range its predictions are clipped to",
        "run",
        "objective:\n  preset: poise\n  reward_range: null\n",
        "reward_range",
    ),
    Case(
        "sweep: poise under TRL",
        "sweep",
        SWEEP + "set:\n  objective.preset: poise\n  train.engine: trl\ngrid:\n  train.lr: [0.1, 0.2]\n",
        "objective.advantage",
    ),
]

# SPO (advantage spo): its value tracker's settings (the spo_* fields), the pool its initial samples and prioritized
# sampling draw from, a reward outside [0, 1], TRL.
CASES += [
    Case(
        "run: spo's initial samples without a prompt pool",
        "run",
        "objective:\n  preset: spo\n",
        "objective.spo_init_samples",
    ),
    Case(
        "run: a spo tracker setting under group_std",
        "run",
        "objective:\n  preset: grpo\n  spo_d_half: 0.06\n",
        "spo_d_half",
    ),
    Case(
        "run: spo without its drift half-life",
        "run",
        "objective:\n  preset: spo\n  spo_d_half: null\n  spo_init_samples: 0\n",
        "spo_d_half",
    ),
    Case(
        "run: spo's rho clip upside down",
        "run",
        "objective:\n  preset: spo\n  spo_rho_min: 0.99\n  spo_init_samples: 0\n",
        "spo_rho_min",
    ),
    Case("run: spo's rho_min at 1", "run", "objective:\n  preset: spo\n  spo_rho_min: 1.0\n", "spo_rho_min"),
    Case(
        "run: spo with the overlong punishment (rewards leave [0, 1])",
        "run",
        "objective:\n  preset: spo\n  spo_init_samples: 0\n  overlong_penalty: true\n  overlong_cache_len: 16\n",
        "overlong_penalty",
    ),
    Case(
        "run: prioritized sampling without a pool",
        "run",
        "rollout:\n  prompt_sampling: value_priority\n",
        "rollout.prompt_sampling",
    ),
    Case(
        "run: prioritized sampling without a tracker",
        "run",
        "rollout:\n  prompt_pool: 64\n  prompt_sampling: value_priority\n",
        "rollout.prompt_sampling",
    ),
    Case(
        "run: a priority epsilon under uniform sampling",
        "run",
        "rollout:\n  prompt_pool: 64\n  prompt_priority_eps: 0.1\n",
        "rollout.prompt_priority_eps",
    ),
    Case("run: an empty prompt pool", "run", "rollout:\n  prompt_pool: 0\n", "rollout.prompt_pool"),
    Case(
        "run: a misspelt prompt sampler",
        "run",
        "rollout:\n  prompt_pool: 64\n  prompt_sampling: priority\n",
        "rollout.prompt_sampling",
    ),
    Case(
        "sweep: spo under TRL",
        "sweep",
        SWEEP + "set:\n  objective.preset: spo\n  objective.spo_init_samples: 0\n  train.engine: trl\n"
        "grid:\n  train.lr: [0.1, 0.2]\n",
        "objective.advantage",
    ),
    Case(
        "sweep: a prompt pool under TRL",
        "sweep",
        SWEEP + "set:\n  rollout.prompt_pool: 64\n  train.engine: trl\ngrid:\n  train.lr: [0.1, 0.2]\n",
        "rollout.prompt_pool",
    ),
    # hints for all-wrong groups (rollout.hint: Scaf-GRPO, HiLL's reasoner update): only the toy's hidden digits
    Case(
        "run: hints on a task without hidden digits",
        "run",
        _custom(extra="rollout:\n  hint: scaf_grpo\n"),
        "rollout.hint",
        setup=_custom_files,
    ),
    Case(
        "run: hints on a toy that hides no digit",
        "run",
        "task:\n  toy_addition:\n    hide_prob: 0\nrollout:\n  hint: scaf_grpo\n",
        "rollout.hint",
    ),
    Case("run: a misspelt hint scheme", "run", "rollout:\n  hint: scaf\n", "rollout.hint"),
    Case(
        "run: a hiding scope the toy does not have",
        "run",
        "task:\n  toy_addition:\n    hide_scope: prompt\n",
        "task.toy_addition.hide_scope",
    ),
    Case(
        "run: a hiding scope for the base model's SFT, which draws one prompt per problem",
        "run",
        "model:\n  toy:\n    task:\n      hide_scope: group\n",
        "task.hide_scope",
    ),
    Case(
        "run: a hint exemption without hints", "run", "rollout:\n  hint_after_steps: 10\n", "rollout.hint_after_steps"
    ),
    Case(
        "run: a hint exemption as long as the run",
        "run",
        "rollout:\n  hint: hinted_group\n  hint_after_steps: 120\n",
        "rollout.hint_after_steps",
    ),
    Case("run: a negative hint exemption", "run", "rollout:\n  hint_after_steps: -1\n", "rollout.hint_after_steps"),
    Case(
        "run: hints with spo's per-prompt tracker",
        "run",
        "objective:\n  preset: spo\n  spo_init_samples: 0\nrollout:\n  hint: scaf_grpo\n",
        "rollout.hint",
    ),
    Case(
        "sweep: hints under TRL",
        "sweep",
        SWEEP + "set:\n  rollout.hint: scaf_grpo\n  train.engine: trl\ngrid:\n  train.lr: [0.1, 0.2]\n",
        "rollout.hint",
    ),
]

# The cosine length reward (objective.length_reward: cosine): its values set exactly under it, finite, within the
# rewards the advantage reads, not under GDPO, not under TRL. PF-PPO (objective.pf_ppo_reweight): its exponent set
# exactly under pow, above 0; not under TRL.
COSINE = (
    "objective:\n  preset: grpo\n  length_reward: cosine\n  cosine_correct: [1.0, 0.5]\n  cosine_wrong: [-1.0, -0.5]\n"
)
CASES += [
    Case(
        "run: the cosine length reward without its values",
        "run",
        "objective:\n  preset: grpo\n  length_reward: cosine\n",
        "cosine_correct",
    ),
    Case(
        "run: cosine values without the cosine length reward",
        "run",
        "objective:\n  preset: grpo\n  cosine_wrong: [-1.0, -0.5]\n",
        "cosine_wrong",
    ),
    Case(
        "run: a cosine exceed value without the cosine length reward",
        "run",
        "objective:\n  preset: grpo\n  cosine_exceed: -10\n",
        "cosine_exceed",
    ),
    Case("run: a misspelt length reward", "run", "objective:\n  preset: grpo\n  length_reward: cos\n", "length_reward"),
    Case(
        "run: a cosine value that is not finite",
        "run",
        "objective:\n  preset: grpo\n  length_reward: cosine\n  cosine_correct: [.inf, 0.5]\n"
        "  cosine_wrong: [-1.0, -0.5]\n",
        "cosine_correct",
    ),
    Case("run: a cosine exceed value given as a list", "run", COSINE + "  cosine_exceed: [-10]\n", "cosine_exceed"),
    Case(
        "run: a cosine value short of a pair",
        "run",
        "objective:\n  preset: grpo\n  length_reward: cosine\n  cosine_correct: [1.0]\n  cosine_wrong: [-1.0, -0.5]\n",
        "cosine_correct",
    ),
    Case(
        "run: cosine rewards outside ngrpo's reward range",
        "run",
        COSINE.replace("preset: grpo", "preset: ngrpo"),
        "length_reward",
    ),
    Case(
        "run: the cosine length reward under gdpo (unread)",
        "run",
        COSINE.replace("preset: grpo", "preset: grpo\n  advantage: gdpo\n  reward_components: [reward]"),
        "length_reward",
    ),
    Case(
        "sweep: the cosine length reward under TRL",
        "sweep",
        SWEEP + "set:\n  objective.length_reward: cosine\n  objective.cosine_correct: [1.0, 0.5]\n"
        "  objective.cosine_wrong: [-1.0, -0.5]\n  train.engine: trl\ngrid:\n  train.lr: [0.1, 0.2]\n",
        "objective.length_reward",
    ),
    Case(
        "run: PF-PPO's pow weights without their exponent",
        "run",
        "objective:\n  preset: grpo\n  pf_ppo_reweight: pow\n",
        "pf_ppo_weight_pow",
    ),
    Case(
        "run: a PF-PPO exponent under max_min",
        "run",
        "objective:\n  preset: grpo\n  pf_ppo_reweight: max_min\n  pf_ppo_weight_pow: 2\n",
        "pf_ppo_weight_pow",
    ),
    Case(
        "run: a PF-PPO exponent of 0",
        "run",
        "objective:\n  preset: grpo\n  pf_ppo_reweight: pow\n  pf_ppo_weight_pow: 0\n",
        "pf_ppo_weight_pow",
    ),
    Case(
        "run: a misspelt PF-PPO method",
        "run",
        "objective:\n  preset: grpo\n  pf_ppo_reweight: max_max\n",
        "pf_ppo_reweight",
    ),
    Case(
        "sweep: PF-PPO under TRL",
        "sweep",
        SWEEP + "set:\n  objective.pf_ppo_reweight: max_random\n  train.engine: trl\ngrid:\n  train.lr: [0.1, 0.2]\n",
        "objective.pf_ppo_reweight",
    ),
]

# The optimal token baseline (advantage optimal_token_baseline, preset otb): a group baseline per token, so no single
# response per prompt, no per-response sign for the off-policy mask, and nothing TRL computes.
CASES += [
    Case(
        "run: otb with one response per prompt",
        "run",
        "objective:\n  preset: otb\nrollout:\n  group_size: 1\n",
        "rollout.group_size",
    ),
    Case(
        "run: otb with the off-policy sequence mask",
        "run",
        "objective:\n  preset: otb\n  off_policy_threshold: 0.5\n",
        "off_policy_threshold",
    ),
    Case(
        "run: verl's tir_optimal_token_baseline name",
        "run",
        "objective:\n  preset: grpo\n  advantage: tir_optimal_token_baseline\n",
        "objective.advantage",
    ),
    Case(
        "sweep: otb under TRL",
        "sweep",
        SWEEP + "set:\n  objective.preset: otb\n  train.engine: trl\ngrid:\n  train.lr: [0.1, 0.2]\n",
        "objective.advantage",
    ),
]

# A reasoning-gym task (the reasoning-gym extra) and a toy base model built for a task (model.toy.text).
REASONING_GYM = importlib.util.find_spec("reasoning_gym") is not None


def _rg(generator: str = "spell_backward", extra: str = "") -> str:
    return f"task:\n  name: reasoning_gym\n  reasoning_gym:\n    generator: {generator}\n    size: 50\n{extra}"


CASES += [
    Case("run: reasoning_gym, seed in the generator's config", "run", _rg(extra="    config: {seed: 3}\n"), "seed"),
    Case("run: reasoning_gym, generator not a name", "run", _rg("Chain Sum"), "task.reasoning_gym.generator"),
    Case("run: text build on the addition task", "run", "model:\n  toy:\n    text: {}\n", "model.toy.text"),
    Case(
        "run: text build on a task class",
        "run",
        "task:\n  name: custom\n  custom:\n    class: m.py:C\nmodel:\n  toy:\n    text: {}\n",
        "model.toy.text",
    ),
    Case("run: text build's slips at 1", "run", "model:\n  toy:\n    text: {slip_prob: 1}\n", "text.slip_prob"),
]
if REASONING_GYM:  # reasoning-gym is imported in the task's bounded helper, as a reward function is
    CASES += [
        Case(
            "run: reasoning_gym, no such generator",
            "run",
            _rg("chain_sums"),
            "task.reasoning_gym.generator: no generator 'chain_sums' in reasoning-gym; close names: chain_sum",
        ),
        Case(
            "run: reasoning_gym, a prompt the toy cannot read",
            "run",
            _rg(),
            "task.reasoning_gym: the prompt of problem 0 has 'S', which the toy model cannot read",
        ),
        Case(
            "run: reasoning_gym, settings the generator refuses",
            "run",
            _rg("chain_sum", "    config: {min_terms: 5, max_terms: 2}\n"),
            "task.reasoning_gym.config: chain_sum refused its settings",
        ),
    ]
else:
    CASES.append(Case("run: reasoning_gym without its extra", "run", _rg(), "the reasoning-gym extra"))

# The KL term's gradient form (kl_gradient), the abs estimator and the adaptive KL coefficient (kl_target, kl_horizon).
_KL = "objective:\n  preset: grpo\n  kl_coef: 0.05\n"
CASES += [
    Case("run: unknown kl_gradient", "run", _KL + "  kl_gradient: k3_plus\n", "kl_gradient"),
    Case(
        "run: kl_gradient without kl_coef",
        "run",
        "objective:\n  preset: grpo\n  kl_gradient: k2_straight_through\n",
        "kl_gradient",
    ),
    Case(
        "run: trl_bias_correction with k1",
        "run",
        _KL + "  kl_gradient: trl_bias_correction\n  kl_estimator: k1\n",
        "trl_bias_correction",
    ),
    Case(
        "run: k2_straight_through with k2",
        "run",
        _KL + "  kl_gradient: k2_straight_through\n  kl_estimator: k2\n",
        "k2_straight_through",
    ),
    Case("run: unknown kl_estimator", "run", _KL + "  kl_estimator: abs+\n", "kl_estimator"),
    Case("run: kl_target without kl_horizon", "run", _KL + "  kl_target: 0.1\n", "kl_horizon"),
    Case("run: kl_target 0", "run", _KL + "  kl_target: 0\n  kl_horizon: 1000\n", "objective.kl_target"),
    Case("run: kl_horizon 0", "run", _KL + "  kl_target: 0.1\n  kl_horizon: 0\n", "objective.kl_horizon"),
    Case(
        "run: kl_target with no KL",
        "run",
        "objective:\n  preset: grpo\n  kl_target: 0.1\n  kl_horizon: 1000\n",
        "kl_target",
    ),
    Case(
        "run: kl_horizon a fifth of the batch",
        "run",
        _KL + "  kl_target: 0.1\n  kl_horizon: 1\n",
        "objective.kl_horizon",
    ),
    Case(
        "kl_gradient openrlhf under trl",
        "sweep",
        SWEEP + "set:\n  objective.kl_coef: 0.01\n  objective.kl_gradient: openrlhf_unbiased_gradient\n"
        "  train.engine: trl\ngrid:\n  train.lr: [0.1, 0.2]\n",
        "objective.kl_gradient",
    ),
    Case(
        "kl_target under trl",
        "sweep",
        SWEEP + "set:\n  objective.kl_coef: 0.01\n  objective.kl_target: 0.1\n  objective.kl_horizon: 1000\n"
        "  train.engine: trl\ngrid:\n  train.lr: [0.1, 0.2]\n",
        "objective.kl_target",
    ),
]

# The rollout rejection (rollout_rejection, rollout_rejection_min/max) and the rollout weights' batch mean.
_REJ = "objective:\n  preset: grpo\n  rollout_rejection: token_k1\n"
CASES += [
    Case(
        "run: unknown rollout rejection criterion",
        "run",
        "objective:\n  preset: grpo\n  rollout_rejection: seq_max_k1\n  rollout_rejection_max: 2\n",
        "objective.rollout_rejection",
    ),
    Case("run: rollout_rejection without its bound", "run", _REJ, "rollout_rejection_max"),
    Case(
        "run: rollout_rejection_max without rollout_rejection",
        "run",
        "objective:\n  preset: grpo\n  rollout_rejection_max: 2\n",
        "rollout_rejection_max",
    ),
    Case(
        "run: rollout_rejection_min without rollout_rejection",
        "run",
        "objective:\n  preset: grpo\n  rollout_rejection_min: 0.5\n",
        "rollout_rejection_min",
    ),
    Case(
        "run: a lower bound on a k3 criterion",
        "run",
        "objective:\n  preset: grpo\n  rollout_rejection: seq_mean_k3\n  rollout_rejection_min: 0.001\n"
        "  rollout_rejection_max: 0.01\n",
        "rollout_rejection_min",
    ),
    Case(
        "run: rollout_rejection_min above its max",
        "run",
        _REJ + "  rollout_rejection_min: 1.5\n  rollout_rejection_max: 1.2\n",
        "rollout_rejection_min",
    ),
    Case("run: an empty k1 band", "run", _REJ + "  rollout_rejection_max: 0.5\n", "rollout_rejection_max"),
    Case(
        "run: rollout_rejection_max 0", "run", _REJ + "  rollout_rejection_max: 0\n", "objective.rollout_rejection_max"
    ),
    Case(
        "run: batch-normalised weights without a rollout correction",
        "run",
        "objective:\n  preset: grpo\n  rollout_correction_batch_normalize: true\n",
        "rollout_correction_batch_normalize",
    ),
    Case(
        "rollout_rejection under trl",
        "sweep",
        SWEEP + "set:\n  objective.rollout_rejection: seq_mean_k1\n  objective.rollout_rejection_max: 1.001\n"
        "  train.engine: trl\ngrid:\n  train.lr: [0.1, 0.2]\n",
        "objective.rollout_rejection",
    ),
]

# The reference refreshed from the policy (train.reference_sync_steps, reference_mixup_alpha).
_SYNC = _KL + "train:\n  reference_sync_steps: 4\n"
CASES += [
    Case("run: reference_mixup_alpha 0", "run", _SYNC + "  reference_mixup_alpha: 0\n", "train.reference_mixup_alpha"),
    Case(
        "run: reference_mixup_alpha 1.5", "run", _SYNC + "  reference_mixup_alpha: 1.5\n", "train.reference_mixup_alpha"
    ),
    Case(
        "run: reference_sync_steps 0",
        "run",
        _KL + "train:\n  reference_sync_steps: 0\n  reference_mixup_alpha: 0.6\n",
        "train.reference_sync_steps",
    ),
    Case("run: reference_sync_steps without alpha", "run", _SYNC, "reference_mixup_alpha"),
    Case(
        "run: a refresh with no reference",
        "run",
        "objective:\n  preset: grpo\ntrain:\n  reference_kl: false\n  reference_sync_steps: 4\n"
        "  reference_mixup_alpha: 0.6\n",
        "train.reference_sync_steps: 4 refreshes the reference policy, but this run has none",
    ),
    Case(
        "reference refresh without beta under trl",
        "sweep",
        SWEEP + "set:\n  objective.adv_eps: 0.0001\n  train.reference_kl: false\n  train.reference_sync_steps: 4\n"
        "  train.reference_mixup_alpha: 0.6\n  train.engine: trl\ngrid:\n  train.lr: [0.1, 0.2]\n",
        "train.reference_sync_steps",
    ),
]

if Path("/proc/self").is_dir():  # a folder no one can create in, root included (whom permission bits let through)
    CASES += [
        Case(
            "cache_dir in /proc",
            "sweep",
            SWEEP + "set:\n  model.cache_dir: /proc/nope\ngrid:\n  train.lr: [0.1, 0.2]\n",
            "model.cache_dir",
        ),
        Case("run: cache_dir in /proc", "run", "model:\n  cache_dir: /proc/nope\n", "model.cache_dir"),
        Case("run: results_dir in /proc", "run", "tracking:\n  results_dir: /proc/nope\n", "tracking.results_dir"),
        Case(
            "store in /proc",
            "sweep",
            SWEEP + "grid:\n  train.lr: [0.1, 0.2]\n",
            "--tracking-uri",
            args=["--tracking-uri", "sqlite:////proc/nope/mlflow.db"],
        ),
    ]
if not _cuda_present():
    CASES += [
        Case(
            "cuda without CUDA",
            "sweep",
            SWEEP + "set:\n  train.device: cuda\ngrid:\n  train.lr: [0.1, 0.2]\n",
            "train.device",
        ),
        Case("run: cuda without CUDA", "run", "train:\n  device: cuda\n", "train.device"),
    ]


def _limit_memory() -> None:  # a regression must not take the shared machine down with it
    resource.setrlimit(resource.RLIMIT_AS, (6 << 30, 6 << 30))


def _run_cli(args: list[str], **popen) -> tuple[int | None, str, str, float]:
    """`python -m harness.cli ARGS` to its end: (exit code, or None when it was killed at `HANG_S`; stdout; stderr;
    its CPU seconds). `os.wait4` gives this child's own CPU time, whatever else runs or is reaped beside it."""
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen([sys.executable, "-m", "harness.cli", *args], stdout=out, stderr=err, **popen)
        hung = threading.Event()
        timer = threading.Timer(HANG_S, lambda: (hung.set(), proc.kill()))
        timer.start()
        try:
            _, status, usage = os.wait4(proc.pid, 0)
        finally:
            timer.cancel()
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        return None if hung.is_set() else proc.returncode, out.read(), err.read(), usage.ru_utime + usage.ru_stime


def _check(case: Case, workdir: Path) -> str | None:
    """Run one case in its own folder; the problem found, or None."""
    workdir.mkdir(parents=True)
    base = (ROOT / "ablations" / "toy_run.yaml").read_text()
    (workdir / "base.yaml").write_text(base)
    if case.file:
        path = case.file
    elif case.command == "run":  # a run file is the valid toy config with the case's keys merged in
        (workdir / "bad.yaml").write_text(_merge(base, case.text))
        path = str(workdir / "bad.yaml")
    else:
        (workdir / "bad.yaml").write_text(case.text)
        path = str(workdir / "bad.yaml")
    args = [*(case.setup(workdir) if case.setup else []), *case.args]
    before = _snapshot(workdir)
    env = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_")}
    paths = [str(ROOT), os.environ.get("PYTHONPATH")]  # the caller's after ours: where an extra may be installed
    env.update(PYTHONPATH=os.pathsep.join(filter(None, paths)), **case.env)
    code, _, err, cpu = _run_cli([case.command, path, *args], cwd=workdir, env=env, preexec_fn=_limit_memory)
    if code is None:
        return f"no answer in {HANG_S} s"
    err = err.strip()
    problems = []
    if code != case.code:
        problems.append(f"exit {code}")
    if "\n" in err or not err:
        problems.append(f"{err.count(chr(10)) + 1 if err else 0} stderr lines")
    if _controls(err):
        problems.append(f"control characters in stderr: {_controls(err)}")
    if path not in err:
        problems.append("file not named")
    if case.key not in err:
        problems.append(f"key {case.key!r} not named")
    after = _snapshot(workdir)
    changed = sorted(k for k in before.keys() | after.keys() if before.get(k, 0) != after.get(k, 0))
    if changed:
        problems.append(f"wrote or changed {changed}")
    if cpu >= CPU_BOUND_S:
        problems.append(f"used {cpu:.2f} s of CPU")
    return f"{'; '.join(problems)} | {err.splitlines()[-1][:300] if err else ''}" if problems else None


def _controls(text: str) -> list[str]:
    """The control characters in `text` (an error line echoing a file's ESC would act on the terminal)."""
    return [c for c in text if unicodedata.category(c) == "Cc"]


def _snapshot(folder: Path) -> dict[str, bytes | None]:
    """Each path under `folder` and its bytes (None for a folder): what a case must leave as it found it."""
    return {str(p.relative_to(folder)): None if p.is_dir() else p.read_bytes() for p in folder.rglob("*")}


def _merge(base: str, extra: str) -> str:
    """`base` with the top-level sections of `extra` replacing or added (YAML text, no loader needed)."""
    keys = {line.split(":", 1)[0] for line in extra.splitlines() if line and not line[0].isspace()}
    kept, skipping = [], False
    for line in base.splitlines():
        if line and not line[0].isspace() and not line.startswith("#"):
            skipping = line.split(":", 1)[0] in keys
        if not skipping:
            kept.append(line)
    return "\n".join(kept) + "\n" + extra


IN_PROCESS = [c for c in CASES if not (c.args or c.env or c.file or c.setup)]
"""The cases that need nothing but their file: checked in this process too, in the fast loop."""


@pytest.mark.parametrize("case", IN_PROCESS, ids=lambda c: c.name)
def test_each_file_is_refused_in_process_with_one_line_naming_its_key(case, tmp_path, monkeypatch, capsys):
    """`main` on each case's file (the battery below runs each as its own command, with its CPU and memory
    bounds): exit 2, one line naming the file and the key, and nothing written beside the files."""
    from harness.cli import main

    monkeypatch.chdir(tmp_path)
    base = (ROOT / "ablations" / "toy_run.yaml").read_text()
    (tmp_path / "base.yaml").write_text(base)
    (tmp_path / "bad.yaml").write_text(_merge(base, case.text) if case.command == "run" else case.text)
    assert main([case.command, str(tmp_path / "bad.yaml")]) == case.code
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "bad.yaml" in err[0] and case.key in err[0] and not _controls(err[0]), err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.yaml", "base.yaml"]


@pytest.mark.slow
def test_every_malformed_file_is_one_line_exit_2_within_the_cpu_bound_and_writes_nothing(tmp_path):
    workers = max(1, min(4, os.cpu_count() or 1))  # one case per core: the suite runs this test last and alone
    with ThreadPoolExecutor(workers) as pool:
        results = list(pool.map(lambda ic: _check(ic[1], tmp_path / f"case{ic[0]}"), enumerate(CASES)))
    failures = [f"{case.name}: {problem}" for case, problem in zip(CASES, results) if problem]
    assert not failures, f"{len(failures)} of {len(CASES)} cases:\n" + "\n".join(failures)


@pytest.mark.parametrize("case", [c for c in CASES if c.command == "run" and c.text], ids=lambda c: c.name)
def test_run_cases_merge_into_a_valid_base(case):
    """The run cases replace whole sections of the base, so each file holds the one bad key."""
    merged = _merge((ROOT / "ablations" / "toy_run.yaml").read_text(), case.text)
    assert merged.endswith(case.text)


# --- the mechanisms behind the battery, one by one (in-process, fast) ---


def test_validating_a_config_imports_no_torch_mlflow_or_numpy():
    code = (
        "import sys; from harness.cli import build_parser; from harness.config.plan import plan_sweep; "
        "from harness.config.tune import load_tune; "
        f"plan_sweep({str(ROOT / 'ablations' / 'dr_grpo_bias.yaml')!r}); "
        f"load_tune({str(ROOT / 'ablations' / 'tune_dr_grpo_lr.yaml')!r}); "
        "print(sorted(m for m in ('torch', 'transformers', 'mlflow', 'numpy', 'optuna') if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert out.strip() == "[]"


@pytest.mark.parametrize(
    "args, option",
    [
        (["sweep", "s.yaml", "--workers", "0"], "--workers"),
        (["sweep", "s.yaml", "--workers", "-3"], "--workers"),
        (["sweep", "s.yaml", "--timeout", "nan"], "--timeout"),
        (["sweep", "s.yaml", "--timeout", "0"], "--timeout"),
        (["sweep", "s.yaml", "--timeout", "-1"], "--timeout"),
        (["sweep", "s.yaml", "--timeout", "inf"], "--timeout"),
        (["sweep", "s.yaml", "--retries", "-1"], "--retries"),
        (["sweep", "s.yaml", "--max-jobs", "0"], "--max-jobs"),
        (["sweep", "s.yaml", "--seeds", "0-4999,5000-10000"], "--seeds: more than 10000 seeds"),
        (["sweep", "s.yaml", "--seeds", "0-" + "9" * 30], "--seeds: more than 10000 seeds"),
        (["sweep", "s.yaml", "--cpus-per-job", "0"], "--cpus-per-job"),
        (["tune", "t.yaml", "--workers", "0"], "--workers"),
        (["tune", "t.yaml", "--trials", "0"], "--trials"),
        (["tune", "t.yaml", "--gpus-per-job", "-1"], "--gpus-per-job"),
        (["tune", "t.yaml", "--cpus-per-job", "nan"], "--cpus-per-job"),
        (["report", "s", "--alpha", "1"], "--alpha: 1 is not a finite number > 0 and < 1"),
        (["report", "s", "--format", "md,pdf"], "--format: pdf is not one of md, html, json, latex"),
        (["report", "s", "--format", ","], "--format: nothing is not one of"),
        (["report", "s", "--test", "anova"], "--test: 'anova' is not one of welch, mannwhitney, permutation"),
        (["claims", "s", "--alpha", "0"], "--alpha: 0 is not a finite number > 0"),
        (["eval", "--model", "m", "--template", "r2"], "--template"),
    ],
)
def test_bad_options_are_one_line_usage_errors(args, option, capsys):
    from harness.cli import main

    with pytest.raises(SystemExit) as exc:
        main(args)
    err = capsys.readouterr().err.strip()
    assert exc.value.code == 2 and "\n" not in err and option in err and "usage error" in err, err


@pytest.mark.parametrize(
    "args, message",
    [
        (["--k", "0"], "--k: Input should be greater than or equal to 1"),
        (["--temperature", "-0.5"], "--temperature: Input should be greater than or equal to 0"),
        (["--top-p", "1.5"], "--top-p: Input should be less than or equal to 1"),
        (["--limit", "0"], "--limit: Input should be greater than or equal to 1"),
        (["--benchmarks", "math500,nope"], "--benchmarks: nope is not one of math500, aime24"),
        (["--benchmarks", ","], "--benchmarks: nothing is not one of math500"),
    ],
)
def test_bad_eval_settings_are_one_line_config_errors(args, message, capsys):
    """`harness eval`'s values are checked by its settings model (the constraints a run's eval section has)."""
    from harness.cli import main

    assert main(["eval", "--model", "m", *args]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and err.startswith("harness: config error: ") and message in err, err


def _grid_sweep(tmp_path: Path, seeds: str = "[0, 1]") -> Path:
    (tmp_path / "base.yaml").write_text((ROOT / "ablations" / "toy_run.yaml").read_text())
    path = tmp_path / "s.yaml"
    path.write_text(
        f"name: s\nbase: base.yaml\nseeds: {seeds}\ngrid:\n  train.lr: [0.1, 0.2, 0.3]\n"
        "  objective.preset: [grpo, dr_grpo, gspo]\n"
    )
    return path


def test_job_limit_counts_before_expanding_and_max_jobs_raises_it(tmp_path):
    from harness.config.errors import ConfigError
    from harness.config.plan import plan_sweep

    path = _grid_sweep(tmp_path)
    with pytest.raises(ConfigError, match="18 jobs exceed the limit of 17"):
        plan_sweep(path, max_jobs=17)
    assert len(plan_sweep(path, max_jobs=18).jobs) == 18


def test_job_limit_has_a_ceiling_that_max_jobs_cannot_raise(tmp_path):
    from harness.config.errors import ConfigError
    from harness.config.plan import MAX_JOBS_CEILING, plan_sweep

    (tmp_path / "base.yaml").write_text((ROOT / "ablations" / "toy_run.yaml").read_text())
    path = tmp_path / "s.yaml"
    lrs = ", ".join(str(0.01 * (i + 1)) for i in range(11))
    path.write_text(f"name: s\nbase: base.yaml\nseeds: {list(range(10_000))}\ngrid:\n  train.lr: [{lrs}]\n")
    with pytest.raises(ConfigError, match=f"110000 jobs exceed the limit of {MAX_JOBS_CEILING} .the most --max-jobs"):
        plan_sweep(path, max_jobs=10**12)


def test_until_decided_counts_arms_times_max_seeds_before_adding_a_seed(tmp_path):
    """9 arms × --max-seeds: 90 jobs pass a limit of 90, 99 do not; a --max-seeds of 10^12 lists nothing."""
    from harness.config.errors import ConfigError
    from harness.config.plan import plan_until_decided

    path = _grid_sweep(tmp_path)
    path.write_text(
        path.read_text() + "claims:\n  - {id: c, statement: s., metric: train/reward_mean, direction: increase, "
        "at: last-10, contrast: {effect: train.lr, from: 0.1, to: 0.2}}\n"
    )
    plan, first = plan_until_decided(path, max_seeds=10, batch=2, max_jobs=90)
    assert (len(plan.jobs), first, plan.settings.seeds) == (90, 2, list(range(10)))
    with pytest.raises(ConfigError, match="--max-seeds: 99 jobs exceed the limit of 90"):
        plan_until_decided(path, max_seeds=11, batch=2, max_jobs=90)
    with pytest.raises(ConfigError, match="--max-seeds: 1000000000000 is over the limit of 10000 seeds per arm"):
        plan_until_decided(path, max_seeds=10**12, batch=2, max_jobs=10**12)
    with pytest.raises(ConfigError, match=r"--batch: 11 seeds a round is more than --max-seeds \(10\)"):
        plan_until_decided(path, max_seeds=10, batch=11)


def test_a_sweep_without_axes_runs_the_base_over_its_seeds(tmp_path):
    """Leaving grid/zip/arms out is a seeds-only sweep; only an explicitly empty one is refused."""
    from harness.config.plan import plan_sweep

    (tmp_path / "base.yaml").write_text((ROOT / "ablations" / "toy_run.yaml").read_text())
    (tmp_path / "s.yaml").write_text("name: s\nbase: base.yaml\nseeds: [0, 1, 2]\n")
    assert [j.seed for j in plan_sweep(tmp_path / "s.yaml").jobs] == [0, 1, 2]


def test_set_keys_the_sweep_does_not_set_still_apply(tmp_path):
    from harness.config.plan import plan_sweep

    plan = plan_sweep(_grid_sweep(tmp_path), overrides=["train.steps=7", "objective.clip_high=0.3"])
    assert {(j.config.train.steps, j.config.objective.clip_high) for j in plan.jobs} == {(7, 0.3)}


def test_set_values_refuse_duplicate_keys_and_aliases_within_budget_load(tmp_path):
    from harness.config.errors import ConfigError
    from harness.config.yaml_io import apply_overrides, load_yaml

    with pytest.raises(ConfigError, match="x: line 1: duplicate key"):
        apply_overrides({}, ["a={x: 1, x: 2}"])
    path = tmp_path / "a.yaml"
    path.write_text("common: &c {lr: 0.1, steps: 3}\nrun: *c\n")
    assert load_yaml(path) == {"common": {"lr": 0.1, "steps": 3}, "run": {"lr": 0.1, "steps": 3}}


def test_settings_refuse_non_finite_values_bools_for_ints_and_bad_betas():
    from pydantic import ValidationError

    from trainer.config import RolloutConfig, TrainConfig
    from trainer.objective.settings import ObjectiveSettings

    for make in (
        lambda: ObjectiveSettings.preset("grpo", clip_high=float("inf")),
        lambda: ObjectiveSettings.preset("grpo", adv_eps=float("nan")),
        lambda: TrainConfig(lr=float("inf")),
        lambda: TrainConfig(steps=True),
        lambda: TrainConfig(betas=(0.9, 1.0)),
        lambda: TrainConfig(betas=(-0.1, 0.9)),
        lambda: RolloutConfig(top_p=float("nan")),
    ):
        with pytest.raises(ValidationError):
            make()
    assert TrainConfig.model_validate({"betas": [0.8, 0.99]}).betas == (0.8, 0.99)


def test_switch_names_are_declared_without_torch_and_all_registered():
    from trainer.objective.registry import (
        ADVANTAGES,
        AGGREGATIONS,
        KL_ESTIMATORS,
        RATIOS,
    )

    for registry in (ADVANTAGES, AGGREGATIONS, RATIOS, KL_ESTIMATORS):
        assert all(callable(registry[name]) for name in registry.names())  # imports the module
        assert set(registry._fns) == set(registry.names())
        with pytest.raises(ValueError, match="not declared"):
            registry.register("undeclared")(lambda: None)


def test_hub_model_unreachable_fails_once_and_fast(tmp_path, monkeypatch):
    from harness.config.errors import ConfigError
    from harness.config.run_config import RunConfig
    from harness.engine import preflight

    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # nothing listens on the discard port
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    preflight._hub_problem.cache_clear()
    cfg = RunConfig.model_validate(
        {"objective": {"preset": "grpo"}, "model": {"source": "hf", "name_or_path": "org/model"}}
    )
    with pytest.raises(
        ConfigError,
        match="model.name_or_path: org/model is not in the local Hugging Face cache "
        "and the hub at 127.0.0.1 cannot be reached",
    ):
        preflight.check_host(cfg, "x.yaml")
    (tmp_path / "models--org--model" / "snapshots" / "abc").mkdir(parents=True)  # cached: no probe needed
    preflight._hub_problem.cache_clear()
    preflight.check_host(cfg, "x.yaml")


def test_local_model_positions_bound_the_generation_budget(tmp_path):
    from harness.config.errors import ConfigError
    from harness.config.run_config import RunConfig
    from harness.engine import preflight

    (tmp_path / "config.json").write_text('{"max_position_embeddings": 128}')
    data = {"objective": {"preset": "grpo"}, "model": {"source": "hf", "name_or_path": str(tmp_path)}}
    preflight.check_host(RunConfig.model_validate({**data, "rollout": {"max_new_tokens": 64}}), "x.yaml")
    with pytest.raises(ConfigError, match="rollout.max_new_tokens: 128 new tokens do not fit the model's 128"):
        preflight.check_host(RunConfig.model_validate({**data, "rollout": {"max_new_tokens": 128}}), "x.yaml")


def test_tune_refuses_a_set_on_a_searched_key(tmp_path):
    from harness.config.errors import ConfigError
    from harness.config.tune import load_tune

    with pytest.raises(ConfigError, match="--set train.lr: train.lr is set by this file for every run"):
        load_tune(ROOT / "ablations" / "tune_dr_grpo_lr.yaml", ["train.lr=0.1"])
    assert load_tune(ROOT / "ablations" / "tune_dr_grpo_lr.yaml", ["train.steps=5"]).base["train"]["steps"] == 5


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs Linux's /proc")
@pytest.mark.parametrize("command", ["run", "sweep"])
def test_an_unwritable_cache_dir_is_one_line_exit_2_within_the_cpu_bound_and_creates_no_store(tmp_path, command):
    """Issue 30: the folder is probed before anything is made or loaded, so the refusal costs what any bad file's
    does (~0.5 s of CPU on a 2-core AMD EPYC), within the same CPU bound."""
    # /proc refuses a new folder to root too, whom permission bits (os.access) let through
    file = ROOT / "ablations" / ("toy_run.yaml" if command == "run" else "dr_grpo_bias.yaml")
    db = tmp_path / "mlflow.db"
    args = [command, str(file), "--set", "model.cache_dir=/proc/nope", "--tracking-uri", f"sqlite:///{db}"]
    code, _, err, cpu = _run_cli(args, env={**os.environ, "PYTHONPATH": str(ROOT)})
    err = err.strip()
    assert code == 2 and len(err.splitlines()) == 1, (code, err)
    assert str(file) in err and "model.cache_dir: /proc/nope cannot be created (/proc: " in err, err
    assert not db.exists() and not list(tmp_path.iterdir())
    assert cpu < CPU_BOUND_S, f"{cpu:.2f} s of CPU"


def test_a_folder_is_probed_by_writing_in_it_and_nothing_is_left_behind(tmp_path):
    from harness.config.errors import ConfigError, DataError
    from harness.engine.preflight import check_store, unwritable

    assert unwritable(str(tmp_path / "a" / "b"), "k") is None and not list(tmp_path.iterdir())
    assert unwritable(str(tmp_path), "k") is None and not list(tmp_path.iterdir())
    (tmp_path / "f").write_text("")
    assert unwritable(str(tmp_path / "f" / "x"), "model.cache_dir") == (
        f"model.cache_dir: {tmp_path / 'f' / 'x'} cannot be created ({tmp_path / 'f'} is not a folder)"
    )
    with pytest.raises(ConfigError, match=r"^s.yaml: --tracking-uri: /.*/f is not a folder$"):
        check_store(f"sqlite:///{tmp_path / 'f' / 'mlflow.db'}", "--tracking-uri", "s.yaml")
    with pytest.raises(DataError, match=r"^s.yaml: --tracking-uri: http://127.0.0.1:9 cannot be reached \("):
        check_store("http://127.0.0.1:9", "--tracking-uri", "s.yaml")  # a server is probed once: nothing there
    if Path("/proc/self").is_dir():
        assert unwritable("/proc/nope", "k").startswith("k: /proc/nope cannot be created (/proc: ")
    if os.geteuid() != 0:  # root writes a read-only folder anyway
        (tmp_path / "ro").mkdir(mode=0o500)
        assert unwritable(str(tmp_path / "ro"), "k").startswith(f"k: {tmp_path / 'ro'} cannot be written")


@pytest.mark.parametrize("store", list(STORES))
def test_the_dashboard_refuses_a_store_harness_did_not_make_in_one_line_before_serving(store, tmp_path):
    """`harness dashboard` on each of STORES: exit 3 and one line naming the URI, before Streamlit starts (a server
    would show every page's error instead, and not exit), within the bad files' CPU bound, and the store left byte
    for byte as it was."""
    from dashboard.browser import free_port

    args = STORES[store](tmp_path)
    before = _snapshot(tmp_path)
    env = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_")}
    # a server that started never exits: it is killed at HANG_S, and `code` is None
    code, _, err, cpu = _run_cli(
        ["dashboard", "--port", str(free_port()), *args], cwd=tmp_path, env={**env, "PYTHONPATH": str(ROOT)}
    )
    err = err.strip()
    assert code == 3 and len(err.splitlines()) == 1, (code, err)
    assert err.startswith(f"harness: data error: --tracking-uri: {args[1]} "), err
    assert _snapshot(tmp_path) == before
    assert cpu < CPU_BOUND_S, f"{cpu:.2f} s of CPU"


def test_a_store_is_probed_read_only_and_an_empty_or_new_one_passes(tmp_path):
    """An empty or new file passes; a database in WAL mode is read without the `-wal` and `-shm` files a reader
    makes; each refusal is one line naming the setting."""
    from harness.config.errors import DataError
    from harness.runs.probe import OPTUNA, probe_store, store_problem

    (tmp_path / "empty.db").write_bytes(b"")
    assert store_problem(f"sqlite:///{tmp_path / 'empty.db'}") is None
    assert store_problem(f"sqlite:///{tmp_path / 'new' / 'mlflow.db'}", OPTUNA) is None
    con = sqlite3.connect(tmp_path / "wal.db")
    with con:
        con.execute("PRAGMA journal_mode = wal")
        con.execute("CREATE TABLE customers (id INTEGER)")
    con.close()
    before = _snapshot(tmp_path)
    with pytest.raises(DataError, match=r"^s.yaml: --storage: sqlite:///.*/wal.db is another application's SQLite "):
        probe_store(f"sqlite:///{tmp_path / 'wal.db'}", "--storage", "s.yaml", OPTUNA)
    assert _snapshot(tmp_path) == before


def test_a_server_passes_the_probe_with_any_http_answer_and_fails_it_after_one_timeout_when_silent():
    """Any HTTP answer will do (here 501, from a server with no routes): the probe asks whether it answers, and
    MLflow's own calls then say what it answered. One that accepts and never answers fails after TIMEOUT_S, having
    connected once (no retries)."""
    import http.server
    import socket

    from harness.runs.probe import TIMEOUT_S, store_problem

    server = http.server.HTTPServer(("127.0.0.1", 0), http.server.BaseHTTPRequestHandler)
    threading.Thread(target=server.handle_request, daemon=True).start()
    try:
        assert store_problem(f"http://127.0.0.1:{server.server_port}/") is None
    finally:
        server.server_close()
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)  # room for a retry's connection in the queue, to be counted below
        start = time.perf_counter()
        problem = store_problem(f"http://127.0.0.1:{silent.getsockname()[1]}")
        seconds = time.perf_counter() - start
        silent.setblocking(False)
        connections = 0
        while True:
            try:
                silent.accept()[0].close()
            except BlockingIOError:
                break
            connections += 1
    assert problem == f"does not answer (no response in {TIMEOUT_S:g} s)" and connections == 1, (problem, connections)
    # a hang guard only, in wall-clock time: the probe waits on a socket (no CPU time to count), and the one
    # connection above already shows one timeout, not several
    assert seconds < TIMEOUT_S + 10, seconds


def test_an_empty_store_file_reads_as_empty_and_is_left_empty(tmp_path, monkeypatch, capsys):
    """A 0-byte file is a SQLite database with no tables: the commands that only read (a dry run, the report) find
    nothing in it and leave it as it is; MLflow makes its tables there as in a new file, and MLflow's store (made by
    MLflow, not harness) passes the probe as an MLflow store, not as an Optuna storage."""
    from mlflow.tracking import MlflowClient

    from harness.cli import main
    from harness.runs.probe import OPTUNA, store_problem

    monkeypatch.chdir(tmp_path)
    (tmp_path / "base.yaml").write_text((ROOT / "ablations" / "toy_run.yaml").read_text())
    (tmp_path / "s.yaml").write_text(STORE_COMMANDS["sweep"])
    (tmp_path / "store").mkdir()
    (tmp_path / "store" / "mlflow.db").write_bytes(b"")
    uri = ["--tracking-uri", f"sqlite:///{tmp_path / 'store' / 'mlflow.db'}"]
    assert main(["sweep", "s.yaml", "--dry-run", *uri]) == 0
    assert main(["report", "s.yaml", *uri]) == 3
    assert "no sweep 's'" in capsys.readouterr().err
    assert [p.name for p in (tmp_path / "store").iterdir()] == ["mlflow.db"]
    assert (tmp_path / "store" / "mlflow.db").stat().st_size == 0
    MlflowClient(uri[1]).search_experiments()  # MLflow makes its tables
    assert store_problem(uri[1]) is None and (tmp_path / "store" / "mlflow.db").stat().st_size > 0
    assert store_problem(uri[1], OPTUNA).startswith("is another application's SQLite database (tables ")


def test_steps_are_bounded_by_a_size_no_real_run_reaches():
    from pydantic import ValidationError

    from trainer.config import MAX_EPOCHS, MAX_STEPS, TrainConfig
    from trainer.models.toy_config import ToyModelConfig

    assert TrainConfig(steps=MAX_STEPS, epochs=MAX_EPOCHS).steps == MAX_STEPS
    for bad in ({"steps": MAX_STEPS + 1}, {"epochs": MAX_EPOCHS + 1}):
        with pytest.raises(ValidationError, match="less than or equal to"):
            TrainConfig(**bad)
    with pytest.raises(ValidationError, match="less than or equal to 1000000"):
        ToyModelConfig(sft_steps=MAX_STEPS + 1)
