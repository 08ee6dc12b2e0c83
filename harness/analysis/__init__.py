"""The analysis layer: a run's value, across-seed statistics, claims judged as verdicts, the shared figures."""
