"""A sweep's evidence file: what its claims were judged on, small enough to ship in the repository.

One JSON file per published verdict table (docs/evidence/): the sweep file as judged (its text, sha256 and
claims), each job run (job id, arm, seed, state, machine, base model, the varying settings) and, per finished run,
the value of every metric its claims read at every point they read it (`metric @ at`, exactly as
`SweepData.values` computed it from the store), the planned jobs and an `--until-decided` sweep's record. A few
kilobytes a sweep; `read_evidence` turns it back into a `SweepData` whose `values` serve those numbers, so
`harness claims`, `harness report` and `report.agreement` judge it as they judge a store.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, TypeAdapter, ValidationError

from harness.config.at import At, value_key
from harness.config.claims import Claim, check_unique
from harness.config.errors import DataError
from harness.runs.layout import GIT_COMMIT_TAG, JOB_ID_TAG

if TYPE_CHECKING:  # the store's reader imports MLflow: not before a file is checked, so that a refusal is fast
    import pandas as pd

    from harness.runs.sweep_data import SweepData

FORMAT = "harness evidence 1"
MAX_BYTES = 8 << 20
"""An evidence file is kilobytes; a larger one is refused before it is read."""


def read_points(claims: list[Claim]) -> list[tuple[str, At]]:
    """Every (metric, at) the claims read: each metric at the claim's `at`, and a `since` claim's at its start."""
    out: dict[str, tuple[str, At]] = {}
    for c in claims:
        for metric in c.metrics:
            out.setdefault(value_key(metric, c.at), (metric, c.at))
        if c.contrast.since is not None:
            out.setdefault(value_key(c.metrics[0], c.contrast.since), (c.metrics[0], c.contrast.since))
    return list(out.values())


class _Run(BaseModel):
    model_config = ConfigDict(extra="forbid")
    run_id: str
    run_name: str
    job_id: str
    arm: str
    seed: int
    state: str
    """done / failed / pruned / running / duplicate / retried, as the store's reader settled it."""
    failure_reason: str = ""
    steps: float | None = None
    last_step: int = 0
    start_time: float | None = None
    """ms since the epoch, as MLflow logged it (and end_time)."""
    end_time: float | None = None
    git_commit: str = ""
    """The code the run trained with."""
    settings: dict[str, str | None] = {}
    """The varying settings (dotted keys) as logged."""
    machine: dict[str, str | int | None] = {}
    values: dict[str, float | None] = {}
    """`value_key` → the run's value (null: the run has none there)."""


class _File(BaseModel):
    model_config = ConfigDict(extra="forbid")
    format: str
    sweep: str
    sweep_id: str
    experiment: str
    sweep_file: str
    """The sweep file's text, as judged."""
    sweep_file_sha256: str
    claims: list[dict]
    varying: list[str]
    arms: list[str]
    cumulative: bool = False
    arm_settings: dict[str, dict[str, str | None]]
    """Each arm's settings (every dotted param of its first run), for a claim's arm/vs references."""
    planned: list[dict] = []
    sequential: dict | None = None
    points: list[str]
    """The `value_key`s every finished run has a value for (or null)."""
    runs: list[_Run]


