"""KernelBench problems as files: reading one, finding its size globals, executing it at chosen sizes,
counting one call's elements, shrinking the sizes to a budget, and the sizes of the shape sweep
(docs/kernelbench.md, "Shapes and the budget"). :mod:`kcert.adapters.kernelbench` builds the cases."""

from __future__ import annotations

import ast
import copy
import hashlib
import importlib.util
import sys
import types
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from ..checks.shapes import non_power_of_two
from ..errors import KernelBenchError

SIZE_MIN = 8  # module-level ints at least this large are size globals (the sweep varies them)
SHRINK_FLOOR = 16  # the shrink never halves a size below this: smaller ones are group, head and tile counts
DEFAULT_BUDGET = 1 << 16  # elements of one call's inputs and outputs (docs/kernelbench.md: ~1 minute on 2 cores)
SWEEP_LENGTHS = (1, 65, 129, 257)


# --- loading -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SizeGlobal:
    """One module-level int literal of the problem: ``name`` ("dim", or "input_shape[0]") and where it
    is in the module's AST (statement index, element index or None)."""

    name: str
    value: int
    statement: int
    element: int | None = None


@dataclass(frozen=True, eq=False)
class Problem:
    path: Path
    source: str
    tree: ast.Module
    sizes: tuple[SizeGlobal, ...]

    @property
    def stem(self) -> str:
        """The problem's name: its file's stem, or its folder's name for a file called problem.py."""
        return self.path.resolve().parent.name if self.path.stem == "problem" else self.path.stem

    def original(self) -> dict[str, int]:
        return {s.name: s.value for s in self.sizes}


def _int_literal(node) -> int | None:
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value
    return None


def _size_globals(tree: ast.Module) -> tuple[SizeGlobal, ...]:
    found = []
    for i, stmt in enumerate(tree.body):
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1:
            target, value = stmt.targets[0], stmt.value
        elif isinstance(stmt, ast.AnnAssign) and stmt.value is not None:
            target, value = stmt.target, stmt.value
        else:
            continue
        if isinstance(target, ast.Name):
            v = _int_literal(value)
            if v is not None and v >= SIZE_MIN:
                found.append(SizeGlobal(target.id, v, i))
            elif isinstance(value, (ast.Tuple, ast.List)):
                for j, elt in enumerate(value.elts):
                    v = _int_literal(elt)
                    if v is not None and v >= SIZE_MIN:
                        found.append(SizeGlobal(f"{target.id}[{j}]", v, i, j))
        elif isinstance(target, ast.Tuple) and isinstance(value, ast.Tuple) and len(target.elts) == len(value.elts):
            for j, (t, elt) in enumerate(zip(target.elts, value.elts)):
                v = _int_literal(elt)
                if isinstance(t, ast.Name) and v is not None and v >= SIZE_MIN:
                    found.append(SizeGlobal(t.id, v, i, j))
    names = [s.name for s in found]
    # a name assigned twice: only its last assignment counts (the one the module ends with)
    return tuple(s for k, s in enumerate(found) if s.name not in names[k + 1:])


def load_problem(path: str | Path) -> Problem:
    """Read and parse a KernelBench problem file (executed later, at the sizes chosen)."""
    path = Path(path)
    if not path.is_file():
        raise KernelBenchError(f"problem {str(path)!r} does not exist or is not a file")
    try:
        source = path.read_text()
        tree = ast.parse(source, filename=str(path))
    except (OSError, UnicodeDecodeError, SyntaxError) as exc:
        raise KernelBenchError(f"problem {str(path)!r} cannot be read as Python: {type(exc).__name__}: {exc}") from None
    names = {n.name for n in tree.body if isinstance(n, (ast.ClassDef, ast.FunctionDef))}
    missing = [n for n in ("Model", "get_inputs", "get_init_inputs") if n not in names]
    if missing:
        raise KernelBenchError(f"problem {str(path)!r} is not in KernelBench's format: it defines no "
                               f"{', '.join(missing)} at module level (it needs class Model(nn.Module), "
                               "get_inputs() and get_init_inputs())")
    return Problem(path, source, tree, _size_globals(tree))


def _module_name(kind: str, path: Path, extra: str = "") -> str:
    digest = hashlib.sha256(f"{path.resolve()}|{extra}".encode()).hexdigest()[:12]
    return f"kcert_kernelbench_{kind}_{digest}"


