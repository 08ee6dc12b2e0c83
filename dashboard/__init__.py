"""Streamlit dashboard over the MLflow store: the papers' bias analyses redrawn on a sweep's runs."""
