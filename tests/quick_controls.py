"""What a quick control (at most 256 replicates) may show in place of a PASS."""


def passes_or_needs_replicates(cert) -> bool:
    """PASS, or WARN only because the variance gate holds a PASS back until more replicates: every other
    gate PASSes and every variance output either PASSes or has U under the line with the bound with one
    shape per side above it (``shape_difference_not_excluded``, docs/method.md, Gate 3). A quick control
    runs at most 256 replicates, where a correct pair whose errors reach past the slack rarely clears
    that bound; its full run (up to 4x its declared replicates) is where it must PASS."""
    from kcert.verdict import Verdict

    if cert.verdict is Verdict.PASS:
        return True
    others = [v for g, v in cert.gates.items() if g != "variance"]
    held = [v for v in cert.variance if v.verdict is not Verdict.PASS]
    return (all(v is Verdict.PASS for v in others) and cert.verdict is Verdict.WARN and all(
        v.upper_bound is not None and v.upper_bound <= v.thresholds.warn
        and any(d.code == "shape_difference_not_excluded" for d in v.diagnostics) for v in held))
