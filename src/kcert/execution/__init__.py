"""Kernel execution: running the callables under test, including real-mode evaluation."""
