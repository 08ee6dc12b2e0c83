"""The MLflow layout of harness's runs, in one place: where the store is, every tag, the run name, the sweep's
artifact.

The writer (`harness.runs.writer`, the engine) sets these and the reader (`harness.runs.reader`, `sweep_data`)
reads them; neither spells a tag's name itself. Each tag's docstring below says what it means.
"""

from __future__ import annotations

import os
import socket
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING

from harness.config.run_config import RunConfig

if TYPE_CHECKING:  # not at run time: reading a sweep imports no torch
    from trainer.models.fingerprint import Machine

ENV_TRACKING_URI = "MLFLOW_TRACKING_URI"
SQLITE_PREFIX = "sqlite:///"

SWEEP_ID_TAG = "sweep_id"
"""The sweep's id (hash of its file's resolved plan); "" for a run started by `harness run`."""
ARM_TAG = "arm"
"""Hash of the run's resolved config without its seed: runs of one arm share it."""
ARM_LABEL_TAG = "arm_label"
"""The arm's human label as the sweep file names it (`aggregation=constant advantage=group_mean`)."""
CONFIG_HASH_TAG = "config_hash"
JOB_ID_TAG = "job_id"
"""Hash of the resolved config (= config_hash): the identity a resumed sweep matches finished runs by."""
SEED_TAG = "seed"
NAME_TAG = "name"
PRESET_TAG = "preset"
GIT_COMMIT_TAG = "git_commit"
PARENT_RUN_TAG = "mlflow.parentRunId"
"""MLflow's own nesting tag: a sweep's or study's jobs sit under its parent run."""
STATUS_TAG = "status"
"""RUNNING / FINISHED / FAILED / PRUNED, set by harness (MLflow's own status cannot say PRUNED)."""
FAILURE_REASON_TAG = "failure_reason"
STOP_REASON_TAG = "stop_reason"
PRUNED = "PRUNED"
"""The status tag of a run stopped early on purpose (an Optuna trial pruned)."""
PARENT_TAG = "sweep_parent"
""""1" on a sweep's parent run."""
N_JOBS_TAG = "n_jobs"
"""On the parent run: how many jobs the sweep plans."""
JOBS_ARTIFACT = "jobs.json"
"""On the parent run: the planned jobs, read by the dashboard to show progress before a job starts."""
SEQUENTIAL_ARTIFACT = "sequential.json"
"""On the parent run of a `--until-decided` sweep: the design, the rounds and each claim's path
(harness.analysis.sequential.record), rewritten after every look."""
SEQUENTIAL_TAG = "sequential"
""""1" on the parent run of a sweep that has a `SEQUENTIAL_ARTIFACT`."""
STUDY_TAG = "study"
TRIAL_TAG = "trial"
HOST_TAG = "host"
"""The machine whose process made the run: its worker's (or, for an attempt whose worker died before making one,
the driver's, which records the failure)."""
RAY_NODE_TAG = "ray_node"
"""The Ray node that trained the run (its node id), for a job of `--executor ray`; read from `RAY_NODE_ENV`."""
RAY_NODE_ENV = "HARNESS_RAY_NODE"
"""Set by the Ray executor in each worker process to its node's id."""
CPU_MODEL_TAG = "cpu_model"
"""The CPU's model name where the run computed (`trainer.models.fingerprint.cpu_model`)."""
CPU_VENDOR_TAG = "cpu_vendor"
"""The CPU's vendor (AuthenticAMD, GenuineIntel): MKL computes the same pinned GEMM another way on another vendor's
CPU, so bit-identity is promised within one vendor and family only (docs/reproducibility.md)."""
CPU_FAMILY_TAG = "cpu_family"
"""The CPU's family/model numbers ('25/17')."""
CPU_PATH_ENV_TAG = "cpu_path_env"
"""The pin's variables as the run had them ('ATEN_CPU_CAPABILITY=avx2 MKL_CBWR=AVX2,STRICT';
`trainer.cpu_path.cpu_path_env`)."""
CPU_CAPABILITY_TAG = "cpu_capability"
"""torch's CPU code path there (`torch.backends.cpu.get_cpu_capability()`: DEFAULT, AVX2, AVX512, ...): two paths
can train one config to different numbers."""
TORCH_VERSION_TAG = "torch_version"
TORCH_THREADS_TAG = "torch_threads"
"""torch's intra-op threads as the run trained (read after `train.threads` is applied)."""
BASE_MODEL_SHA256_TAG = "base_model_sha256"
"""sha256 of the base model's weights (`trainer.models.fingerprint.weights_sha256`); "" when it could not be had."""
GPU_TAG = "gpu"
"""The CUDA device's name, on a run that trained on one (absent on CPU)."""

LENGTH_TAKEOFF_TAG = "length_takeoff_step"
"""Set when a run finishes: the step at which its incorrect responses took off (`trainer.takeoff`), or `never`."""
NEVER = "never"


