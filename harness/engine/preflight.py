"""Checks of a valid run config against this host, before any job starts: the device, the model's
files or hub access, its positions, and every folder a job writes to (the toy build's cache, the store's
folder, the temporary folder, the hub cache a download goes to). Each problem is one `ConfigError` line
naming the key; a store that is there but cannot be used is a `DataError` (`harness.runs.probe`).

Cheap by design (a sweep checks every arm): torch is imported only to confirm CUDA on a host that
has a CUDA driver, the hub is probed once, with a short timeout, only for a model not cached, and a
folder is probed once by making and removing an empty folder in it.
"""

from __future__ import annotations

import ctypes
import json
import os
import sys
import tempfile
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

from harness.config.errors import ConfigError
from harness.config.trl_args import trl_install_problem
from harness.runs.layout import sqlite_path
from harness.runs.probe import MLFLOW, StoreKind, probe_store
from trainer.data.hub import hub_cache, hub_unreachable, in_hub_cache

if TYPE_CHECKING:
    from harness.config.run_config import RunConfig


def check_host(cfg: RunConfig, where: str) -> None:
    """Raise a one-line `ConfigError` (prefixed with `where`) if `cfg` cannot run on this host."""
    problem = _problem(cfg)
    if problem:
        raise ConfigError(f"{where}: {problem}")


def check_store(uri: str, key: str, where: str, kind: StoreKind = MLFLOW) -> None:
    """Raise a one-line `ConfigError` (prefixed with `where`, naming `key`, the setting that chose `uri`) if a
    SQLite store's folder cannot be created or written: every job writes its database, locks and artifacts there;
    then `probe_store`'s one-line `DataError` if the store is there but is not one of `kind` (a folder, another
    application's database, a server that does not answer)."""
    db = sqlite_path(uri)
    problem = unwritable(str(db.parent), key) if db is not None else None
    if problem is None and db is not None and db.exists() and not os.access(db, os.R_OK | os.W_OK):
        problem = f"{key}: {db} cannot be written"
    if problem:
        raise ConfigError(f"{where}: {problem}")
    probe_store(uri, key, where, kind)


def check_writable(folder: str, key: str) -> None:
    """Raise a one-line `ConfigError` naming `key` and `folder` if the folder cannot be created or written."""
    problem = unwritable(folder, key)
    if problem:
        raise ConfigError(problem)


def _problem(cfg: RunConfig) -> str | None:
    if cfg.train.engine == "trl" and (problem := trl_install_problem()):
        return f"train.engine: trl {problem}"
    if cfg.train.device == "cuda" and not _cuda_available():
        return "train.device: cuda, but this host has no CUDA device (use auto or cpu)"
    try:
        tempfile.gettempdir()  # a job stages its artifacts there; Python finds the first writable candidate
    except OSError as exc:
        return f"TMPDIR: {' '.join(str(exc).split())}"
    if cfg.task.name == "custom" and (problem := custom_task_problem(cfg)):
        return problem
    if cfg.task.name == "reasoning_gym" and (problem := reasoning_gym_problem(cfg)):
        return problem
    model = cfg.model
    if model.source == "toy":
        return unwritable(model.cache_dir, "model.cache_dir")
    path = Path(model.name_or_path).expanduser()
    if path.is_dir():
        return _positions(cfg, path / "config.json")
    return _hub_problem(model.name_or_path)


def custom_task_problem(cfg: RunConfig) -> str | None:
    """Why a custom task cannot run: its data, a column it reads, a function or class that does not import (within
    its bounds) or cannot be called so; on the toy model, a prompt with a character the toy cannot read or too long
    for it. The user's code is imported in its bounded helper, never here."""
    settings = cfg.task.custom
    prompts: tuple[str, ...] = ()
    if settings.task_class is None:
        try:
            prompts = _custom_prompts(settings.model_dump_json())
        except ValueError as exc:
            text = str(exc)
            return (
                f"task.custom.{text}" if text.startswith(("data:", "fields.", "template")) else f"task.custom: {text}"
            )
    if problem := _code_problem(settings.model_dump_json()):
        return problem
    if cfg.model.source == "toy" and cfg.model.toy.text is None:  # a text build reads every row's characters
        from trainer.tasks.toy_addition import CHARS

        for i, prompt in enumerate(prompts):
            odd = sorted(set(prompt) - set(CHARS))
            if odd:
                return (
                    f"task.custom.data: the prompt of row {i} has {''.join(odd)!r}, which the toy model cannot read "
                    f"(its characters: {CHARS}; model.toy.text builds one for the task)"
                )
    return _too_long(cfg, prompts, "task.custom.data", "the prompt of row")


