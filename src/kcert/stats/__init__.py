"""Pure statistics: numpy and scipy only, never torch (see tests/test_layering.py)."""
