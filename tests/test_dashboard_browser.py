"""The dashboard in a real browser: `harness dashboard`'s server on 127.0.0.1 against a real sweep store, every page
opened in headless Chromium (Debian's `chromium`, driven by Playwright through its executable path; Playwright
never downloads a browser here), its figures checked, and a screenshot of each page saved under
results/screenshots/.
"""

from __future__ import annotations

import importlib.util
import ipaddress
import socket
from pathlib import Path

import pytest

from dashboard.browser import (
    CHROMIUM,
    HOST,
    PAGES,
    Server,
    browser,
    screenshot,
    serve,
    settle,
)

SCREENSHOTS = Path(__file__).resolve().parents[1] / "results" / "screenshots"
SERVER_START_S = 180  # the CPU may be busy (a sweep running beside the tests)
PAGE_LOAD_S = 180

_missing = [
    why
    for why, gone in (
        (f"{CHROMIUM} (Debian's `chromium` package)", not CHROMIUM.exists()),
        ("the playwright module (the dev extra)", importlib.util.find_spec("playwright") is None),
    )
    if gone
]
needs_browser = pytest.mark.skipif(bool(_missing), reason=f"real-browser test needs {' and '.join(_missing)}")


@pytest.fixture(scope="module")
def dashboard_server(dashboard_store, tmp_path_factory) -> Server:
    with serve(dashboard_store, tmp_path_factory.mktemp("dashboard-server") / "streamlit.log", SERVER_START_S) as srv:
        yield srv


@needs_browser
def test_every_page_renders_its_figures_in_chromium(dashboard_server):
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    problems, errors = [], []
    with browser() as chromium:
        page = chromium.new_page(viewport={"width": 1400, "height": 900})
        page.on("pageerror", lambda e: errors.append(f"{page.url}: {e}"))
        for name, path, title, min_charts in PAGES:
            page.goto(f"{dashboard_server.url}/{path}", wait_until="domcontentloaded", timeout=PAGE_LOAD_S * 1000)
            page.wait_for_selector('[data-testid="stApp"]', timeout=PAGE_LOAD_S * 1000)
            state = settle(page, title, min_charts, PAGE_LOAD_S)
            screenshot(page, SCREENSHOTS / f"{name}.png")
            if state["exceptions"]:
                problems.append(f"{name}: Streamlit exception on the page:\n" + "\n".join(state["exceptions"]))
            if state["charts"] < min_charts:
                problems.append(f"{name}: {state['charts']} plotly charts, expected at least {min_charts}")
            if state["drawn"] != state["charts"]:
                problems.append(f"{name}: only {state['drawn']} of {state['charts']} charts drew SVG content")
            if name == "sweeps" and state["dataframes"] < 2:
                problems.append(f"sweeps: {state['dataframes']} tables, expected the sweep summary and jobs")
            if name == "sweeps" and page.locator('[data-testid="stProgress"]').count() < 1:
                problems.append("sweeps: no progress bar")
    assert not problems, "\n".join(problems) + f"\nserver log:\n{dashboard_server.log_tail()}"
    assert not errors, "uncaught errors in the page:\n" + "\n".join(errors)
    missing = {f"{n}.png" for n, *_ in PAGES} - {p.name for p in SCREENSHOTS.glob("*.png")}
    assert not missing, f"screenshots not written: {sorted(missing)}"


def _listeners(port: int) -> list[str]:
    """The local addresses LISTENing on `port`, from /proc/net/tcp{,6} (Linux)."""
    found = []
    for table, family in (("/proc/net/tcp", socket.AF_INET), ("/proc/net/tcp6", socket.AF_INET6)):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            addr, hexport = fields[1].split(":")
            if fields[3] != "0A" or int(hexport, 16) != port:  # 0A: TCP_LISTEN
                continue
            raw = bytes.fromhex(addr)  # little-endian 32-bit words
            raw = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))
            found.append(socket.inet_ntop(family, raw))
    return found


def _non_loopback_ips() -> set[str]:
    ips = set()
    try:
        ips |= {info[4][0] for info in socket.getaddrinfo(socket.gethostname(), None, socket.AF_INET)}
    except OSError:
        pass
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("192.0.2.1", 9))  # UDP connect sends nothing: it only picks the outgoing interface
            ips.add(s.getsockname()[0])
        except OSError:
            pass
    return {ip for ip in ips if not (ipaddress.ip_address(ip).is_loopback or ipaddress.ip_address(ip).is_unspecified)}


def test_dashboard_server_listens_on_loopback_only(dashboard_server):
    cmd = dashboard_server.cmd
    assert "--server.address" in cmd and cmd[cmd.index("--server.address") + 1] == HOST, cmd
    with socket.create_connection((HOST, dashboard_server.port), timeout=5):
        pass
    listeners = _listeners(dashboard_server.port)
    if Path("/proc/net/tcp").exists():
        assert listeners and all(ipaddress.ip_address(a).is_loopback for a in listeners), listeners
    for ip in _non_loopback_ips():
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.settimeout(3)
            assert s.connect_ex((ip, dashboard_server.port)) != 0, f"dashboard reachable on {ip}"
