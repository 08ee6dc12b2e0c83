"""What harness says when it stops: each expected error is one line, `harness: <kind>: <message>`, and an exit code.

- `ConfigError` (exit 2): a usage or config error, found before any store or job exists: the file, key or flag.
- `DataError` (exit 3): the store cannot answer what was asked: no such sweep in it, a metric that is not finite
  in a run (the message names the run and the metric); or it is not a store harness opens (`harness.runs.probe`).
- `SweepRunning` (exit 1): another live process runs this sweep on this store.
- `Terminated` (exit 143): SIGTERM, raised in the main thread so that a sweep stops as on Ctrl-C.
Anything else is a bug in harness (exit 1, with its traceback), or a run that failed (exit 1, marked FAILED in
MLflow with its traceback) for the commands that train."""

from __future__ import annotations


class HarnessError(Exception):
    """An error harness expects; `kind` prefixes its line, `exit_code` is the command's."""

    kind = ""
    exit_code = 1

    def line(self, command: str = "") -> str:
        head = f"harness {command}" if command else "harness"
        return f"{head}: {self.kind + ': ' if self.kind else ''}{' '.join(str(self).split())}"


class ConfigError(HarnessError, ValueError):
    """A config, file or flag that cannot be read or does not validate; the message is one line."""

    kind = "config error"
    exit_code = 2


class DataError(HarnessError):
    """The runs in the store cannot answer the question; the message names the run, metric or sweep."""

    kind = "data error"
    exit_code = 3


class SweepRunning(HarnessError, RuntimeError):
    """Another live process is running this sweep on this store."""


class Terminated(KeyboardInterrupt):
    """SIGTERM (a process manager, `kill PID`), raised in the main thread so that a sweep stops as on Ctrl-C:
    its workers stopped, their runs ended FAILED, a non-zero exit (143)."""

    exit_code = 128 + 15
