"""Executors: run a sweep's jobs in parallel here (local processes) or on a Ray cluster."""
