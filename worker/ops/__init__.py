"""Operator tools behind the CLI: verify, rebuild, export, requeue, doctor, evaluate."""
