"""Serve the dashboard and photograph its pages in headless Chromium (Debian's `chromium`, driven by
Playwright through its executable path; no browser is ever downloaded).

Used by the real-browser test and for the README's figures:

    python -m dashboard.browser --tracking-uri sqlite:///results/mlflow.db --out docs --page length_bias \
        --sweep dr_grpo_bias
"""

from __future__ import annotations

import argparse
import socket
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
HOST = "127.0.0.1"

# (name, URL path (Streamlit derives it from dashboard/views/<file>.py), page title, least plotly charts on a sweep)
PAGES = [
    ("sweeps", "", "Sweeps", 0),
    ("length_bias", "length_bias", "Length bias (Dr. GRPO)", 3),
    ("entropy_clipping", "entropy_clipping", "Entropy & clipping (DAPO, GSPO)", 3),
    ("dynamic_sampling", "dynamic_sampling", "Groups & advantages (DAPO, NGRPO, MC-GRPO)", 3),
    ("ablation", "ablation", "Ablation table", 1),
    ("explorer", "explorer", "Run explorer", 1),
    ("studies", "studies", "Studies (Optuna)", 0),  # `harness tune`'s Optuna storage, not the tracking store
]


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


class Server:
    """A running `harness dashboard` server."""

    def __init__(self, cmd: list[str], proc: subprocess.Popen, port: int, log: Path):
        self.cmd, self.proc, self.port, self.log = cmd, proc, port, log
        self.url = f"http://{HOST}:{port}"

    def log_tail(self, n: int = 4000) -> str:
        return self.log.read_text(errors="replace")[-n:] if self.log.exists() else ""

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=20)


@contextmanager
def serve(uri: str, log: Path, start_timeout_s: float = 180) -> Iterator[Server]:
    """`harness dashboard`'s command line on a free port, yielded once /_stcore/health answers "ok"; always stopped."""
    from dashboard.launch import dashboard_command

    port = free_port()
    cmd, env = dashboard_command(uri, HOST, port)
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    server = Server(cmd, proc, port, log)
    try:
        deadline = time.monotonic() + start_timeout_s
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"dashboard server exited with {proc.returncode}:\n{server.log_tail()}")
            try:
                with urllib.request.urlopen(f"{server.url}/_stcore/health", timeout=5) as r:
                    if r.status == 200 and r.read().decode().strip() == "ok":
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"dashboard server not healthy after {start_timeout_s} s:\n{server.log_tail()}")
            time.sleep(0.5)
        yield server
    finally:
        server.stop()


# In-page probe: where the Streamlit run stands, and what it has drawn.
STATE_JS = """() => {
  const q = (s) => Array.from(document.querySelectorAll(s));
  const charts = q('[data-testid="stPlotlyChart"]');
  return {
    titles: q('h1').map((h) => h.innerText.trim()),
    running: q('[data-testid="stStatusWidget"]').some((w) => /running/i.test(w.innerText))
             || q('[data-testid="stSkeleton"]').length > 0,
    charts: charts.length,
    drawn: charts.filter((c) => c.querySelector('.js-plotly-plot .main-svg')
                                && c.querySelector('.js-plotly-plot .main-svg').getBoundingClientRect().width > 0
                                && c.querySelectorAll('.main-svg path, .main-svg rect').length > 0).length,
    exceptions: q('[data-testid="stException"]').map((e) => e.innerText.slice(0, 2000)),
    dataframes: q('[data-testid="stDataFrame"]').length,
  };
}"""


def settle(page, title: str, min_charts: int, timeout_s: float) -> dict:
    """Poll until the page's script has run to the end: its title shown, nothing running, at least `min_charts`
    charts, every chart drawn, and that state unchanged over two polls (charts still arriving otherwise)."""
    deadline, last, stable = time.monotonic() + timeout_s, None, 0
    while True:
        state = page.evaluate(STATE_JS)
        done = (
            title in state["titles"]
            and not state["running"]
            and state["charts"] >= min_charts
            and state["drawn"] == state["charts"]
        ) or bool(state["exceptions"])
        stable = stable + 1 if done and state == last else 0
        if stable >= 2:
            return state
        if time.monotonic() > deadline:
            raise AssertionError(f"page {title!r} did not settle in {timeout_s} s: {state}")
        last = state
        page.wait_for_timeout(1000)


def screenshot(page, path: Path, max_height: int | None = None) -> None:
    """A full-page screenshot (or its top `max_height` pixels); Streamlit scrolls its main section rather than
    the document, so the viewport is first grown to the content's height."""
    height = page.evaluate("""() => Math.max(document.documentElement.scrollHeight,
        ...Array.from(document.querySelectorAll('[data-testid="stMain"], [data-testid="stAppViewContainer"],'
                                                + ' section.main')).map((e) => e.scrollHeight))""")
    width = page.viewport_size["width"]
    page.set_viewport_size({"width": width, "height": min(max(int(height), 900), 12000)})
    page.wait_for_timeout(1500)  # Plotly charts resize to the new viewport
    clip = {"x": 0, "y": 0, "width": width, "height": max_height} if max_height else None
    page.screenshot(path=str(path), full_page=clip is None, clip=clip)
    page.set_viewport_size({"width": width, "height": 900})


@contextmanager
def browser() -> Iterator:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True)
        try:
            yield b
        finally:
            b.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tracking-uri", required=True)
    parser.add_argument("--out", type=Path, default=Path("results/screenshots"))
    parser.add_argument("--page", action="append", choices=[p[0] for p in PAGES], help="default: every page")
    parser.add_argument("--width", type=int, default=1400)
    parser.add_argument("--max-height", type=int, default=None, help="crop each shot to its top N pixels")
    parser.add_argument("--sweep", help="the sweep (name, key or id) the pages show; default: the store's newest")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    with serve(args.tracking_uri, args.out / "streamlit.log") as server, browser() as b:
        page = b.new_page(viewport={"width": args.width, "height": 900})
        for name, path, title, least in PAGES:
            if args.page and name not in args.page:
                continue
            query = f"?{urllib.parse.urlencode({'sweep': args.sweep})}" if args.sweep else ""
            page.goto(f"{server.url}/{path}{query}", wait_until="domcontentloaded", timeout=180_000)
            settle(page, title, least, 180)
            screenshot(page, args.out / f"{name}.png", args.max_height)
            print(args.out / f"{name}.png")


if __name__ == "__main__":
    main()
