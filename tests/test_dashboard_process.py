"""Stopping `harness dashboard` stops its Streamlit server: a process manager's SIGTERM (or `kill PID`) and a
SIGINT sent to harness's own pid leave nothing listening on the port and no process of it alive; it starts and
stops without a warning."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dashboard.browser import HOST, free_port

ROOT = Path(__file__).resolve().parents[1]
START_S = 180  # the CPU may be busy
STOP_S = 15  # a hang guard in wall-clock time, which is what stopping is about (a stopped server uses no CPU):
# a stop takes a fraction of a second, a server that ignores the signal never stops

pytestmark = [
    pytest.mark.skipif(
        not Path("/proc/self/stat").exists() or os.name != "posix", reason="reads process groups from Linux's /proc"
    ),
    pytest.mark.slow,  # starts the server twice
]


def _group(pgid: int) -> list[str]:
    """`pid name` of every live (not zombie) process in process group `pgid`."""
    alive = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:  # gone meanwhile
            continue
        name, rest = text[text.index("(") + 1 : text.rindex(")")], text[text.rindex(")") + 2 :].split()
        if int(rest[2]) == pgid and rest[0] != "Z":  # fields after the name: state, ppid, pgrp
            alive.append(f"{stat.parent.name} {name}")
    return alive


def _accepts(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(1)
        return s.connect_ex((HOST, port)) == 0


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_signal_to_harness_dashboard_stops_its_server(tmp_path, sig):
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    cmd = [
        sys.executable,
        "-m",
        "harness.cli",
        "dashboard",
        "--port",
        str(port),
        "--tracking-uri",
        f"sqlite:///{tmp_path / 'mlflow.db'}",
        "--optuna-storage",
        f"sqlite:///{tmp_path / 'optuna.db'}",
    ]
    log = tmp_path / "dashboard.log"
    with open(log, "wb") as out:  # a session of its own: the cleanup below reaches whatever it started
        proc = subprocess.Popen(
            cmd,
            cwd=tmp_path,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + START_S
        while not _accepts(port):
            assert proc.poll() is None, f"harness dashboard exited with {proc.returncode}:\n{log.read_text()}"
            assert time.monotonic() < deadline, f"no server on port {port} after {START_S} s:\n{log.read_text()}"
            time.sleep(0.5)
        assert _group(proc.pid), "the server's processes were not found"

        os.kill(proc.pid, sig)  # harness's own pid only, as `kill PID` or a process manager does
        deadline = time.monotonic() + STOP_S
        while (_accepts(port) or _group(proc.pid)) and time.monotonic() < deadline:
            proc.poll()  # reap harness itself once it exits
            time.sleep(0.1)
        assert not _accepts(port), f"port {port} still accepts connections {STOP_S} s after {sig.name}"
        assert not _group(proc.pid), f"still alive {STOP_S} s after {sig.name}: {_group(proc.pid)}"
        text = log.read_text()
        assert "harness dashboard: http://127.0.0.1:" in text  # the banner is kept
        assert "WARNING" not in text, text  # e.g. Streamlit's "No runtime found" when the CLI loads the pages
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:  # nothing left of it
            pass
        proc.wait(timeout=30)