def takeoff_value(step: int | None) -> str:
    """The `LENGTH_TAKEOFF_TAG` value of a take-off at `step` (None: it never happened)."""
    return NEVER if step is None else str(step)


def parse_takeoff(value: str | None) -> int | None | str:
    """A run's take-off step from its tag: the step, None for `never`, or "" when the run did not record one."""
    if value is None or value == "":
        return ""
    return None if value == NEVER else int(value)


RUN_NAME_MAX = 250
"""MLflow's limit on a run name (its `runs.name` column)."""


def run_tags(cfg: RunConfig, sweep_id: str = "") -> dict[str, str]:
    """A run's tags: sweep id, arm, config hash (= job id), seed, name, preset, the code version (git commit) and
    where it ran (host, and Ray node in a Ray worker); on what it computed is `machine_tags`."""
    node = os.environ.get(RAY_NODE_ENV)
    return {
        SWEEP_ID_TAG: sweep_id,
        ARM_TAG: cfg.arm,
        CONFIG_HASH_TAG: cfg.config_hash,
        JOB_ID_TAG: cfg.config_hash,
        SEED_TAG: str(cfg.seed),
        NAME_TAG: cfg.name,
        PRESET_TAG: cfg.objective_preset or "",
        GIT_COMMIT_TAG: _git_commit(),
        HOST_TAG: socket.gethostname(),
        **({RAY_NODE_TAG: node} if node else {}),
    }


def machine_tags(machine: Machine, base_model_sha256: str, gpu: str = "") -> dict[str, str]:
    """Where a run computed (beside `run_tags`): CPU model, vendor, family and capability, the pin's variables,
    torch version and threads, the base model's sha256, and the GPU's name on a CUDA run."""
    return {
        CPU_MODEL_TAG: machine.cpu_model,
        CPU_VENDOR_TAG: machine.cpu_vendor,
        CPU_FAMILY_TAG: machine.cpu_family,
        CPU_PATH_ENV_TAG: machine.cpu_path_env,
        CPU_CAPABILITY_TAG: machine.cpu_capability,
        TORCH_VERSION_TAG: machine.torch_version,
        TORCH_THREADS_TAG: str(machine.threads),
        BASE_MODEL_SHA256_TAG: base_model_sha256,
        **({GPU_TAG: gpu} if gpu else {}),
    }


def run_name(cfg: RunConfig, arm: str | None = None) -> str:
    """MLflow run name: tracking.run_name, else `<arm>-s<seed>` for a sweep's job (its arm label, one line,
    shortened to fit MLflow), else `<name>-s<seed>`."""
    if cfg.tracking.run_name:
        return cfg.tracking.run_name
    seed = f"-s{cfg.seed}"
    label = " ".join("".join(c if c.isprintable() else " " for c in arm or cfg.name).split()) or cfg.name
    room = RUN_NAME_MAX - len(seed)
    return (label if len(label) <= room else label[: room - 3] + "...") + seed


def _git_commit() -> str:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            timeout=5,
            cwd=Path(__file__).resolve().parent,
        )
        return out.stdout.strip() if out.returncode == 0 else ""
    except (OSError, subprocess.SubprocessError):
        return ""


def default_tracking_uri(results_dir: str | os.PathLike, explicit: str | None = None) -> str:
    """Tracking URI for this invocation: `explicit` (--tracking-uri) beats $MLFLOW_TRACKING_URI
    beats `sqlite:///<abs results_dir>/mlflow.db`."""
    if explicit:
        return explicit
    if os.environ.get(ENV_TRACKING_URI):
        return os.environ[ENV_TRACKING_URI]
    return SQLITE_PREFIX + str((Path(results_dir) / "mlflow.db").resolve())


def tracking_uri_key(explicit: str | None, key: str) -> str:
    """The setting that chose `default_tracking_uri(results_dir, explicit)`, for error messages: `key` (the name of
    `explicit`, e.g. --tracking-uri) when it is given, else $MLFLOW_TRACKING_URI when set, else tracking.results_dir."""
    if explicit:
        return key
    return ENV_TRACKING_URI if os.environ.get(ENV_TRACKING_URI) else "tracking.results_dir"


def sqlite_path(uri: str) -> Path | None:
    """The database file of a `sqlite:///` URI, None for any other store or in-memory SQLite."""
    if not uri.startswith(SQLITE_PREFIX):
        return None
    path = uri[len(SQLITE_PREFIX) :].split("?", 1)[0]
    return None if path in ("", ":memory:") else Path(path)


def store_exists(uri: str) -> bool:
    """False only for a SQLite store whose file is not there yet, or is empty (0 bytes: MLflow has not made its
    tables there), so that a dry run or a reader never creates one."""
    path = sqlite_path(uri)
    return path is None or (path.exists() and (not path.is_file() or path.stat().st_size > 0))
