"""SWEEP → (tracking URI, the sweep in the store, its claims): a sweep file (its id is computed as `harness
sweep` does; its claims are the file's, so claims added after the runs are judged too) or the name / id of a
sweep already in the store (its claims as logged by the sweep's last invocation)."""

from __future__ import annotations

from pathlib import Path

from harness.analysis.claims import stored_claims
from harness.runs.layout import default_tracking_uri
from harness.runs.reader import Sweep, reader_for, sweeps, sweeps_with_id
from harness.spec.claims import Claim
from harness.spec.yaml_io import ConfigError


def resolve(
    spec: str, tracking_uri: str | None = None, profile: str | None = None
) -> tuple[str, Sweep, list[Claim], list[str]]:
    """The newest matching sweep, its claims and warnings; a clear one-line error when there is none."""
    path = Path(spec)
    if path.suffix in (".yaml", ".yml") or path.is_file():
        from harness.spec.plan import load_sweep

        if not path.is_file():
            raise ConfigError(f"{spec}: no such sweep file")
        plan = load_sweep(path, profile=profile)
        uri = default_tracking_uri(plan.jobs[0].config.tracking.results_dir, tracking_uri)
        found = sweeps_with_id(uri, plan.sweep_id, plan.experiment)
        hint = f"sweep '{plan.name}' (id {plan.sweep_id}, experiment '{plan.experiment}')"
    else:
        uri = default_tracking_uri("results", tracking_uri)
        found = [s for s in sweeps(reader_for(uri).runs()) if spec in (s.name, s.sweep_id) and s.sweep_id]
        hint = f"sweep named or with id '{spec}'"
    if not found:
        raise ConfigError(f"{spec}: no {hint} in {uri} (run `harness sweep` first, or pass --tracking-uri)")
    if path.is_file():
        return uri, found[0], list(plan.settings.claims), []
    claims, warning = stored_claims(found[0])
    return uri, found[0], claims, [warning] if warning else []