def reasoning_gym_problem(cfg: RunConfig) -> str | None:
    """Why a reasoning-gym task cannot run: the extra is not installed, the generator is not there (close names
    listed) or refuses its settings, its pool is malformed; on the toy model, a prompt with a character the model
    cannot read or too long for it. reasoning-gym is imported in the task's bounded helper, never here."""
    from importlib.util import find_spec

    if find_spec("reasoning_gym") is None:
        return "task.name: reasoning_gym needs the reasoning-gym extra: pip install -e '.[reasoning-gym]'"
    try:
        prompts = _reasoning_gym_prompts(cfg.task.reasoning_gym.model_dump_json())
    except RuntimeError as exc:  # ReasoningGymError: one line naming the setting
        return str(exc)
    if cfg.model.source == "toy" and cfg.model.toy.text is None:  # a text build reads every prompt's characters
        from trainer.tasks.toy_addition import CHARS

        for i, prompt in enumerate(prompts):
            odd = next((c for c in prompt if c not in CHARS), None)
            if odd is not None:
                return (
                    f"task.reasoning_gym: the prompt of problem {i} has {odd!r}, which the toy model cannot read "
                    f"(its characters: {CHARS}; model.toy.text builds one for the task)"
                )
    return _too_long(cfg, prompts, "task.reasoning_gym", "the prompt of problem")


def _too_long(cfg: RunConfig, prompts: tuple[str, ...], key: str, what: str) -> str | None:
    """A prompt that, with the generation budget, does not fit the toy model's positions."""
    if cfg.model.source != "toy":
        return None
    positions = cfg.model.toy.max_position_embeddings
    for i, prompt in enumerate(prompts):
        if len(prompt) + 1 + cfg.rollout.max_new_tokens > positions:
            return (
                f"{key}: {what} {i} ({len(prompt)} characters) and rollout.max_new_tokens "
                f"{cfg.rollout.max_new_tokens} exceed the toy model's {positions} positions"
            )
    return None


@lru_cache(maxsize=8)
def _reasoning_gym_prompts(settings_json: str) -> tuple[str, ...]:
    """The prompts of a reasoning-gym pool (built once per settings in a bounded helper: a sweep checks every arm)."""
    from trainer.tasks.reasoning_gym import ReasoningGymTask
    from trainer.tasks.reasoning_gym_config import ReasoningGymConfig

    task = ReasoningGymTask(ReasoningGymConfig.model_validate_json(settings_json))
    task.close()
    return tuple(task.prompts)


@lru_cache(maxsize=8)
def _code_problem(settings_json: str) -> str | None:
    """`trainer.tasks.custom.code_problem`, once per settings (a sweep checks every arm)."""
    from trainer.tasks.custom import code_problem
    from trainer.tasks.custom_config import CustomTaskConfig

    return code_problem(CustomTaskConfig.model_validate_json(settings_json))


@lru_cache(maxsize=8)
def _custom_prompts(settings_json: str) -> tuple[str, ...]:
    """The prompts of a custom task's rows (read once per settings: a sweep checks every arm)."""
    from trainer.tasks.custom import load_rows, prompts_of
    from trainer.tasks.custom_config import CustomTaskConfig

    settings = CustomTaskConfig.model_validate_json(settings_json)
    return tuple(prompts_of(settings, load_rows(settings)))


@lru_cache
def _cuda_available() -> bool:
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL("libcuda.so.1")
        except OSError:  # no driver: torch cannot see a GPU either, and importing it takes seconds
            return False
    import torch

    return torch.cuda.is_available()


def unwritable(folder: str, key: str) -> str | None:
    """Why `folder` (the value of setting `key`) could not be created or written here, None if it can. Probed by
    making and removing an empty folder in it, or in its nearest existing ancestor when it is not there yet, so
    nothing is left behind: permission bits alone say yes to root on read-only mounts and on /proc or /sys."""
    path = Path(folder).expanduser().absolute()
    existing = path
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    verb = "written" if existing == path else "created"
    if not existing.is_dir():
        return f"{key}: {folder} " + (
            "is not a folder" if existing == path else f"cannot be created ({existing} is not a folder)"
        )
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".harness-probe-", dir=existing))
    except OSError as exc:
        return f"{key}: {folder} cannot be {verb} ({existing}: {exc.strerror or type(exc).__name__})"
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
    if in_hub_cache(model_id):
        return None
    if problem := unwritable(str(hub_cache()), "HF_HUB_CACHE"):  # the download goes there
        return f"model.name_or_path: {model_id} is not in the local Hugging Face cache, and {problem}"
    if why := hub_unreachable():
        return f"model.name_or_path: {model_id} is not in the local Hugging Face cache and {why}"
    return None
