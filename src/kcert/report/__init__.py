"""Rendering: terminal summary, JSON, HTML. Renderers only read results; they never recompute."""