def exec_problem(problem: Problem, sizes: Mapping[str, int]) -> types.ModuleType:
    """The problem module executed with its size globals set to ``sizes`` (line numbers unchanged)."""
    tree = copy.deepcopy(problem.tree)
    for s in problem.sizes:
        value = sizes.get(s.name, s.value)
        stmt = tree.body[s.statement]
        node = stmt.value
        if s.element is not None:
            node = node.elts[s.element]
        node.value = int(value)
    key = ",".join(f"{k}={v}" for k, v in sorted(sizes.items()))
    name = _module_name("problem", problem.path, key)
    module = types.ModuleType(name)
    module.__file__ = str(problem.path)
    sys.modules[name] = module
    sys.path.insert(0, str(problem.path.resolve().parent))
    try:
        exec(compile(tree, str(problem.path), "exec"), module.__dict__)  # noqa: S102 - the user's problem file
    except KeyboardInterrupt:
        raise
    except BaseException as exc:  # noqa: BLE001 - any failure is the problem file's
        raise KernelBenchError(f"problem {str(problem.path)!r} does not execute at sizes {dict(sizes) or 'as given'}: "
                               f"{type(exc).__name__}: {exc}") from exc
    finally:
        sys.path.remove(str(problem.path.resolve().parent))
    return module


def load_candidate(path: str | Path) -> type:
    """Import a candidate file and return its ``ModelNew`` class."""
    path = Path(path)
    if not path.is_file():
        raise KernelBenchError(f"candidate {str(path)!r} does not exist or is not a file")
    name = _module_name("candidate", path)
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise KernelBenchError(f"candidate {str(path)!r} cannot be imported as Python (is it a .py file?)")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    sys.path.insert(0, str(path.resolve().parent))
    try:
        spec.loader.exec_module(module)
    except KeyboardInterrupt:
        raise
    except BaseException as exc:  # noqa: BLE001 - any failure to import is the candidate's
        hint = ""
        text = f"{type(exc).__name__}: {exc}"
        if "cuda" in text.lower() or "nvcc" in text.lower():
            hint = " (a CUDA extension needs a GPU and its toolchain: run with --device cuda there)"
        raise KernelBenchError(f"candidate {str(path)!r} does not import: {text}{hint}") from exc
    finally:
        sys.path.remove(str(path.resolve().parent))
    new = getattr(module, "ModelNew", None)
    if not (isinstance(new, type) and issubclass(new, nn.Module)):
        raise KernelBenchError(f"candidate {str(path)!r} defines no ModelNew(nn.Module) at module level")
    return new


# --- seeded building blocks --------------------------------------------------------------------------


class SeededGlobal:
    """Run code that draws from torch's global generator with it seeded, restoring it afterwards."""

    def __init__(self, value: int):
        self.value = value
        self.fork = None

    def __enter__(self):
        self.fork = torch.random.fork_rng(devices=[])
        self.fork.__enter__()
        torch.default_generator.manual_seed(self.value)  # the CPU generator only: torch.manual_seed costs ~1 ms

    def __exit__(self, *exc):
        return self.fork.__exit__(*exc)


def as_list(value, what: str, where: str) -> list:
    if isinstance(value, (list, tuple)):
        return list(value)
    raise KernelBenchError(f"{where}: {what}() must return a list or tuple, got {type(value).__name__}")


def _tensors(values) -> list[torch.Tensor]:
    if isinstance(values, torch.Tensor):
        return [values]
    if isinstance(values, (list, tuple)):
        return [t for v in values for t in _tensors(v)]
    return []


def count_elements(problem: Problem, sizes: Mapping[str, int]) -> int:
    """Elements of one call's inputs and outputs at ``sizes``, counted on the meta device (nothing is
    allocated); when the module does not run there, its inputs' count twice (an output the size of
    the inputs)."""
    module = exec_problem(problem, sizes)
    where = f"problem {str(problem.path)!r}"
    with torch.device("meta"):
        try:
            inputs = as_list(module.get_inputs(), "get_inputs", where)
        except KernelBenchError:
            raise
        except Exception:  # noqa: BLE001 - get_inputs does something meta cannot: count real tensors
            with SeededGlobal(0):
                with torch.device("cpu"):
                    inputs = as_list(module.get_inputs(), "get_inputs", where)
        n_in = sum(t.numel() for t in _tensors(inputs))
        try:
            model = module.Model(*as_list(module.get_init_inputs(), "get_init_inputs", where))
            out = model(*[t.to("meta") if isinstance(t, torch.Tensor) else t for t in inputs])
            n_out = sum(t.numel() for t in _tensors(out))
        except Exception:  # noqa: BLE001 - an op without a meta kernel
            n_out = n_in
    return n_in + n_out


