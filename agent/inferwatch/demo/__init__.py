"""`inferwatch demo`: simulated workers and GPUs, the agent, Prometheus and load on one machine."""
