"""A multi-node Ray cluster and an MLflow tracking server on this one machine, for the cluster tests and
`benchmarks/cluster_overhead.py`: each node its own raylet and workers (`ray.cluster_utils.Cluster`), the server a
real `mlflow server` on 127.0.0.1 in its own process group. Both are stopped with everything they started."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def local_cluster(nodes: int, cpus_per_node: int = 1) -> Iterator:
    """A head and `nodes - 1` worker nodes (their handles in `.workers`), no dashboard."""
    from ray.cluster_utils import Cluster

    c = Cluster(initialize_head=True, head_node_args={"num_cpus": cpus_per_node, "include_dashboard": False})
    try:
        c.workers = [c.add_node(num_cpus=cpus_per_node) for _ in range(nodes - 1)]
        c.wait_for_nodes()
        yield c
    finally:
        import ray

        if ray.is_initialized():  # this process drove the cluster itself: disconnect before the head goes
            ray.shutdown()
        c.shutdown()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_healthy(url: str, proc: subprocess.Popen, timeout_s: float = 90.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the tracking server exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.5)
    raise TimeoutError(f"no tracking server at {url} after {timeout_s:.0f} s")


class TrackingServer:
    """`mlflow server` on 127.0.0.1, in its own process group (stopped with everything it started)."""

    def __init__(self, root: Path):
        self.root, self.port = root, _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        cmd = [
            sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1", "--port", str(self.port),
            "--backend-store-uri", f"sqlite:///{self.root / 'server.db'}",
            "--artifacts-destination", str(self.root / "artifacts"), "--workers", "1",
        ]  # fmt: skip
        log = open(self.root / "server.log", "ab")  # the server's output, closed with its process
        self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        _wait_healthy(self.url, self.proc)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self.proc = None