@dataclass(frozen=True)
class Sizing:
    """The sizes a build uses: ``sizes`` (every size global), what the problem says (``original``),
    the elements of one call, and whether they fit the budget."""

    sizes: dict[str, int]
    original: dict[str, int]
    elements: int
    budget: int | None
    fits: bool = True

    @property
    def shrunk(self) -> dict[str, tuple[int, int]]:
        return {k: (self.original[k], v) for k, v in self.sizes.items() if v != self.original[k]}

    def text(self) -> str:
        if not self.sizes:
            return "the problem declares no size global"
        shown = ", ".join(f"{k} = {v}" for k, v in self.sizes.items())
        if not self.shrunk:
            return f"sizes as the problem gives them ({shown}; {self.elements:,} elements per call)"
        changes = ", ".join(f"{k} {a} -> {b}" for k, (a, b) in self.shrunk.items())
        text = (f"sizes shrunk to fit {self.budget:,} elements per call: {changes} ({self.elements:,} elements per "
                f"call; --no-shrink keeps the problem's own)")
        if not self.fits:
            text += "; still over the budget: the rest of the problem's size is not in its size globals"
        return text


def fit_sizes(problem: Problem, budget: int | None, pinned: Mapping[str, int] | None = None) -> Sizing:
    """Halve the largest size global (ties: the one declared last; never below :data:`SHRINK_FLOOR`, never
    a ``pinned`` one) until one call holds at most ``budget`` elements."""
    original = problem.original()
    sizes = {**original, **(pinned or {})}
    count = count_elements(problem, sizes)
    if budget is None:
        return Sizing(sizes, original, count, None)
    frozen = set(pinned or ())
    order = {k: i for i, k in enumerate(sizes)}
    while count > budget:
        open_ = {k: v for k, v in sizes.items() if k not in frozen and v > SHRINK_FLOOR}
        if not open_:
            return Sizing(sizes, original, count, budget, fits=False)
        key = max(open_, key=lambda k: (open_[k], order[k]))
        trial = {**sizes, key: max(SHRINK_FLOOR, sizes[key] // 2)}
        try:
            new = count_elements(problem, trial)
        except KernelBenchError:
            new = count
        if new >= count:  # this global does not size the call (or halving it breaks it): keep it
            frozen.add(key)
            continue
        sizes, count = trial, new
    return Sizing(sizes, original, count, budget)



# --- the shape sweep -------------------------------------------------------------------------------------


def _non_power_of_two(problem: Problem, current: dict[str, int]) -> tuple[str, dict[str, int]] | None:
    """Every size global to a non-power of two; when the problem does not build that way (a group count
    that no longer divides its channels), only those above :data:`SHRINK_FLOOR`."""
    for keys in (list(current), [k for k, v in current.items() if v > SHRINK_FLOOR]):
        npot = {**current, **{k: non_power_of_two(current[k]) for k in keys}}
        if npot == current:
            continue
        label = "non-power-of-two sizes (" + ", ".join(f"{k} {current[k]} -> {v}" for k, v in npot.items()
                                                        if v != current[k]) + ")"
        try:
            module = exec_problem(problem, npot)
            with SeededGlobal(0), torch.device("meta"):
                module.Model(*as_list(module.get_init_inputs(), "get_init_inputs", "sweep"))
        except Exception:  # noqa: BLE001 - the next, narrower assignment
            continue
        return label, npot
    return None


def sweep_sizes(problem: Problem, sizing: Sizing) -> list[tuple[str, dict[str, int]]]:
    """The sweep's size assignments: (label, sizes), each fitted to the budget around what it pins."""
    current = sizing.sizes
    out: list[tuple[str, dict[str, int]]] = []
    found = _non_power_of_two(problem, current) if current else None
    if found is not None:
        out.append(found)
    for k, v in current.items():
        for length in SWEEP_LENGTHS:
            if length == v:
                continue
            what = "size 1" if length == 1 else f"past block {length - 1}"
            out.append((f"{k} = {length} ({what})", {k: length}))
    return out
