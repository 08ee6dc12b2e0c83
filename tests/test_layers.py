"""The layers of the pipeline and the lint, enforced: import-linter's contracts (pyproject.toml) hold on this
tree and break on a tree with one upward import; ruff's lint and format pass."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("harness", "trainer", "report", "dashboard")
LINT_IMPORTS = str(Path(sys.executable).with_name("lint-imports"))


def _lint_imports(root: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [LINT_IMPORTS, "--no-cache"],
        cwd=root,
        env={**os.environ, "PYTHONPATH": str(root)},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_layer_contracts_hold():
    out = _lint_imports(ROOT)
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.count("KEPT") == 3 and "BROKEN" not in out.stdout


def _copy_tree(dest: Path) -> None:
    shutil.copy(ROOT / "pyproject.toml", dest)
    for pkg in PACKAGES:
        shutil.copytree(ROOT / pkg, dest / pkg, ignore=shutil.ignore_patterns("__pycache__", "files"))


def test_an_upward_import_breaks_the_layers(tmp_path):
    """The config layer importing the engine (a layer above it) is reported, naming both modules."""
    _copy_tree(tmp_path)
    plan = tmp_path / "harness" / "config" / "plan.py"
    plan.write_text(plan.read_text() + "\nfrom harness.engine import sweep  # noqa: E402,F401\n")
    out = _lint_imports(tmp_path)
    assert out.returncode == 1
    assert "BROKEN" in out.stdout and "harness.config.plan -> harness.engine.sweep" in out.stdout


def test_the_trainer_importing_harness_breaks_two_contracts(tmp_path):
    _copy_tree(tmp_path)
    loop = tmp_path / "trainer" / "loop.py"
    loop.write_text(loop.read_text() + "\nimport harness.runs.writer  # noqa: E402,F401\n")
    out = _lint_imports(tmp_path)
    assert out.returncode == 1 and out.stdout.count("BROKEN") == 2, out.stdout


def test_an_import_cycle_between_siblings_is_reported(tmp_path):
    _copy_tree(tmp_path)
    values = tmp_path / "harness" / "analysis" / "stats.py"
    values.write_text(values.read_text() + "\nfrom harness.analysis import claims  # noqa: E402,F401\n")
    out = _lint_imports(tmp_path)
    assert out.returncode == 1 and "No cycles are allowed in harness.analysis" in out.stdout, out.stdout


def test_ruff_lint_and_format_pass():
    """The lint and format rules of pyproject.toml hold on the whole tree (what CI runs)."""
    for args in (["check", "."], ["format", "--check", "."]):
        out = subprocess.run(
            [sys.executable, "-m", "ruff", *args], cwd=ROOT, capture_output=True, text=True, timeout=120
        )
        assert out.returncode == 0, f"ruff {' '.join(args)}:\n{out.stdout}{out.stderr}"
