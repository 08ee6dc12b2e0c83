"""The engine layer: a run trained end to end, and the executors, resume and tuning that run a sweep's jobs."""
