"""Offline benchmarks of the agents' search, answered from tables of figures measured on a GPU."""
