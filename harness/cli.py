"""The `harness` command."""

from __future__ import annotations

import argparse
import math
import sys
import traceback
import types
from collections.abc import Callable, Collection
from typing import Any, Literal, TypeVar, Union, get_args, get_origin

from pydantic import BaseModel, ValidationError

from harness.config.errors import ConfigError, DataError, HarnessError, Terminated
from harness.config.evaluation import EvalSettings
from harness.engine.preflight import check_host, check_store, check_writable
from harness.runs.layout import default_tracking_uri, tracking_uri_key
from harness.runs.probe import OPTUNA, probe_store

S = TypeVar("S", bound=BaseModel)

ALPHA = 0.05
"""Significance level of `harness claims` and `harness report` (their `--alpha` default) and of the verdicts a
fixed-seed `harness sweep` ends with."""


def _run(args: argparse.Namespace) -> int:
    from harness.config.run_config import load_run_config

    cfg = load_run_config(args.config, args.set)  # every config error surfaces here, before anything starts
    check_host(cfg, args.config)
    explicit = args.tracking_uri or cfg.tracking.uri
    check_store(
        default_tracking_uri(cfg.tracking.results_dir, explicit),
        tracking_uri_key(explicit, "--tracking-uri" if args.tracking_uri else "tracking.uri"),
        args.config,
    )
    from harness.engine.training import run_training

    result = run_training(cfg, tracking_uri=args.tracking_uri, progress=not args.quiet)
    print(f"run {result.run_id} FINISHED in experiment '{cfg.tracking.experiment}' at {result.tracking_uri}")
    return 0


def _sweep(args: argparse.Namespace) -> int:
    from harness.config.plan import plan_sweep

    if not args.until_decided and (args.max_seeds, args.batch, args.alpha) != (None, None, None):
        raise ConfigError(f"{args.file}: --max-seeds, --batch and --alpha need --until-decided")
    if args.until_decided and args.no_claims:
        raise ConfigError(f"{args.file}: --no-claims: an --until-decided sweep's answer is its claims")
    if args.until_decided:
        return _sweep_until_decided(args)
    plan = plan_sweep(
        args.file,
        profile=args.profile,
        overrides=args.set,  # every error before any job
        max_jobs=args.max_jobs,
        seeds=args.seeds,
    )
    uri = _sweep_uri(args, plan)
    if args.dry_run:
        _print_jobs(plan, uri)
        return 0
    executor = _executor(args, plan)
    from harness.engine.sweep import run_sweep

    result = run_sweep(plan, executor=executor, tracking_uri=uri)
    for outcome in result.failed:
        print(f"harness: job {outcome.job_id} FAILED: {outcome.reason}", file=sys.stderr)
    print(
        f"sweep {plan.name}: {len(result.finished)} finished, {len(result.skipped)} already done, "
        f"{len(result.failed)} failed (experiment '{plan.experiment}' at {uri})"
    )
    code = _sweep_claims(args, plan, uri) if plan.settings.claims and not args.no_claims else 0
    return code or (0 if result.ok else 1)  # a contradicted claim is a finding: `harness claims` exits 1 on it


def _sweep_claims(args: argparse.Namespace, plan, uri: str) -> int:
    """After the jobs: the file's claims judged and printed as `harness claims FILE` does, then where to look next.
    Returns 0, or the exit status of an error in judging or printing them (its line; a bug's traceback too): the runs
    are in the store whatever happens here, but a sweep whose verdicts were not shown does not end as if they were."""
    from harness.runs.reader import find_sweep

    code = 0
    try:
        sweep = find_sweep(uri, plan.sweep_id, plan.experiment)
        if sweep is None:
            raise LookupError(f"sweep {plan.sweep_id} is not in {uri} after its jobs ran")
        data, claims, record = _from_store(uri, sweep, list(plan.settings.claims))
        _print_claims(data, claims, ALPHA, record, unfinished=False)  # the jobs listed failures
    except HarnessError as exc:
        print(exc.line("sweep"), file=sys.stderr)
        code = exc.exit_code
    except Exception as exc:  # noqa: BLE001 (the runs are in the store whatever happens here)
        traceback.print_exc()
        print(
            f"harness sweep: the claims could not be judged (a bug in harness; the traceback is above): "
            f"{type(exc).__name__}: {' '.join(str(exc).split())}",
            file=sys.stderr,
        )
        code = 1
    print(_next_commands(args, uri))
    return code


def _next_commands(args: argparse.Namespace, uri: str) -> str:
    """The line a sweep ends with: the dashboard and the report on its store (`--tracking-uri` written out unless
    it is the store those commands read by default) and its profile."""
    import shlex

    store = "" if uri == default_tracking_uri("results") else f" --tracking-uri {shlex.quote(uri)}"
    profile = f" --profile {shlex.quote(args.profile)}" if args.profile else ""
    return (
        f"figures: harness dashboard{store}; all the statistics: harness report {shlex.quote(args.file)}"
        f"{profile}{store}"
    )


