"""The runs layer: harness's MLflow layout (`layout`), the writer a run logs through, the reader of a sweep's runs."""
