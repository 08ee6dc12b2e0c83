"""A battery of malformed sweep and run files, each through the real `harness` command.

For every case: exit code 2, exactly one stderr line naming the file and the key, no MLflow store
and nothing else written (so no job started), and an answer within 2 s (issue 13's bound).
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BOUND_S = 2.0
"""Issue 13: each bad file is answered in under 2 s."""


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


def _cuda_present() -> bool:
    return any(Path(p).exists() for p in ("/dev/nvidia0", "/proc/driver/nvidia/version"))


SWEEP = "name: s\nbase: base.yaml\nseeds: [0, 1]\n"
"""A valid sweep head; each case adds (or replaces) a key."""
BOMB = "grid:\n  train.lr: [&a [x, x, x, x, x, x, x, x, x], " + ", ".join(
    f"&{b} [{', '.join(['*' + a] * 9)}]" for a, b in zip("abcdefg", "bcdefgh")) + "]\n"
"""A YAML alias bomb of ~560 bytes in a grid axis: 9^8 values once expanded."""
NESTED = "[" * 50_000 + "]" * 50_000

CASES = [
    # duplicates, ints, empty sweeps
    Case("duplicate seeds", "sweep", SWEEP + "seeds: [3]\ngrid:\n  train.lr: [0.1, 0.2]\n", "seeds"),
    Case("duplicate grid key", "sweep", SWEEP + "grid:\n  train.lr: [0.1]\n  train.lr: [0.2]\n", "train.lr"),
    Case("seed true", "sweep", "name: s\nbase: base.yaml\nseeds: [true]\ngrid:\n  train.lr: [0.1, 0.2]\n", "seeds"),
    Case("seed 2^63", "sweep", "name: s\nbase: base.yaml\nseeds: [9223372036854775808]\ngrid:\n  train.lr: [0.1]\n",
         "seeds"),
    Case("negative seed", "sweep", "name: s\nbase: base.yaml\nseeds: [-1]\ngrid:\n  train.lr: [0.1]\n", "seeds"),
    Case("repeated seeds", "sweep", "name: s\nbase: base.yaml\nseeds: [1, 1]\ngrid:\n  train.lr: [0.1]\n", "seeds"),
    Case("seeds not a list", "sweep", "name: s\nbase: base.yaml\nseeds: 3\ngrid:\n  train.lr: [0.1]\n", "seeds"),
    Case("empty grid", "sweep", SWEEP + "grid: {}\n", "grid"),
    # hyperparameters a job would die on
    Case("lr inf", "sweep", SWEEP + "grid:\n  train.lr: [.inf, 0.1]\n", "train.lr"),
    Case("clip nan", "sweep", SWEEP + "grid:\n  objective.clip_high: [.nan, 0.2]\n", "objective.clip_high"),
    Case("betas out of range", "sweep", SWEEP + "set:\n  train.betas: [0.9, 1.0]\ngrid:\n  train.lr: [0.1, 0.2]\n",
         "train.betas"),
    Case("max_new_tokens beyond the model", "sweep",
         SWEEP + "grid:\n  rollout.max_new_tokens: [64, 1000]\n", "max_new_tokens"),
    Case("cache_dir not writable", "sweep",
         SWEEP + "set:\n  model.cache_dir: base.yaml/cache\ngrid:\n  train.lr: [0.1, 0.2]\n", "model.cache_dir"),
    Case("hub id without hub", "sweep",
         SWEEP + "set:\n  model.source: hf\n  model.name_or_path: nobody-xyz/no-such-model\n"
                 "grid:\n  train.lr: [0.1, 0.2]\n", "model.name_or_path", env={"HF_HUB_OFFLINE": "1"}),
    Case("bad preset", "sweep", SWEEP + "grid:\n  objective.preset: [grpo, nope]\n", "objective.preset"),
    Case("bad switch name", "sweep", SWEEP + "grid:\n  objective.aggregation: [token_mean, nope]\n",
         "objective.aggregation"),
    Case("timeout nan", "sweep", SWEEP + "executor:\n  timeout_s: .nan\ngrid:\n  train.lr: [0.1, 0.2]\n",
         "executor.timeout_s"),
    # names
    Case("100k-char name", "sweep", SWEEP.replace("name: s", "name: " + "n" * 100_000)
         + "grid:\n  train.lr: [0.1, 0.2]\n", "name"),
    Case("name with NUL", "sweep", SWEEP.replace("name: s", 'name: "a\\0b"') + "grid:\n  train.lr: [0.1, 0.2]\n",
         "name"),
    Case("name with newline", "sweep", SWEEP.replace("name: s", 'name: "a\\nb"')
         + "grid:\n  train.lr: [0.1, 0.2]\n", "name"),
    Case("name with ../", "sweep", SWEEP.replace("name: s", "name: ../../../../ESCAPED")
         + "grid:\n  train.lr: [0.1, 0.2]\n", "name"),
    Case("experiment with /", "sweep", SWEEP + "experiment: a/b\ngrid:\n  train.lr: [0.1, 0.2]\n", "experiment"),
    Case("arm name with ../", "sweep", SWEEP + "arms:\n  - {name: ../x, set: {train.lr: 0.1}}\n", "arms[0].name"),
    # structure
    Case("unknown key", "sweep", SWEEP + "gird:\n  train.lr: [0.1, 0.2]\n", "gird"),
    Case("unknown run key in grid", "sweep", SWEEP + "grid:\n  train.lrr: [0.1, 0.2]\n", "train.lrr"),
    Case("missing base", "sweep", SWEEP.replace("base.yaml", "nowhere.yaml") + "grid:\n  train.lr: [0.1, 0.2]\n",
         "base"),
    Case("zip lengths differ", "sweep", SWEEP + "zip:\n  - train.lr: [0.1, 0.2]\n    seed: [1]\n", "zip[0]"),
    Case("exclude of a fixed key", "sweep", SWEEP + "grid:\n  train.lr: [0.1, 0.2]\nexclude:\n  - {train.steps: 3}\n",
         "exclude[0]"),
    Case("arm names repeat", "sweep", SWEEP + "arms:\n  - {name: a, set: {train.lr: 0.1}}\n"
                                              "  - {name: a, set: {train.lr: 0.2}}\n", "arms"),
    Case("not a mapping", "sweep", "- name\n- seeds\n", "top level"),
    Case("bad YAML", "sweep", SWEEP + "grid: [unclosed\n", "line"),
    Case("50k nested brackets", "sweep", SWEEP + "grid:\n  train.lr: " + NESTED + "\n", "grid"),
    Case("anchor bomb", "sweep", SWEEP + BOMB, "grid.train.lr"),
    Case("recursive alias", "sweep", SWEEP + "grid:\n  train.lr: &r [*r]\n", "grid"),
    Case("10^6 jobs", "sweep", SWEEP.replace("[0, 1]", "[0, 1, 2, 3, 4, 5, 6, 7, 8, 9]") + "grid:\n"
         + "".join(f"  objective.{k}: [{', '.join(str(0.01 * (i + 1)) for i in range(10))}]\n"
                   for k in ("clip_low", "clip_high", "kl_coef", "adv_eps", "dual_clip")), "--max-jobs"),
    Case("/dev/zero", "sweep", None, "/dev/zero", file="/dev/zero"),
    Case("over 1 MiB", "sweep", SWEEP + "grid:\n  train.lr: [0.1, 0.2]\n" + "#" * (2 << 20) + "\n", "MiB"),
    # options that were silently dropped
    Case("--set on a grid key", "sweep", SWEEP + "grid:\n  objective.preset: [grpo, dr_grpo]\n", "objective.preset",
         args=["--set", "objective.preset=gspo"]),
    Case("--set seed in a sweep", "sweep", SWEEP + "grid:\n  train.lr: [0.1, 0.2]\n", "seed", args=["--set", "seed=7"]),
    Case("--set on an arm key", "sweep", SWEEP + "arms:\n  - {name: a, set: {train.lr: 0.1}}\n", "train.lr",
         args=["--set", "train.lr=0.3"]),
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
]
if not _cuda_present():
    CASES += [
        Case("cuda without CUDA", "sweep", SWEEP + "set:\n  train.device: cuda\ngrid:\n  train.lr: [0.1, 0.2]\n",
             "train.device"),
        Case("run: cuda without CUDA", "run", "train:\n  device: cuda\n", "train.device"),
    ]


def _limit_memory() -> None:  # a regression must not take the shared machine down with it
    resource.setrlimit(resource.RLIMIT_AS, (6 << 30, 6 << 30))


def _check(case: Case, workdir: Path) -> str | None:
    """Run one case in its own folder; the problem found, or None."""
    workdir.mkdir()
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
    before = sorted(p.name for p in workdir.iterdir())
    env = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_")}
    env.update(PYTHONPATH=str(ROOT), **case.env)
    start = time.perf_counter()
    try:
        proc = subprocess.run([sys.executable, "-m", "harness.cli", case.command, path, *case.args], cwd=workdir,
                              env=env, capture_output=True, text=True, timeout=30, preexec_fn=_limit_memory)
    except subprocess.TimeoutExpired:
        return "no answer in 30 s"
    wall = time.perf_counter() - start
    err = proc.stderr.strip()
    problems = []
    if proc.returncode != 2:
        problems.append(f"exit {proc.returncode}")
    if "\n" in err or not err:
        problems.append(f"{err.count(chr(10)) + 1 if err else 0} stderr lines")
    if path not in err:
        problems.append("file not named")
    if case.key not in err:
        problems.append(f"key {case.key!r} not named")
    if sorted(p.name for p in workdir.iterdir()) != before:
        problems.append(f"wrote {sorted(set(p.name for p in workdir.iterdir()) - set(before))}")
    if wall >= BOUND_S:
        problems.append(f"took {wall:.2f} s")
    return f"{'; '.join(problems)} | {err.splitlines()[-1][:300] if err else ''}" if problems else None


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


def test_the_battery_is_large_enough():
    assert len({c.name for c in CASES}) == len(CASES) >= 30


def test_every_malformed_file_is_one_line_exit_2_fast_and_writes_nothing(tmp_path):
    workers = min(4, os.cpu_count() or 1)
    with ThreadPoolExecutor(workers) as pool:
        results = list(pool.map(lambda ic: _check(ic[1], tmp_path / f"case{ic[0]}"), enumerate(CASES)))
    failures = [f"{case.name}: {problem}" for case, problem in zip(CASES, results) if problem]
    assert not failures, f"{len(failures)} of {len(CASES)} cases:\n" + "\n".join(failures)


@pytest.mark.parametrize("case", [c for c in CASES if c.command == "run" and c.text], ids=lambda c: c.name)
def test_run_cases_merge_into_a_valid_base(case):
    """The run cases replace whole sections of the base, so each file holds the one bad key."""
    merged = _merge((ROOT / "ablations" / "toy_run.yaml").read_text(), case.text)
    assert merged.endswith(case.text)