def write_evidence(data: SweepData, claims: list[Claim], sweep_file: str, path: Path, record: dict | None) -> int:
    """Write `data`'s evidence for `claims` (`sweep_file`: the sweep file's text; `record`: an `--until-decided`
    sweep's record as logged); returns the bytes written."""
    from harness.runs.sweep_data import RunMachine

    runs = data.runs
    kept = per_run_values(data, claims).set_index("run_id").drop(columns=["job_id", "arm", "seed"])
    params = data.params
    first = runs.drop_duplicates("arm").set_index("arm")["run_id"]
    out = _File(
        format=FORMAT,
        sweep=data.sweep.name,
        sweep_id=data.sweep.sweep_id,
        experiment=data.sweep.experiment,
        sweep_file=sweep_file,
        sweep_file_sha256=hashlib.sha256(sweep_file.encode()).hexdigest(),
        claims=[c.model_dump(mode="json", by_alias=True, exclude_defaults=True) for c in claims],
        varying=list(data.varying),
        arms=list(data.arms),
        cumulative=data.cumulative,
        arm_settings={
            arm: ({k: _text(v) for k, v in params.loc[rid].dropna().items()} if rid in params.index else {})
            for arm, rid in first.items()
        },
        planned=[{"job_id": p["job_id"], "arm": p["arm"], "seed": int(p["seed"])} for p in data.planned],
        sequential=record,
        points=list(kept.columns),
        runs=[
            _Run(
                run_id=str(r["run_id"]),
                run_name=_text(r.get("run_name")) or "",
                job_id=_text(r.get(JOB_ID_TAG)) or "",
                arm=str(r["arm"]),
                seed=int(r["seed"]),
                state=str(r["state"]),
                failure_reason=_text(r.get("failure_reason")) or "",
                steps=_number(r.get("steps")),
                last_step=int(r.get("last_step") or 0),
                start_time=_number(r.get("start_time")),
                end_time=_number(r.get("end_time")),
                git_commit=_text(r.get(GIT_COMMIT_TAG)) or "",
                settings={k: _text(r.get(k)) for k in data.varying},
                machine=asdict(r["machine"]) if isinstance(r.get("machine"), RunMachine) else {},
                values=({k: _number(v) for k, v in kept.loc[r["run_id"]].items()} if r["run_id"] in kept.index else {}),
            )
            for r in runs.to_dict("records")
        ],
    )
    text = json.dumps(out.model_dump(mode="json"), indent=1, allow_nan=False, sort_keys=False) + "\n"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return len(text.encode())


def per_run_values(data: SweepData, claims: list[Claim]) -> pd.DataFrame:
    """Each finished run's values at every point `claims` read: run_id, job_id, arm, seed, then one column per
    `value_key` (NaN where the run has none): what two sets of runs are matched and compared on run by run."""
    runs = data.runs[data.runs["state"] == "done"]
    out = runs.reindex(columns=["run_id", JOB_ID_TAG, "arm", "seed"]).rename(columns={JOB_ID_TAG: "job_id"})
    for metric, at in read_points(claims):
        found = data.values(metric, at).frame.set_index("run_id")["value"]
        out[value_key(metric, at)] = out["run_id"].map(found).astype(float)
    return out.reset_index(drop=True)


def is_evidence_file(ref: str) -> bool:
    """Whether `ref` names an evidence file (a .json path) rather than a sweep file, name or store."""
    return ref.endswith(".json")


@dataclass
class EvidenceFile:
    """An evidence file read back: the sweep's data (values served from the file), its claims and an
    `--until-decided` sweep's record (as logged, or None)."""

    path: Path
    data: SweepData
    claims: list[Claim]
    record: dict | None = None


@dataclass(frozen=True)
class Checked:
    """An evidence file checked but not yet turned into data: what a command can refuse it by, in a fraction of a
    second (its sweep, claims and seeds)."""

    path: Path
    file: _File
    claims: list[Claim]

    @property
    def sweep(self) -> str:
        return self.file.sweep

    @property
    def seeds(self) -> list[int]:
        """The seeds of its finished runs, ascending."""
        return sorted({r.seed for r in self.file.runs if r.state == "done"})

    def read(self) -> EvidenceFile:
        return EvidenceFile(self.path, _data(self.file), self.claims, self.file.sequential)


