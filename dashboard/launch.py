"""How `harness dashboard` starts Streamlit: the command line and environment (the browser tests use it too).

It imports no Streamlit: a `st.cache_data` defined outside `streamlit run` warns "No runtime found" once per
function, so the command that starts the server must not load the pages' modules."""

from __future__ import annotations

import os
import sys
from pathlib import Path

APP = Path(__file__).resolve().parent / "app.py"
URI_ENV = "HARNESS_DASHBOARD_URI"  # set by `harness dashboard --tracking-uri`
OPTUNA_ENV = "HARNESS_DASHBOARD_OPTUNA"  # set by `harness dashboard --optuna-storage`


def dashboard_command(
    uri: str, host: str, port: int, optuna_storage: str | None = None
) -> tuple[list[str], dict[str, str]]:
    """The `streamlit run` command line and environment of `harness dashboard`."""
    cmd = [
        sys.executable,
        "-m",
        "streamlit",
        "run",
        str(APP),
        "--server.address",
        host,
        "--server.port",
        str(port),
        "--server.headless",
        "true",
        "--browser.gatherUsageStats",
        "false",
        "--server.fileWatcherType",
        "none",
        "--client.toolbarMode",
        "viewer",
    ]
    env = {**os.environ, URI_ENV: uri}
    if optuna_storage:
        env[OPTUNA_ENV] = optuna_storage
    return cmd, env
