"""harness: seeded ablation sweeps of GRPO-family tricks, tracked in MLflow."""

__version__ = "0.1.0"
