"""Gates: wire accumulated execution results to the pure statistics and decide verdicts."""
