"""The `harness` command."""

from __future__ import annotations

import argparse
import sys

from harness.config_io import ConfigError


def _run(args: argparse.Namespace) -> int:
    from harness.config import load_run_config
    from harness.run import run_training

    cfg = load_run_config(args.config, args.set)  # every config error surfaces here, before anything starts
    result = run_training(cfg, tracking_uri=args.tracking_uri, progress=not args.quiet)
    print(f"run {result.run_id} FINISHED in experiment '{cfg.tracking.experiment}' at {result.tracking_uri}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="harness", description="Seeded ablations of GRPO-family RL tricks, "
                                     "tracked in MLflow.")
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="train one run from a YAML config",
                         description="Train one run from a YAML run config and log it to MLflow.")
    run.add_argument("config", help="run config (YAML), e.g. ablations/toy_run.yaml")
    run.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                     help="override a config key, e.g. --set objective.preset=dr_grpo --set seed=1 (repeatable)")
    run.add_argument("--tracking-uri", default=None,
                     help="MLflow tracking URI (default: $MLFLOW_TRACKING_URI, else sqlite under results/)")
    run.add_argument("--quiet", action="store_true", help="no progress line")
    run.set_defaults(func=_run)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except ConfigError as exc:
        print(f"harness: config error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("harness: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # the run is already marked FAILED in MLflow with the full traceback
        print(f"harness: run failed: {type(exc).__name__}: {' '.join(str(exc).split())}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
