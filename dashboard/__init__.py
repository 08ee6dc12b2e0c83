"""Streamlit dashboard over the MLflow store (see issue 5)."""
