"""Shared helpers for the tests: ports, waiting, and real Prometheus/Alertmanager processes."""
