"""The config layer: run configs, sweep and tune files, claims. Typed, validated, YAML in; no torch, MLflow or Ray."""
