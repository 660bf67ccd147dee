"""The shapes of a shape sweep (docs/kernelbench.md, "Shape sweep").

``Case(shapes=True)`` derives them from the probes. Sizes are mapped by value, the same for every axis
of every resizable probe (Gaussian, Uniform, Integers) that has that size, so shared dimensions stay in
step (``x``'s hidden axis and ``w``'s length); a variant that would change a size a Fixed or Custom probe
also has is left out (they cannot be redrawn at another size). The derived variants:

- **non-power-of-two**: every size n >= 4 becomes the odd number nearest below 3n/4 (64 -> 47,
  128 -> 95, 256 -> 191, 8 -> 5): no power of two, a ragged tail for every block size;
- **size-1 leading axis**: the first input's leading size (when it has two or more axes and that size
  is not also its row length) becomes 1;
- **row length past a block**: the first input's last size becomes 65, 129 and 257, just past the
  common block sizes 64, 128 and 256 (one variant each).

Explicit items of ``Case.shapes`` are used as given: ``{probe name: shape}`` dicts resize those probes,
``kcert.Case`` items are whole variants.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ..case import Case, Gaussian, Integers, Uniform

BLOCKS = (64, 128, 256)
_RESIZABLE = (Gaussian, Uniform, Integers)


@dataclass(frozen=True)
class ShapeVariant:
    label: str
    case: Case
    shapes: tuple[tuple[str, tuple[int, ...]], ...]


def non_power_of_two(n: int) -> int:
    """The odd number nearest below 3n/4 (at least 3) for n >= 4; n itself below 4."""
    if n < 4:
        return n
    m = (3 * n) // 4
    m = m - 1 if m % 2 == 0 else m
    return max(3, m)


def _probe_shapes(case: Case) -> dict[str, tuple[int, ...] | None]:
    out = {}
    for name, probe in {**case.inputs, **case.weights}.items():
        shape = getattr(probe, "shape", None)
        out[name] = tuple(shape) if shape is not None else None
    return out


def derived(case: Case) -> list[tuple[str, dict[str, tuple[int, ...]]]]:
    """The derived variants of ``case`` as (label, {probe name: new shape}) (see the module docstring)."""
    probes = {**case.inputs, **case.weights}
    resizable = {n: tuple(p.shape) for n, p in probes.items() if isinstance(p, _RESIZABLE)}
    pinned = {s for n, p in probes.items() if not isinstance(p, _RESIZABLE)
              for s in (getattr(p, "shape", None) or ())}
    first = next((tuple(p.shape) for n, p in case.inputs.items() if isinstance(p, _RESIZABLE) and len(p.shape)), None)
    if first is None:
        return []
    sizes = sorted({s for shape in resizable.values() for s in shape})
    maps: list[tuple[str, dict[int, int]]] = []
    npot = {n: non_power_of_two(n) for n in sizes if n >= 4}
    if npot:
        maps.append(("non-power-of-two sizes (" + ", ".join(f"{a} -> {b}" for a, b in npot.items()) + ")", npot))
    row = first[-1]
    if len(first) >= 2 and first[0] > 1 and first[0] != row:
        maps.append((f"size-1 leading axis ({first[0]} -> 1)", {first[0]: 1}))
    for block in BLOCKS:
        if row != block + 1:
            maps.append((f"row length {block + 1}, past block {block} ({row} -> {block + 1})", {row: block + 1}))
    out, seen = [], set()
    for label, size_map in maps:
        if any(s in pinned for s in size_map):
            continue
        shapes = {n: tuple(size_map.get(s, s) for s in shape) for n, shape in resizable.items()}
        changed = {n: s for n, s in shapes.items() if s != resizable[n]}
        key = tuple(sorted(changed.items()))
        if changed and key not in seen:
            seen.add(key)
            out.append((label, changed))
    return out


def resized(case: Case, label: str, shapes: dict[str, tuple[int, ...]]) -> Case:
    """``case`` with the named probes drawn at other shapes (and no sweep of its own)."""
    inputs = {n: replace(p, shape=shapes[n]) if n in shapes else p for n, p in case.inputs.items()}
    weights = {n: replace(p, shape=shapes[n]) if n in shapes else p for n, p in case.weights.items()}
    return replace(case, name=f"{case.name} @ {label}", inputs=inputs, weights=weights, shapes=None)


def variants(case: Case) -> list[ShapeVariant]:
    """The sweep's variants of ``case`` (empty when it declares no sweep)."""
    if case.shapes is None:
        return []
    items = derived(case) if case.shapes is True else list(case.shapes)
    out = []
    for item in items:
        if isinstance(item, Case):
            shapes = tuple((n, s) for n, s in _probe_shapes(item).items() if s is not None)
            out.append(ShapeVariant(item.description or item.name, replace(item, shapes=None), shapes))
            continue
        label, sizes = item if isinstance(item, tuple) else (None, item)
        if label is None:
            label = ", ".join(f"{n} {tuple(s)}" for n, s in sizes.items())
        variant = resized(case, label, dict(sizes))
        shapes = tuple((n, s) for n, s in _probe_shapes(variant).items() if s is not None)
        out.append(ShapeVariant(label, variant, shapes))
    return out