def _sweep_uri(args: argparse.Namespace, plan) -> str:
    """The store the sweep's jobs log to, after checking (for a real run here) that this host can run them."""
    uri = default_tracking_uri(plan.jobs[0].config.tracking.results_dir, args.tracking_uri)
    if not args.dry_run and args.address is None:  # the jobs run on this host: can they?
        for job in {j.arm_id: j for j in plan.jobs}.values():
            check_host(job.config, f"{plan.source}: arm '{job.arm}'")
    key = tracking_uri_key(args.tracking_uri, "--tracking-uri")
    if args.dry_run:  # the job table reads the store's statuses
        probe_store(uri, key, str(plan.source))
    else:  # the driver writes the sweep's parent run there too
        check_store(uri, key, str(plan.source))
    return uri


def _executor(args: argparse.Namespace, plan):
    """The executor of a sweep's jobs: the flags, else the file's `executor:` settings; locally, as many jobs at
    once as the cores hold at the jobs' thread count."""
    import os

    from harness.engine.executor_factory import make_executor

    settings = plan.settings.executor
    threads = max(j.config.train.threads or 1 for j in plan.jobs)
    local = args.workers or settings.workers or max(1, (os.cpu_count() or 1) // threads)
    return make_executor(
        args.executor,
        workers=local if args.executor == "local" else args.workers,
        timeout_s=settings.timeout_s if args.timeout is None else args.timeout,
        retries=settings.retries if args.retries is None else args.retries,
        address=args.address,
        cpus_per_job=args.cpus_per_job,
        gpus_per_job=args.gpus_per_job,
    )


def _sweep_until_decided(args: argparse.Namespace) -> int:
    from harness.config.plan import BATCH, MAX_SEEDS, plan_until_decided

    batch = args.batch if args.batch is not None else BATCH
    plan, first = plan_until_decided(  # every config error before the statistics are imported (seconds)
        args.file,
        max_seeds=args.max_seeds if args.max_seeds is not None else MAX_SEEDS,
        batch=batch,
        profile=args.profile,
        overrides=args.set,
        seeds=args.seeds,
        max_jobs=args.max_jobs,
    )
    from harness import until_decided as ud

    s = ud.prepare(plan, first, batch=batch, alpha=args.alpha if args.alpha is not None else ud.ALPHA)
    uri = _sweep_uri(args, s.plan)
    if args.dry_run:
        for table in ud.planning_table(s, uri):
            _console().print(table)
        return 0
    outcome = ud.run(s, executor=_executor(args, s.plan), tracking_uri=uri)
    for failed in outcome.failed:
        print(f"harness: job {failed.job_id} FAILED: {failed.reason}", file=sys.stderr)
    used = {arm: n for r in outcome.rounds for arm, n in r.seeds.items()}
    print(
        f"sweep {s.plan.name}: {len(outcome.rounds)} round(s), {sum(used.values())} runs planned "
        f"(seeds per arm: {', '.join(f'{a}: {n}' for a, n in used.items())}); experiment '{s.plan.experiment}' at {uri}"
    )
    for claim, track in zip(s.claims, outcome.tracks):
        print(f"{claim.id}: {ud.state(track)}")
    print(_next_commands(args, uri))
    if outcome.failed:
        return 1
    return 1 if any(t.verdict == "contradicted" for t in outcome.tracks) else 0


def _console():
    """A console that prints every text as it is: Rich markup (`[/]`, `[link=...]`) and emoji codes in a name or a
    claim are text, not instructions; style comes only from `rich.text.Text` objects."""
    from rich.console import Console

    return Console(width=200, markup=False, emoji=False)


def _print_jobs(plan, uri: str) -> None:
    """The job table: arm, the switches that vary, seed, job id, and status if already in MLflow."""
    from rich.table import Table

    from harness.runs.layout import store_exists

    statuses = {}
    if store_exists(uri):  # no store, no MLflow import: a dry run of a new sweep answers at once
        from harness.engine.resume import job_runs

        statuses = job_runs(uri, plan.experiment, plan.sweep_id)
    keys = list(dict.fromkeys(k for job in plan.jobs for k in job.varying))
    table = Table(title=f"sweep {plan.name} ({plan.sweep_id}): {len(plan.jobs)} jobs, experiment '{plan.experiment}'")
    for column in ["arm", *[k.rsplit(".", 1)[-1] for k in keys], "seed", "job id", "status"]:
        table.add_column(column)
    for job in plan.jobs:
        runs = statuses.get(job.job_id, [])
        status = "FINISHED" if "FINISHED" in runs else (runs[-1] if runs else "-")
        table.add_row(job.arm, *[str(job.varying.get(k, "")) for k in keys], str(job.seed), job.job_id, status)
    _console().print(table)


def _dashboard(args: argparse.Namespace) -> int:
    import os
    import subprocess

    uri = default_tracking_uri("results", args.tracking_uri)
    probe_store(uri, tracking_uri_key(args.tracking_uri, "--tracking-uri"))  # before a server shows its errors
    from dashboard.launch import dashboard_command

    cmd, env = dashboard_command(uri, args.host, args.port, args.optuna_storage)
    print(f"harness dashboard: http://{args.host}:{args.port} reading {uri}", file=sys.stderr, flush=True)
    if os.name == "posix":  # Streamlit takes over this pid: a SIGTERM or SIGINT to harness stops the server itself
        os.execve(cmd[0], cmd, env)
    return subprocess.call(cmd, env=env)  # Windows has no exec that keeps the pid


def _report(args: argparse.Namespace) -> int:
    from pathlib import Path

    from harness.config.at import DEFAULT_AT, At

    at = At.parse(args.at or DEFAULT_AT)  # argument errors before anything is read
    if args.out:
        check_writable(args.out, "--out")  # before the store is read
    data, claims, record = _judged(args)
    from report.build import build
    from report.render import safe_name, write

    out = Path(args.out) if args.out else Path("results") / "reports" / safe_name(data.sweep.name)
    if not args.out:
        check_writable(str(out), "--out")
    report = build(
        data,
        metrics=args.metric or None,
        at=at,
        baseline=args.baseline,
        test=args.test,
        alpha=args.alpha,
        seed=args.seed,
        claims=claims,
        sequential=record,
    )
    for v in report.verdicts:
        print(v.summary())
    written = write(report, out, args.format)
    for line in report.findings:
        print(line)
    if not report.header.finished:
        _print_unfinished(data.jobs)
    for line in report.warnings:
        print(f"warning: {line}", file=sys.stderr)
    print(f"harness report: wrote {', '.join(str(p) for p in written if p.suffix != '.svg')}", file=sys.stderr)
    return 0


def _claims(args: argparse.Namespace) -> int:
    data, claims, record = _judged(args)
    if not claims:
        raise ConfigError(f"{args.sweep}: claims: the sweep declares none (add a `claims:` list to its file)")
    return 1 if "contradicted" in _print_claims(data, claims, args.alpha, record) else 0


def _judged(args: argparse.Namespace):
    """What `harness claims` and `harness report` judge: (SweepData, claims, sequential record or None), from an
    evidence file (`harness evidence`) or from the store (warnings printed)."""
    from pathlib import Path

    from harness.analysis.sequential import Record
    from harness.runs.evidence_file import is_evidence_file, read_evidence

    if is_evidence_file(args.sweep):
        kept = read_evidence(Path(args.sweep))
        return (
            kept.data,
            kept.claims,
            _replayed(kept.data, kept.claims, Record.from_json(kept.record) if kept.record else None),
        )
    from report.select import resolve

    uri, sweep, claims, notes = resolve(args.sweep, args.tracking_uri, args.profile)  # probes the store first
    for line in notes:
        print(f"warning: {line}", file=sys.stderr)
    return _from_store(uri, sweep, claims)


def _from_store(uri: str, sweep, claims: list):
    """(SweepData, claims, its `--until-decided` record replayed or None) of `sweep` in the store at `uri`."""
    from harness.analysis.sequential import stored_record
    from harness.runs.reader import reader_for
    from harness.runs.sweep_data import read_sweep

    data = read_sweep(reader_for(uri), sweep)
    return data, claims, _replayed(data, claims, stored_record(sweep))


def _replayed(data, claims: list, record):
    """An `--until-decided` sweep's looks taken again by today's rules on the same rounds (None stays None)."""
    if record is None:
        return None
    from harness.analysis.replay import replay

    return replay(data, claims, record)


def _evidence(args: argparse.Namespace) -> int:
    from pathlib import Path

    from report.select import resolve

    check_writable(args.out, "--out")
    uri, sweep, claims, notes = resolve(args.sweep, args.tracking_uri, args.profile)
    for line in notes:
        print(f"warning: {line}", file=sys.stderr)
    if not claims:
        raise ConfigError(f"{args.sweep}: claims: the sweep declares none, so there is no evidence to keep")
    from harness.runs.evidence_file import write_evidence
    from harness.runs.reader import reader_for, sequential_record, sweep_file_text
    from harness.runs.sweep_data import read_sweep

    path = Path(args.sweep)
    text = path.read_text() if path.is_file() else sweep_file_text(sweep)
    data = read_sweep(reader_for(uri), sweep)
    size = write_evidence(data, claims, text, Path(args.out), sequential_record(sweep))
    print(
        f"harness evidence: {args.out}: {len(data.runs)} runs, {len(claims)} claims, {size / 1024:.1f} KiB "
        f"(`harness claims {args.out}` judges it)"
    )
    return 0


def _ledger(args: argparse.Namespace) -> int:
    from pathlib import Path

    from harness.runs.evidence_file import read_evidence

    root, folder = Path(args.root), Path(args.evidence)
    paths = sorted(folder.glob("*.json")) if folder.is_dir() else []
    if not paths:
        raise DataError(f"{folder}: --evidence: no evidence file (*.json) there (`harness evidence` writes them)")
    files = [read_evidence(p, "--evidence") for p in paths]
    from harness.analysis.ledger import build
    from report import ledger as docs

    ledger = build(files)
    texts = {p: p.read_text() for p in docs.documents(root) if p.is_file()}
    not_kept = docs.count_not_kept(*texts.values())
    wanted = {}
    for p, t in texts.items():
        try:
            wanted[p] = docs.fill(t, ledger, not_kept)
        except ValueError as e:
            raise DataError(f"{p}: {e}") from None
    wanted[root / "docs" / "ledger.md"] = docs.markdown(ledger, not_kept)
    wanted[root / "docs" / "ledger.json"] = docs.to_json(ledger, not_kept)
    stale = [p for p, t in wanted.items() if not p.is_file() or p.read_text() != t]
    print(docs.totals_text(ledger, not_kept).strip())
    if args.check:
        for p in stale:
            print(f"harness ledger: {p} differs from what the evidence gives (run `harness ledger`)", file=sys.stderr)
        return 1 if stale else 0
    for p in stale:
        p.write_text(wanted[p])
        print(f"harness ledger: wrote {p}", file=sys.stderr)
    return 0


def _print_claims(data, claims: list, alpha: float, record=None, *, unfinished: bool = True) -> list[str]:
    """`claims` judged on the finished runs of `data` (a `harness.runs.sweep_data.SweepData`) and printed: the
    sequential verdicts of an `--until-decided` sweep (`record`), then the fixed-design table. Returns the verdicts
    of record (none when no run has finished; `unfinished` then lists each failed or missing job)."""
    from harness.analysis.claims import judge

    name = data.sweep.name
    jobs = data.jobs
    if not jobs.finished:
        n = len(claims)
        print(
            f"{name}: no run of this sweep has finished ({jobs.line()}), so none of its {n} "
            f"claim{'s' if n != 1 else ''} can be judged"
        )
        if unfinished:
            _print_unfinished(jobs)
        return []
    if jobs.finished < jobs.total:
        print(f"{name}: {jobs.line()}; the claims are judged on the finished runs")
    verdicts = judge(data, claims, alpha=alpha)
    if record:
        _print_sequential(name, record)
        print("fixed-design analysis of all the runs (ignores the looks; for reference):")
    _print_verdicts(name, verdicts, alpha)
    for line in data.warnings:
        print(f"warning: {line}", file=sys.stderr)
    return [t.verdict for t in record.tracks] if record else [v.verdict for v in verdicts]


def _print_unfinished(jobs) -> None:
    """A sweep with no finished run (`jobs`, its `harness.runs.sweep_data.Jobs`): each failed run with its reason,
    each job never started."""
    from harness.runs.sweep_data import job_label

    for failed in jobs.failed_runs:
        print(f"  failed: {failed.line()}")
    for arm, seed in jobs.missing_jobs:
        print(f"  never started: {job_label(arm, seed)}")


def _print_sequential(name: str, record) -> None:
    """An `--until-decided` sweep's verdicts of record (`record`, a harness.analysis.sequential.Record) and each
    claim's path."""
    from rich.table import Table

    from harness.analysis.verdict_table import sequential_rows, sequential_verdicts

    d = record.design
    for title, rows in (
        (
            f"{name}: claims decided sequentially ({record.procedure}; looks at {d.first} seeds per arm, "
            f"+{d.batch} per round, up to {d.max_seeds}; α = {d.alpha})",
            sequential_verdicts(record),
        ),
        ("each claim's path", sequential_rows(record)),
    ):
        table = Table(title=title, title_justify="left")
        for col in rows[0] if rows else ():
            table.add_column(col, overflow="fold")
        for row in rows:
            table.add_row(*row.values())
        _console().print(table)


def _print_verdicts(name: str, verdicts: list, alpha: float) -> None:
    from rich.table import Table
    from rich.text import Text

    from harness.analysis.verdict_table import competing_rows, verdict_rows

    table = Table(title=f"{name}: claims (α = {alpha}, Holm across {len(verdicts)})", title_justify="left")
    shown = ("claim", "verdict", "paper", "metric @ at", "contrast", "claimed", "effect", "p", "p (Holm)", "n")
    for col in (*shown, "failed runs"):
        table.add_column(col, overflow="fold")
    style = {"reproduced": "green", "contradicted": "red", "inconclusive": "yellow"}
    for v, row in zip(verdicts, verdict_rows(verdicts)):
        cells = [row[k] for k in shown]
        cells[1] = Text.assemble((v.verdict_text(), style[v.verdict]), f" ({v.reason})" if v.reason else "")
        cells[6] = f"{row['effect']} {row['95% CI']}"
        table.add_row(*cells, row["failed runs"])
    _console().print(table)
    for v in verdicts:
        print(v.summary())
        if v.claim.quote:
            print(f"  {v.claim.source()}: “{v.claim.quote}”")
    rows = competing_rows(verdicts)
    if rows:
        table = Table(title="Competing claims: which paper holds on these runs", title_justify="left")
        shown = ("paper", "claim", "verdict", "effect [95% CI]", "p (Holm)", "statement")
        for col in shown:
            table.add_column(col, overflow="fold")
        question = None
        for row in rows:
            if row["question"] != question:
                question = row["question"]
                table.add_section()
                table.add_row(Text(question, style="bold"), *[""] * (len(shown) - 1))
            table.add_row(*(row[k] for k in shown))
        _console().print(table)


def _eval(args: argparse.Namespace) -> int:
    s = _from_options(EvalSettings, args)  # a bad value is a config error before torch is imported
    check_store(
        default_tracking_uri("results", args.tracking_uri),
        tracking_uri_key(args.tracking_uri, "--tracking-uri"),
        "eval",
    )
    from harness.engine.evaluation import print_table, run_eval

    result = run_eval(s, tracking_uri=args.tracking_uri, experiment=args.experiment)
    print_table(result, s.benchmarks, s.k)
    return 0


def _tune(args: argparse.Namespace) -> int:
    from harness.config.tune import load_tune

    plan = load_tune(args.file, args.set)  # every config error before Optuna, MLflow or torch is imported
    if args.address is None:
        check_host(plan.trial_config({}), f"{args.file}: base")
    uri = default_tracking_uri(plan.results_dir, args.tracking_uri)
    check_store(uri, tracking_uri_key(args.tracking_uri, "--tracking-uri"), args.file)
    storage_key = "--storage" if args.storage else ("storage" if plan.settings.storage else "tracking.results_dir")
    check_store(plan.storage_url(args.storage), storage_key, args.file, OPTUNA)
    from harness.engine.tune import run_tune

    result = run_tune(
        args.file,
        overrides=args.set,
        trials=args.trials,
        workers=args.workers,
        storage_url=args.storage,
        tracking_uri=args.tracking_uri,
        executor=args.executor,
        address=args.address,
        cpus_per_job=args.cpus_per_job,
        gpus_per_job=args.gpus_per_job,
        timeout_s=args.timeout,
        retries=args.retries or 0,
    )
    import optuna

    study = optuna.load_study(study_name=result.study, storage=result.storage)
    best = study.best_trial if any(t.value is not None for t in study.trials) else None
    print(
        f"study {result.study}: {result.finished} finished trials in {result.storage}"
        + (f"; best {best.value:.4g} (trial {best.number}: {best.params})" if best else "")
    )
    return 0


class _Parser(argparse.ArgumentParser):
    """argparse with one-line usage errors (exit 2), like config errors."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: usage error: {' '.join(message.split())} (see {self.prog} --help)\n")


def _at_least(minimum: int):
    """argparse type: an integer >= `minimum`."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"{value} is below {minimum}")
        return value

    return parse


def _seed_list(text: str) -> list[int]:
    """argparse type: seeds as `100-104`, `0,3,7` or a mix (`0-2,9`), without repeats; at most
    `MAX_SEEDS_CEILING` of them, counted before they are listed."""
    from harness.config.plan import MAX_SEEDS_CEILING

    ranges = []
    for part in text.split(","):
        first, dash, last = part.strip().partition("-")
        try:
            low, high = int(first), int(last if dash else first)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{part.strip()!r} is not a seed or a range like 100-104") from None
        if low > high:
            raise argparse.ArgumentTypeError(f"{part.strip()!r}: the range runs backwards")
        ranges.append(range(low, high + 1))
    if sum(r.stop - r.start for r in ranges) > MAX_SEEDS_CEILING:  # not len(): it fails past 2^63
        raise argparse.ArgumentTypeError(f"more than {MAX_SEEDS_CEILING} seeds")
    seeds = [seed for r in ranges for seed in r]
    if len(set(seeds)) != len(seeds):
        raise argparse.ArgumentTypeError(f"{text!r}: seeds repeat")
    return seeds


def _finite(minimum: float, *, inclusive: bool, below: float = math.inf):
    """argparse type: a finite number above `minimum` (or equal to it, if `inclusive`) and below `below`."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        if not math.isfinite(value) or value < minimum or (value == minimum and not inclusive) or value >= below:
            bounds = f"{'>=' if inclusive else '>'} {minimum:g}" + (f" and < {below:g}" if below < math.inf else "")
            raise argparse.ArgumentTypeError(f"{text} is not a finite number {bounds}")
        return value

    return parse


def _names(text: str) -> list[str]:
    """argparse type: comma-separated names, e.g. `math500,aime24` (blanks dropped)."""
    return [name.strip() for name in text.split(",") if name.strip()]


def _one_of(
    known: Callable[[], Collection[str]], *, many: bool = False, default: str | None = None
) -> Callable[[str], Any]:
    """argparse type: one of the names `known()` returns, or with `many` a comma-separated list of them.
    `known` is called on use, so that building the parser imports none of the modules that define them; the
    option's `default`, which argparse parses too when the option is not given, is taken as it is, so that a command
    without the option imports none of them either (a refusal of its store stays fast)."""

    def parse(text: str) -> str | list[str]:
        if default is not None and text == default:
            return _names(text) if many else text
        names = known()
        if not many:
            if text not in names:
                raise argparse.ArgumentTypeError(f"{text!r} is not one of {', '.join(names)}")
            return text
        values = _names(text)
        bad = [v for v in values if v not in names]
        if bad or not values:
            raise argparse.ArgumentTypeError(f"{', '.join(bad) or 'nothing'} is not one of {', '.join(names)}")
        return values

    return parse


def _report_formats() -> Collection[str]:
    from report.render import FORMATS

    return FORMATS


def _report_tests() -> Collection[str]:
    from report.build import TESTS

    return TESTS


def _settings_options(parser: argparse.ArgumentParser, settings: type[BaseModel]) -> None:
    """A flag per field of `settings` (`top_p` → `--top-p`), declared by the field: its default, its docstring as
    help, a Literal's values as choices, a list as comma-separated names; a field without a default is a required
    flag. `_from_options` validates the values against the field's constraints."""
    for name, field in settings.model_fields.items():
        kind = field.annotation
        if get_origin(kind) in (Union, types.UnionType):  # X | None: the flag takes an X
            (kind,) = [k for k in get_args(kind) if k is not type(None)]
        options: dict[str, Any] = {"help": (field.description or "").rstrip(".")}
        if field.is_required():
            options["required"] = True
        else:
            options["default"] = default = field.get_default(call_default_factory=True)
            if default is not None:
                options["help"] += f" (default: {','.join(default) if isinstance(default, list) else default})"
        if get_origin(kind) is Literal:
            options["choices"] = get_args(kind)
        else:
            options["type"] = _names if get_origin(kind) is list else kind
        parser.add_argument(f"--{name.replace('_', '-')}", **options)


def _from_options(settings: type[S], args: argparse.Namespace) -> S:
    """`settings` from the flags `_settings_options` made; every bad value is a `ConfigError`, one line naming its
    flag."""
    try:
        return settings.model_validate({name: getattr(args, name) for name in settings.model_fields})
    except ValidationError as exc:
        problems = [
            f"--{str(e['loc'][0]).replace('_', '-')}: {e['msg'].removeprefix('Value error, ')}" for e in exc.errors()
        ]
        raise ConfigError("; ".join(problems)) from None


def _tracking_uri_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--tracking-uri",
        default=None,
        help="MLflow tracking URI (default: $MLFLOW_TRACKING_URI, else sqlite under results/)",
    )


