"""The GPU check (benchmarks/gpu_check.py) run on CPU, so it is known to work before a GPU is lent."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from trainer import metric_names as M

ROOT = Path(__file__).resolve().parents[1]
CHECK = [sys.executable, str(ROOT / "benchmarks" / "gpu_check.py")]
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}


@pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA device is here")
def test_asking_for_a_gpu_where_there_is_none_is_one_line():
    done = subprocess.run([*CHECK, "--device", "cuda"], cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.startswith("gpu_check: --device cuda: ") and done.stderr.count("\n") == 1


@pytest.mark.slow
def test_the_check_runs_on_cpu_and_prints_its_table():
    """The whole check at `--device cpu --size tiny`: `harness run` of the paper config into SQLite, read back, the
    bare backend on the run's calls, `harness eval`, and vs_trl where TRL is installed (57 s at load 2.4–3.0 on 2
    cores)."""
    done = subprocess.run(
        [*CHECK, "--device", "cpu", "--size", "tiny"], cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=900
    )
    assert done.returncode == 0, done.stderr[-3000:]
    rows = [line.split("  ")[0] for line in done.stdout.splitlines()]
    expected = ["harness run", "decode / token step, in the run", "decode / token step, bare", "harness eval"]
    assert set(expected) <= set(rows), done.stdout
    assert ("vs_trl: step harness / TRL" in rows) == (importlib.util.find_spec("trl") is not None)
    report = json.loads((ROOT / "results" / "benchmarks" / "gpu_check_tiny_cpu.json").read_text())
    assert report["run"]["status"] == "FINISHED" and len(report["run"]["metrics"][M.DECODE_STEP_S]) == 8
    timed = report["run"]["metrics"][M.DECODE_STEP_S] + [s for s in report["bare"]["per_step_s"] if s is not None]
    assert len(timed) == 8 + 5 and min(timed) > 0  # the bare backend: the first call, the last 4
    inside, bare, equal = report["run"]["factors"], report["bare"]["factors"], report["bare_equal"]["factors"]
    assert inside["dtype"] == bare["dtype"] == "float32" and inside["torch_threads"] == bare["torch_threads"] == 1
    assert inside["sdpa_kernels"] and inside["sdpa_kernels"] == bare["sdpa_kernels"]  # the profiler saw SDPA run
    # MATH prompts differ in length, so the decode passes a padding mask; prompts of one length pass none
    assert inside["decode_mask"].startswith("bool [8, 1, 1, ") and equal["decode_mask"] == "none"
    assert "* decode_mask: " in done.stdout and "  dtype: float32 | float32 | float32" in done.stdout
