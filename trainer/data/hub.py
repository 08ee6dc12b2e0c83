"""Whether a Hugging Face hub id can be had here without waiting on the network: it is in the local cache, or the
hub answers one short connection. harness's preflight asks for a model; `load_records` for a dataset, before it
imports `datasets` (a second or two of CPU).
"""

from __future__ import annotations

import os
import re
import socket
from pathlib import Path
from urllib.parse import urlparse

HUB_PROBE_TIMEOUT_S = 3.0
"""Seconds the one connection to the hub may take before the hub counts as unreachable."""
TRUE = ("1", "true", "yes", "on")
"""Values of HF_HUB_OFFLINE / HF_DATASETS_OFFLINE that turn the hub off (any case), as huggingface_hub reads them."""
_REPO_ID = re.compile(r"^(?:[A-Za-z0-9][\w.-]*/)?[A-Za-z0-9][\w.-]*$")


def is_repo_id(text: str) -> bool:
    """Whether `text` has the form of a hub id: `name` or `owner/name`, of letters, digits, `_`, `.` and `-`."""
    return bool(_REPO_ID.match(text)) and ".." not in text


def hf_home() -> Path:
    """$HF_HOME, else ~/.cache/huggingface (with $XDG_CACHE_HOME for ~/.cache)."""
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join("~", ".cache")
    return Path(os.environ.get("HF_HOME") or os.path.join(cache, "huggingface")).expanduser()


def hub_cache() -> Path:
    """Where huggingface_hub keeps downloaded repositories: $HF_HUB_CACHE, else $HF_HOME/hub."""
    return Path(os.environ.get("HF_HUB_CACHE") or hf_home() / "hub").expanduser()


def in_hub_cache(repo_id: str, kind: str = "models") -> bool:
    """Whether a snapshot of hub repository `repo_id` (`kind`: models or datasets) is in the hub cache."""
    snapshots = hub_cache() / f"{kind}--{repo_id.replace('/', '--')}" / "snapshots"
    return snapshots.is_dir() and any(snapshots.iterdir())


def dataset_cached(repo_id: str) -> bool:
    """Whether hub dataset `repo_id` was loaded here before: its files in the hub cache, or its prepared copy in
    $HF_DATASETS_CACHE (else $HF_HOME/datasets), named `owner___name` with the name in snake case by `datasets`,
    so names are compared on their letters and digits alone (a false yes costs only the slower error of `datasets`).
    """
    if in_hub_cache(repo_id, "datasets"):
        return True
    root = Path(os.environ.get("HF_DATASETS_CACHE") or hf_home() / "datasets").expanduser()
    want = [_letters(part) for part in repo_id.split("/")]
    try:
        return any(e.is_dir() and [_letters(p) for p in e.name.split("___")] == want for e in root.iterdir())
    except OSError:
        return False


def _letters(text: str) -> str:
    return re.sub(r"[^a-z0-9]", "", text.lower())


def hub_unreachable(offline_vars: tuple[str, ...] = ("HF_HUB_OFFLINE",)) -> str | None:
    """Why the hub cannot be reached from here, None if it can: the first of `offline_vars` that is set decides
    whether the hub is off; else one connection to $HF_ENDPOINT (default https://huggingface.co) is tried, for at
    most `HUB_PROBE_TIMEOUT_S`."""
    name = next((v for v in offline_vars if os.environ.get(v) is not None), None)
    if name is not None and os.environ[name].strip().lower() in TRUE:
        return f"{name} is set"
    endpoint = urlparse(os.environ.get("HF_ENDPOINT") or "https://huggingface.co")
    host, port = endpoint.hostname or "", endpoint.port or (80 if endpoint.scheme == "http" else 443)
    try:
        socket.create_connection((host, port), timeout=HUB_PROBE_TIMEOUT_S).close()
    except OSError as exc:
        return f"the hub at {host} cannot be reached ({' '.join(str(exc).split()) or type(exc).__name__})"
    return None