def check_evidence(path: Path, flag: str = "SWEEP") -> Checked:
    """An evidence file, checked (size before reading, JSON with no bare NaN, its fields, its claims, its sweep
    file's sha256); a DataError naming the file and `flag` when it is not one."""
    try:
        if (size := path.stat().st_size) > MAX_BYTES:
            raise DataError(f"{path}: {flag}: {size} bytes; an evidence file is kilobytes (at most {MAX_BYTES})")
        raw = json.loads(path.read_text(), parse_constant=_not_json)
        f = _File.model_validate(raw)
        if f.format != FORMAT:
            raise ValueError(f"format {f.format!r}, not {FORMAT!r}")
        claims = check_unique(TypeAdapter(list[Claim]).validate_python(f.claims))
    except FileNotFoundError:
        raise DataError(f"{path}: {flag}: no such file") from None
    except OSError as exc:
        raise DataError(f"{path}: {flag}: cannot be read ({exc.strerror or type(exc).__name__})") from None
    except (ValueError, UnicodeDecodeError, ValidationError) as exc:  # ConfigError is a ValueError
        why = " ".join(str(exc).split())[:300]
        raise DataError(f"{path}: {flag}: not a harness evidence file ({why})") from None
    if hashlib.sha256(f.sweep_file.encode()).hexdigest() != f.sweep_file_sha256:
        raise DataError(f"{path}: {flag}: its sweep file does not match its sha256 (edited by hand?)")
    return Checked(path, f, claims)


def read_evidence(path: Path, flag: str = "SWEEP") -> EvidenceFile:
    """An evidence file, checked (`check_evidence`) and read back as data."""
    return check_evidence(path, flag).read()


def _data(f: _File) -> SweepData:
    import pandas as pd

    from harness.runs.reader import Sweep
    from harness.runs.sweep_data import KeptSweepData, RunMachine

    runs = pd.DataFrame(
        [
            {
                "run_id": r.run_id,
                "run_name": r.run_name,
                JOB_ID_TAG: r.job_id,
                "arm": r.arm,
                "arm_id": None,
                "seed": r.seed,
                "status": _STATUS.get(r.state, "RUNNING"),
                "state": r.state,
                "failure_reason": r.failure_reason,
                "steps": math.nan if r.steps is None else r.steps,
                "last_step": r.last_step,
                "last_logged": math.nan,
                "start_time": math.nan if r.start_time is None else r.start_time,
                "end_time": math.nan if r.end_time is None else r.end_time,
                GIT_COMMIT_TAG: r.git_commit,
                "artifact_uri": None,
                "machine": RunMachine(**r.machine) if r.machine else RunMachine(),
                **r.settings,
            }
            for r in f.runs
        ],
        columns=["run_id", "run_name", JOB_ID_TAG, "arm", "arm_id", "seed", "status", "state", "failure_reason",
                 "steps", "last_step", "last_logged", "start_time", "end_time", GIT_COMMIT_TAG, "artifact_uri",
                 "machine", *f.varying],
    )  # fmt: skip
    kept = pd.DataFrame(
        [{k: math.nan if v is None else v for k, v in r.values.items()} for r in f.runs],
        index=pd.Index([r.run_id for r in f.runs], name="run_id"),
        columns=f.points,
        dtype=float,
    )
    first = runs.drop_duplicates("arm").set_index("arm")["run_id"]  # whose params `claims` reads an arm's from
    settings = {first[a]: s for a, s in f.arm_settings.items() if a in first.index}
    params = pd.DataFrame.from_dict(settings, orient="index") if settings else pd.DataFrame()
    sweep = Sweep(f"{f.experiment}/{f.sweep_id}", f.sweep, f.experiment, f.sweep_id, None, runs)
    metrics = pd.DataFrame(columns=["run_id", "key", "step", "value"])
    return KeptSweepData(sweep, runs, metrics, f.varying, f.arms, params, f.cumulative, f.planned, [], kept=kept)


_STATUS = {"done": "FINISHED", "failed": "FAILED", "pruned": "KILLED", "duplicate": "FINISHED", "retried": "FAILED"}


def _number(x) -> float | None:
    """A finite number, else None (NaN, ±inf, None, a missing value of pandas)."""
    try:
        x = float(x)
    except (TypeError, ValueError):
        return None
    return x if math.isfinite(x) else None


def _text(x) -> str | None:
    return None if x is None or (isinstance(x, float) and math.isnan(x)) else str(x)


def _not_json(constant: str) -> float:
    raise ValueError(f"{constant} is not JSON (an evidence file writes null where it has no number)")
