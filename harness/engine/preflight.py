"""Checks of a valid run config against this host, before any job starts: the device, the model's
files or hub access, its positions, and a writable cache. Each problem is one `ConfigError` line.

Cheap by design (a sweep checks every arm): torch is imported only to confirm CUDA on a host that
has a CUDA driver, and the hub is probed once, with a short timeout, only for a model not cached.
"""

from __future__ import annotations

import ctypes
import json
import os
import socket
import sys
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlparse

from harness.spec.trl_args import trl_install_problem
from harness.spec.yaml_io import ConfigError

if TYPE_CHECKING:
    from harness.spec.run_config import RunConfig

HUB_PROBE_TIMEOUT_S = 3.0


def check_host(cfg: RunConfig, where: str) -> None:
    """Raise a one-line `ConfigError` (prefixed with `where`) if `cfg` cannot run on this host."""
    problem = _problem(cfg)
    if problem:
        raise ConfigError(f"{where}: {problem}")


def _problem(cfg: RunConfig) -> str | None:
    if cfg.train.engine == "trl" and (problem := trl_install_problem()):
        return f"train.engine: trl {problem}"
    if cfg.train.device == "cuda" and not _cuda_available():
        return "train.device: cuda, but this host has no CUDA device (use auto or cpu)"
    model = cfg.model
    if model.source == "toy":
        return _unwritable(model.cache_dir)
    path = Path(model.name_or_path).expanduser()
    if path.is_dir():
        return _positions(cfg, path / "config.json")
    return _hub_problem(model.name_or_path)


@lru_cache
def _cuda_available() -> bool:
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL("libcuda.so.1")
        except OSError:  # no driver: torch cannot see a GPU either, and importing it takes seconds
            return False
    import torch

    return torch.cuda.is_available()


@lru_cache
def _unwritable(cache_dir: str) -> str | None:
    """Why the toy model could not be built into `cache_dir` (None if it can); creates nothing."""
    path = Path(cache_dir).expanduser().absolute()
    while not path.exists() and path != path.parent:
        path = path.parent
    if not path.is_dir():
        return f"model.cache_dir: {cache_dir} cannot be created ({path} is not a folder)"
    if not os.access(path, os.W_OK | os.X_OK):
        return f"model.cache_dir: {cache_dir} cannot be written ({path} is not writable)"
    return None


def _positions(cfg: RunConfig, config_json: Path) -> str | None:
    """A local model whose positions cannot hold the generation budget."""
    try:
        positions = json.loads(config_json.read_text()).get("max_position_embeddings")
    except (OSError, ValueError):
        return None  # the loader reports a missing or broken config.json with its own words
    budget = max(cfg.rollout.max_new_tokens, cfg.eval.max_new_tokens or 0)
    if isinstance(positions, int) and budget >= positions:
        return (
            f"rollout.max_new_tokens: {budget} new tokens do not fit the model's {positions} positions "
            f"(max_position_embeddings in {config_json})"
        )
    return None


@lru_cache
def _hub_problem(model_id: str) -> str | None:
    """Why hub model `model_id` cannot be loaded here: not cached, and the hub is off or unreachable."""
    if _in_hf_cache(model_id):
        return None
    if os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on"):
        return f"model.name_or_path: {model_id} is not in the local Hugging Face cache and HF_HUB_OFFLINE is set"
    endpoint = urlparse(os.environ.get("HF_ENDPOINT") or "https://huggingface.co")
    host, port = endpoint.hostname or "", endpoint.port or (80 if endpoint.scheme == "http" else 443)
    try:
        socket.create_connection((host, port), timeout=HUB_PROBE_TIMEOUT_S).close()
    except OSError as exc:
        return (
            f"model.name_or_path: {model_id} is not in the local Hugging Face cache and the hub at {host} "
            f"cannot be reached ({' '.join(str(exc).split()) or type(exc).__name__})"
        )
    return None


def _in_hf_cache(model_id: str) -> bool:
    hub = os.environ.get("HF_HUB_CACHE") or os.path.join(
        os.environ.get("HF_HOME") or os.path.join(os.path.expanduser("~"), ".cache", "huggingface"), "hub"
    )
    snapshots = Path(hub) / f"models--{model_id.replace('/', '--')}" / "snapshots"
    return snapshots.is_dir() and any(snapshots.iterdir())
