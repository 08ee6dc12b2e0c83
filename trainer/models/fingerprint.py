"""What a run ran on: the base model's weights by sha256, and the machine's floating-point path.

Two CPUs can train the same config to different numbers (torch picks its vectorised kernels by the CPU's
instruction set), so every run records both; see docs/reproducibility.md.
"""

from __future__ import annotations

import hashlib
import platform
from dataclasses import dataclass
from pathlib import Path

import torch

CHUNK = 1 << 20


def file_sha256(path: str | Path) -> str:
    """Hex sha256 of a file, read in 1 MiB chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def weights_sha256(name_or_path: str | Path) -> str:
    """sha256 of a model's weights: its one safetensors file's, or for sharded weights the sha256 of the lines
    `name sha256` of its files in name order. A hub id is looked up in the local hub cache only; "" when no
    safetensors file is found (the run then says its base model is unknown rather than guessing)."""
    folder = Path(name_or_path)
    if not folder.is_dir():
        try:
            from huggingface_hub import snapshot_download

            folder = Path(snapshot_download(str(name_or_path), local_files_only=True, allow_patterns=["*.safetensors"]))
        except Exception:  # noqa: BLE001 - not in the cache, or not a hub id: the fingerprint is unknown
            return ""
    files = sorted(folder.glob("*.safetensors"))
    if len(files) == 1:
        return file_sha256(files[0])
    if not files:
        return ""
    lines = "".join(f"{f.name} {file_sha256(f)}\n" for f in files)
    return hashlib.sha256(lines.encode()).hexdigest()


@dataclass(frozen=True)
class Machine:
    """Where a process computes: what decides its floating-point results on CPU."""

    cpu_model: str
    """The CPU's model name (/proc/cpuinfo), or the platform's processor string elsewhere."""
    cpu_capability: str
    """torch's CPU code path (`torch.backends.cpu.get_cpu_capability()`: DEFAULT, AVX2, AVX512, ...)."""
    torch_version: str
    threads: int
    """torch's intra-op threads at the time of reading."""
    cpu_vendor: str = ""
    """The CPU's vendor (/proc/cpuinfo's `vendor_id`: AuthenticAMD, GenuineIntel); "" where it cannot be read. MKL
    takes another code path on another vendor's CPU at the same pin (docs/reproducibility.md)."""
    cpu_family: str = ""
    """The CPU's family and model numbers ('25/17', /proc/cpuinfo); "" where they cannot be read."""
    cpu_path_env: str = ""
    """The pin's variables as this process has them ('ATEN_CPU_CAPABILITY=avx2 MKL_CBWR=AVX2,STRICT')."""

    @classmethod
    def here(cls) -> Machine:
        from trainer.cpu_path import cpu_path_env

        vendor, family = cpu_id()
        env = " ".join(f"{k}={v}" for k, v in cpu_path_env().items() if v)
        return cls(
            cpu_model(), torch.backends.cpu.get_cpu_capability(), torch.__version__, torch.get_num_threads(), vendor,
            family, env,
        )  # fmt: skip


def gpu_name(device: str | torch.device) -> str:
    """The CUDA device's name (`torch.cuda.get_device_name`) where `device` is one, else "" (a CPU run)."""
    device = torch.device(device)
    return torch.cuda.get_device_name(device) if device.type == "cuda" else ""


def cpu_id() -> tuple[str, str]:
    """(vendor, 'family/model') of the first CPU in /proc/cpuinfo; ("", "") where it cannot be read."""
    fields: dict[str, str] = {}
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, sep, value = line.partition(":")
            if not sep:
                if fields:
                    break  # the first processor's block is enough
                continue
            fields.setdefault(key.strip(), value.strip())
    except OSError:
        return "", ""
    family, model = fields.get("cpu family", ""), fields.get("model", "")
    return fields.get("vendor_id", ""), f"{family}/{model}" if family and model else ""


def cpu_model() -> str:
    """The CPU's model name: the first `model name` of /proc/cpuinfo on Linux, else platform.processor()."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"