def _alpha_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--alpha",
        type=_finite(0, inclusive=False, below=1),
        default=ALPHA,
        help=f"significance level (default {ALPHA:g})",
    )


def _profile_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--profile", default=None, help="the sweep file's profile the sweep ran with")


def _set_option(parser: argparse.ArgumentParser, what: str) -> None:
    """--set KEY=VALUE (repeatable): a run-config key overridden for `what`."""
    parser.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE", help=f"override a run-config key for {what}"
    )


def _executor_options(parser: argparse.ArgumentParser, what: str, file_default: bool) -> None:
    """Where `what` (jobs, trials) run, and their time limit and retries: the same flags for `harness sweep` and
    `harness tune`; unset, the sweep file's `executor:` settings apply (`file_default`), else none and 0."""
    fallback = "the file's executor settings, else " if file_default else ""
    parser.add_argument("--executor", choices=["local", "ray"], default="local", help=f"where {what} run")
    parser.add_argument("--address", default=None, help="Ray cluster address (default: a local Ray instance)")
    parser.add_argument(
        "--cpus-per-job",
        type=_finite(0, inclusive=False),
        default=1.0,
        help=f"Ray: CPUs declared per one of the {what}",
    )
    parser.add_argument(
        "--gpus-per-job", type=_finite(0, inclusive=True), default=0.0, help=f"Ray: GPUs declared per one of the {what}"
    )
    parser.add_argument(
        "--retries",
        type=_at_least(0),
        default=None,
        help=f"extra attempts for a failed one of the {what} (default: {fallback}0)",
    )
    parser.add_argument(
        "--timeout",
        type=_finite(0, inclusive=False),
        default=None,
        help=f"seconds before one of the {what} is killed and FAILED (default: {fallback}none)",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="harness", description="Seeded ablations of GRPO-family RL tricks, tracked in MLflow.")
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser(
        "run",
        help="train one run from a YAML config",
        description="Train one run from a YAML run config and log it to MLflow.",
    )
    run.add_argument("config", help="run config (YAML), e.g. ablations/toy_run.yaml")
    _set_option(run, "this run, e.g. --set objective.preset=dr_grpo --set seed=1 (repeatable)")
    _tracking_uri_option(run)
    run.add_argument("--quiet", action="store_true", help="no progress line")
    run.set_defaults(func=_run, failure="run failed")

    sweep = sub.add_parser(
        "sweep",
        help="run an ablation grid x seeds as resumable jobs",
        description="Expand a sweep file into jobs and run those not yet FINISHED in MLflow, "
        "in parallel here or on a Ray cluster. Rerunning resumes. A file with claims ends with their verdicts.",
    )
    sweep.add_argument("file", help="sweep file (YAML), e.g. ablations/dr_grpo_bias.yaml")
    sweep.add_argument("--dry-run", action="store_true", help="print the job table (with MLflow status) and exit")
    sweep.add_argument(
        "--no-claims",
        action="store_true",
        help="end after the jobs: without it, a file with claims ends with the table `harness claims FILE` prints "
        "(a contradicted claim leaves the exit code 0). --until-decided ends with its sequential verdicts instead",
    )
    sweep.add_argument("--profile", default=None, help="a named profile of the sweep file, e.g. paper")
    _set_option(sweep, "every job (repeatable)")
    _executor_options(sweep, "jobs", file_default=True)
    sweep.add_argument(
        "--workers",
        type=_at_least(1),
        default=None,
        help="jobs at once: locally (default: cores / threads per job), or at most this many Ray tasks in flight "
        "(default: as many as the cluster fits)",
    )
    sweep.add_argument(
        "--seeds",
        type=_seed_list,
        default=None,
        metavar="LIST",
        help="run these seeds instead of the file's, e.g. 100-104 for a replication with fresh "
        "seeds (give it its own --tracking-uri to keep it apart from the first run)",
    )
    sweep.add_argument(
        "--max-jobs",
        type=_at_least(1),
        default=None,
        help="refuse a sweep of more jobs than this (default 10000), before expanding it",
    )
    sweep.add_argument(
        "--until-decided",
        action="store_true",
        help="run the file's seeds, judge its claims, and add seeds to the arms an undecided claim reads until "
        "every claim is decided or --max-seeds is reached (group-sequential, error rate kept at --alpha)",
    )
    sweep.add_argument(
        "--max-seeds", type=_at_least(1), default=None, help="--until-decided: seeds per arm at most (default 20)"
    )
    sweep.add_argument(
        "--batch", type=_at_least(1), default=None, help="--until-decided: seeds added per arm per round (default 2)"
    )
    sweep.add_argument(
        "--alpha",
        type=_finite(0, inclusive=False, below=1),
        default=None,
        help="--until-decided: familywise error rate across looks and claims (default 0.05)",
    )
    _tracking_uri_option(sweep)
    sweep.set_defaults(func=_sweep, failure="sweep failed")

    dash = sub.add_parser(
        "dashboard",
        help="browse sweeps: the papers' bias analyses on your runs",
        description="Start the Streamlit dashboard on a tracking store (127.0.0.1 by default).",
    )
    dash.add_argument("--port", type=int, default=8501, help="port (default 8501)")
    dash.add_argument(
        "--host", default="127.0.0.1", help="address to bind (default 127.0.0.1; 0.0.0.0 exposes it to the network)"
    )
    _tracking_uri_option(dash)
    dash.add_argument(
        "--optuna-storage",
        default=None,
        help="Optuna storage of the Studies page (default sqlite:///results/optuna.db)",
    )
    dash.set_defaults(func=_dashboard, failure=None)

    rep = sub.add_parser(
        "report",
        help="across-seed statistics of a sweep (CIs, tests, effect sizes, Holm)",
        description="Compare a sweep's arms across seeds: per-arm statistics, each arm vs the "
        "baseline, main effects and interactions of a grid, power; Markdown, HTML, "
        "JSON and LaTeX.",
    )
    rep.add_argument(
        "sweep",
        help="the sweep file (e.g. ablations/dr_grpo_bias.yaml), a sweep's name or id, or an evidence file "
        "(`harness evidence`: its claims' metrics only)",
    )
    rep.add_argument(
        "--metric",
        action="append",
        default=[],
        help="metric to compare (repeatable; default: incorrect and correct length, accuracy, reward, entropy)",
    )
    rep.add_argument(
        "--at", default=None, help="a run's value: final, last-K (default last-10), first-K, step N, auc, best"
    )
    rep.add_argument("--baseline", default=None, help="baseline arm (its label or a unique part; default: first arm)")
    rep.add_argument(
        "--test",
        type=_one_of(_report_tests, default="welch"),
        default="welch",
        help="test for the p-values Holm corrects: welch (default), mannwhitney, permutation",
    )
    _alpha_option(rep)
    rep.add_argument("--seed", type=int, default=0, help="bootstrap seed (default 0)")
    rep.add_argument(
        "--format",
        type=_one_of(_report_formats, many=True, default="md,html,json,latex"),
        default="md,html,json,latex",
        help="comma-separated: md, html, json, latex (default: all four)",
    )
    rep.add_argument("--out", default=None, help="output folder (default results/reports/<sweep>)")
    _profile_option(rep)
    _tracking_uri_option(rep)
    rep.set_defaults(func=_report, failure=None)

    cl = sub.add_parser(
        "claims",
        help="judge a sweep's claims: reproduced, contradicted or inconclusive",
        description="Judge the claims of a sweep file (its `claims:` list) on the sweep's runs, "
        "with Holm across the claims. Exit code 1 when a claim is contradicted.",
    )
    cl.add_argument(
        "sweep",
        help="the sweep file (its claims are judged), a sweep's name or id (the claims it last ran with), or an "
        "evidence file (`harness evidence`: its claims, judged with no store)",
    )
    _alpha_option(cl)
    _profile_option(cl)
    _tracking_uri_option(cl)
    cl.set_defaults(func=_claims, failure=None)

    ek = sub.add_parser(
        "evidence",
        help="keep a sweep's evidence: a small JSON its claims can be judged from with no store",
        description="Write the values a sweep's claims are judged on (per run: job id, arm, seed, machine, base "
        "model, each claim's metrics at its windows) with the sweep file and its claims: kilobytes that "
        "`harness claims FILE`, `harness report FILE` and `python -m report.agreement` read in place of a store.",
    )
    ek.add_argument("sweep", help="the sweep file (its claims are kept) or a sweep's name or id")
    ek.add_argument("--out", "-o", required=True, help="the JSON to write, e.g. docs/evidence/dr_grpo_bias.json")
    _profile_option(ek)
    _tracking_uri_option(ek)
    ek.set_defaults(func=_evidence, failure=None)

    led = sub.add_parser(
        "ledger",
        help="every published verdict judged again from the evidence files: docs/ledger.md and the docs' tables",
        description="Judge every evidence file, count each claim on each seed set once, give Benjamini-Hochberg "
        "q-values across them all and each claim's replication, and write docs/ledger.md, docs/ledger.json and "
        "the verdict tables of README.md and docs/findings.md (their `<!-- ledger: ... -->` blocks).",
    )
    led.add_argument("--evidence", default="docs/evidence", help="the evidence files' folder (default docs/evidence)")
    led.add_argument("--root", default=".", help="the repository whose documents are written (default .)")
    led.add_argument("--check", action="store_true", help="write nothing; exit 1 when a document differs")
    led.set_defaults(func=_ledger, failure=None)

    ev = sub.add_parser(
        "eval",
        help="evaluate a model on math benchmarks (avg@k, pass@k, maj@k, lengths)",
        description="Sample k responses per problem, grade them with math-verify, log one MLflow "
        "run and print a table per benchmark.",
    )
    _settings_options(ev, EvalSettings)
    ev.add_argument("--experiment", default="eval", help="MLflow experiment (default eval)")
    _tracking_uri_option(ev)
    ev.set_defaults(func=_eval, failure="evaluation failed")

    tu = sub.add_parser(
        "tune",
        help="hyperparameter search with Optuna; every trial a tracked run",
        description="Run (or resume) an Optuna study from a tune file: each trial trains one "
        "run, logged to MLflow under the study's parent run.",
    )
    tu.add_argument("file", help="tune file (YAML), e.g. ablations/tune_dr_grpo_lr.yaml")
    tu.add_argument("--trials", type=_at_least(1), default=None, help="finished trials wanted (default: the file's)")
    tu.add_argument("--workers", type=_at_least(1), default=1, help="trials at once (default 1)")
    tu.add_argument("--storage", default=None, help="Optuna RDB URL (default sqlite:///results/optuna.db)")
    _executor_options(tu, "trials", file_default=False)
    _set_option(tu, "every trial (repeatable)")
    _tracking_uri_option(tu)
    tu.set_defaults(func=_tune, failure="tune failed")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except HarnessError as exc:  # one line and its exit code (harness.config.errors)
        print(exc.line(), file=sys.stderr)
        return exc.exit_code
    except Terminated:
        print("harness: terminated", file=sys.stderr)
        return Terminated.exit_code
    except KeyboardInterrupt:
        print("harness: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # noqa: BLE001 (one line where a run failed; the traceback where harness has a bug)
        what = f"{type(exc).__name__}: {' '.join(str(exc).split())}"
        if args.failure:  # a command that trains: the run is marked FAILED in MLflow, with its traceback
            print(f"harness: {args.failure}: {what}", file=sys.stderr)
        else:  # a command that only reads the store: nothing failed but harness itself
            traceback.print_exc()
            print(
                f"harness {args.command}: internal error (a bug in harness; the traceback is above): {what}",
                file=sys.stderr,
            )
        return 1


if __name__ == "__main__":
    sys.exit(main())
