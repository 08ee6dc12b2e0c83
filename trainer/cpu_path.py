"""One floating-point path per CPU vendor: torch's AVX2 kernels and MKL's AVX2 code path, pinned.

torch picks its vectorised CPU kernels by the CPU's instruction set (DEFAULT, AVX2, AVX512), and MKL its GEMM code
path by the CPU too; the same run then trains to other numbers on another machine (docs/reproducibility.md
measures it). Pinned to AVX2, which every x86 CPU of the last decade has, the toy's runs on an AMD EPYC were
bit-identical whatever path the machine would have chosen, at no cost in step time there
(benchmarks/cpu_determinism.py). MKL honours `MKL_CBWR=AVX2` on Intel CPUs only (on AMD it runs its own branch,
`benchmarks/cpu_fingerprint.py`), so runs on two vendors' CPUs are not the same bits: harness promises bit-identity
within one vendor and family, and equivalence across them (`report.agreement`); on Intel the pin costs ~1.5× in
a forward and backward.

`pin()` runs when `trainer` is imported, before torch's first CPU operation (torch reads `ATEN_CPU_CAPABILITY` then,
MKL reads `MKL_CBWR` at its first call), so it holds in every process that trains: the CLI, the sweep's workers,
Ray workers, tests and benchmarks. A value already in the environment wins: `ATEN_CPU_CAPABILITY=avx512` (or
`default`) runs torch's own choice for that machine. Nothing is pinned on a CPU without AVX2 or on a non-x86 one.
Each run records the path it used (the `cpu_capability` tag).
"""

from __future__ import annotations

import os
import platform
from pathlib import Path

PINNED = {"ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "AVX2,STRICT"}
"""The environment the pin sets where it is unset: torch's AVX2 kernels; MKL's AVX2 path, bitwise reproducible
whatever the thread count (STRICT)."""


def has_avx2() -> bool:
    """Whether this is an x86-64 CPU whose flags (/proc/cpuinfo) include avx2 (False where they cannot be read)."""
    if platform.machine().lower() not in ("x86_64", "amd64"):
        return False
    try:
        flags = next(line for line in Path("/proc/cpuinfo").read_text().splitlines() if line.startswith("flags"))
    except (OSError, StopIteration):
        return False
    return "avx2" in flags.split()


def pin(environ: dict[str, str] | os._Environ = os.environ) -> dict[str, str]:
    """Set `PINNED`'s variables that `environ` lacks, on an x86 CPU with AVX2; returns what it set."""
    if not has_avx2():
        return {}
    added = {k: v for k, v in PINNED.items() if k not in environ}
    environ.update(added)
    return added


def cpu_path_env(environ: dict[str, str] | os._Environ = os.environ) -> dict[str, str]:
    """The pin's variables as this process has them ("" where unset): what a build or a reference records."""
    return {k: environ.get(k, "") for k in PINNED}
