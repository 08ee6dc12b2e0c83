"""SWEEP → (tracking URI, the sweep in the store, its claims): a sweep file (its id is computed as `harness
sweep` does; its claims are the file's, so claims added after the runs are judged too) or the name / id of a
sweep already in the store (its claims as logged by the sweep's last invocation)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from harness.config.claims import Claim
from harness.config.errors import ConfigError, DataError
from harness.runs.layout import default_tracking_uri, tracking_uri_key
from harness.runs.probe import probe_store

if TYPE_CHECKING:  # the store's reader imports MLflow: not before the store is probed, so a refusal is fast
    from harness.runs.reader import Sweep


def resolve(
    ref: str, tracking_uri: str | None = None, profile: str | None = None, flag: str = "--tracking-uri"
) -> tuple[str, Sweep, list[Claim], list[str]]:
    """The newest matching sweep, its claims and warnings; a clear one-line error when there is none (`flag`: the
    option that gave `tracking_uri`, which an error about the store names)."""
    path = Path(ref)
    if path.suffix in (".yaml", ".yml") or path.is_file():
        from harness.config.plan import plan_sweep

        if not path.is_file():
            raise ConfigError(f"{ref}: no such sweep file")
        plan = plan_sweep(path, profile=profile)
        uri = default_tracking_uri(plan.jobs[0].config.tracking.results_dir, tracking_uri)
        wanted = (plan.sweep_id, plan.experiment)
        hint = f"sweep '{plan.name}' (id {plan.sweep_id}, experiment '{plan.experiment}')"
    else:
        uri = default_tracking_uri("results", tracking_uri)
        wanted, hint = (ref, None), f"sweep named or with id '{ref}'"
    probe_store(uri, tracking_uri_key(tracking_uri, flag), ref)
    from harness.runs.reader import find_sweep

    found = find_sweep(uri, *wanted)
    if found is None:
        raise DataError(f"{ref}: no {hint} in {uri} (run `harness sweep` first, or pass {flag})")
    if path.is_file():
        return uri, found, list(plan.settings.claims), []
    from harness.analysis.claims import stored_claims

    claims, warning = stored_claims(found)
    return uri, found, claims, [warning] if warning else []


def run_tool(name: str, work: Callable[[], int | None]) -> None:
    """Exit with what `work` returns (None: 0), or with one line on stderr: 2 for a config or usage error, 3 for a
    data error (the exit codes of `harness`), for the `python -m report.<name>` tools."""
    try:
        code = work()
    except ConfigError as exc:
        print(f"report.{name}: config error: {exc}", file=sys.stderr)
        sys.exit(2)
    except DataError as exc:
        print(f"report.{name}: data error: {exc}", file=sys.stderr)
        sys.exit(3)
    sys.exit(code or 0)
