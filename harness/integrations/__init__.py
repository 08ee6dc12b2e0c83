"""harness on other trainers: their runs logged with harness's metrics and MLflow layout."""
