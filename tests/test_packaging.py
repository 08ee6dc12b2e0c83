"""What an install gets: dependencies pip resolves without warnings, and the math data inside the wheel."""

from __future__ import annotations

import importlib.metadata
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import tomllib
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[1]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def test_every_requested_extra_is_provided_as_spelled():
    """pip warns "X does not provide the extra 'e'" when the spelling differs from X's Provides-Extra."""
    wanted = [*PROJECT["dependencies"], *(r for group in PROJECT["optional-dependencies"].values() for r in group)]
    for req in map(Requirement, wanted):
        if not req.extras:
            continue
        try:
            provided = importlib.metadata.metadata(req.name).get_all("Provides-Extra") or []
        except importlib.metadata.PackageNotFoundError:
            continue  # an optional group not installed here (vllm)
        assert req.extras <= set(provided), f"{req}: {req.name} provides {provided}"


def test_the_wheel_carries_the_math_data(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    for package in ("harness", "trainer", "dashboard", "report"):
        shutil.copytree(ROOT / package, src / package, ignore=shutil.ignore_patterns("__pycache__"))
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(tmp_path / "dist"),
            str(src),
        ],
        check=True,
        capture_output=True,
        timeout=300,
    )
    (wheel,) = (tmp_path / "dist").glob("harness-*.whl")
    shipped = {p.relative_to(ROOT).as_posix() for p in (ROOT / "trainer/data/files").rglob("*") if p.is_file()}
    assert len(shipped) == 13  # 12 sets and SOURCES.md
    assert shipped <= set(zipfile.ZipFile(wheel).namelist())


def test_trl_is_an_extra_pinned_to_the_tested_series_never_a_core_dependency():
    from harness.config.trl_args import TRL_REQUIREMENT

    extras = PROJECT["optional-dependencies"]
    assert extras["trl"] == [TRL_REQUIREMENT] and TRL_REQUIREMENT in extras["dev"]  # CI tests what users get
    assert all(Requirement(r).name != "trl" for r in PROJECT["dependencies"])
    assert all(str(Requirement(r).specifier) == str(Requirement(TRL_REQUIREMENT).specifier) for r in extras["bench"])


def test_reasoning_gym_is_an_extra_pinned_to_one_release_that_ci_installs():
    """A reasoning-gym release may change what a generator draws for a seed: the extra pins one and the lock pins it
    and its dependencies. dev (the README's install) leaves it out, since its pycosat may need a C compiler; CI
    installs the extra, so the task's tests run there."""
    extras = PROJECT["optional-dependencies"]
    assert extras["reasoning-gym"] == ["reasoning-gym==0.1.25"]
    assert all(Requirement(r).name != "reasoning-gym" for r in extras["dev"])
    assert '".[reasoning-gym]"' in (ROOT / ".ci" / "run").read_text()
    assert all(Requirement(r).name != "reasoning-gym" for r in PROJECT["dependencies"])
    assert "reasoning-gym==0.1.25" in (ROOT / "constraints-cpu.txt").read_text().splitlines()


def test_the_lock_pins_every_dependency_within_pyproject_ranges():
    """constraints-cpu.txt (made by `.ci/newest --write-lock`) pins each requirement of harness[dev] at a version its
    range admits: a range changed in pyproject.toml without a new lock fails here, not in a newcomer's install."""
    from packaging.utils import canonicalize_name

    lines = (ROOT / "constraints-cpu.txt").read_text().splitlines()
    pins = dict(line.split("==", 1) for line in lines if line and not line.startswith("#"))
    assert all(canonicalize_name(name) == name for name in pins), "pins are written by their canonical names"
    for req in map(Requirement, [*PROJECT["dependencies"], *PROJECT["optional-dependencies"]["dev"]]):
        name = canonicalize_name(req.name)
        assert name in pins, f"{req}: not in constraints-cpu.txt (run python .ci/newest --write-lock)"
        assert req.specifier.contains(pins[name], prereleases=True), f"{req}: the lock pins {pins[name]}"
    assert pins["torch"] == "2.13.0", "CPU installs take torch 2.13.0's CPU build"
