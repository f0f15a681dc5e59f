"""Correctness and benchmarking that cannot be fooled: problems, isolated workers, comparison, timing, guards."""
