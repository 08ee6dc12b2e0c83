"""The CPU code path pin: set where unset, a user's choice kept, nothing pinned without AVX2, and in force in a
fresh process that imports trainer before torch computes."""

import os
import subprocess
import sys

import pytest

from trainer import cpu_path


def test_the_pin_sets_only_what_is_unset(monkeypatch):
    monkeypatch.setattr(cpu_path, "has_avx2", lambda: True)
    env = {"MKL_CBWR": "COMPATIBLE"}
    assert cpu_path.pin(env) == {"ATEN_CPU_CAPABILITY": "avx2"}
    assert env == {"MKL_CBWR": "COMPATIBLE", "ATEN_CPU_CAPABILITY": "avx2"}
    assert cpu_path.pin(env) == {}


def test_nothing_is_pinned_without_avx2(monkeypatch):
    monkeypatch.setattr(cpu_path, "has_avx2", lambda: False)
    env: dict[str, str] = {}
    assert cpu_path.pin(env) == {} and env == {}


def _capability(env: dict[str, str]) -> str:
    code = "import trainer, torch; print(torch.backends.cpu.get_cpu_capability())"
    clean = {k: v for k, v in os.environ.items() if k not in cpu_path.PINNED}
    return subprocess.run(
        [sys.executable, "-c", code], env={**clean, **env}, capture_output=True, text=True, check=True
    ).stdout.strip()


@pytest.mark.skipif(not cpu_path.has_avx2(), reason="an x86 CPU with AVX2")
def test_a_process_that_imports_trainer_computes_on_the_pinned_path_unless_told_otherwise():
    assert _capability({}) == "AVX2"
    assert _capability({"ATEN_CPU_CAPABILITY": "default"}) == "DEFAULT"
