"""Layering: every module has a place in the layer order of docs/design.md and imports only from its own
layer or those below (:data:`LAYERS`); no import circle between modules; statistics never import torch;
report/ never imports a gate; gates/ read only result types from execution/; only the Runner sets its
own run state; no source module over 800 lines; every error class kcert raises lives in kcert.errors.

The source rules are checked on the source text (the AST), not by importing, so that a violation is
found however the modules happen to be imported."""

import ast
import json
import subprocess
import sys
from pathlib import Path

import kcert

SRC = Path(kcert.__file__).resolve().parent  # src/kcert
MAX_LINES = 800

# What gates/ may import from execution/: the modules of result types (what a run measured), never
# the code that runs kernels. Update this list when a new result-type module is added to execution/.
GATE_EXECUTION_ALLOWED = ("kcert.execution.accumulator", "kcert.execution.evidence")

# The Runner's run state: only execution/runner.py sets it (Runner.load_state, Runner.merge, ...).
RUNNER_STATE = ("oracle_unavailable", "oracle_checked", "layouts", "prefix", "folded", "early")


def _modules():
    """(dotted name, path, AST) of every source module of the package."""
    for path in sorted(SRC.rglob("*.py")):
        parts = path.relative_to(SRC.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        yield name, path, ast.parse(path.read_text(), str(path))


def _imports(name: str, path: Path, tree: ast.AST):
    """(line, imported module) for every import of a module, relative ones resolved; ``from P import X``
    names P.X where X is a module or package of the source tree, else P."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                parent = ".".join(base + ([node.module] if node.module else []))
            else:
                parent = node.module
            for alias in node.names:
                candidate = SRC.parent.joinpath(*f"{parent}.{alias.name}".split("."))
                is_module = candidate.with_suffix(".py").exists() or (candidate / "__init__.py").exists()
                yield node.lineno, f"{parent}.{alias.name}" if is_module else parent


def _in(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


# The layer order of docs/design.md, bottom first: a module may import its own layer and those below it,
# never one above. A new module must be placed here (test_every_module_has_a_layer).
LAYERS = (
    ("base", ("kcert.errors", "kcert.stats")),
    ("words", ("kcert.version", "kcert.verdict", "kcert.diagnostics", "kcert.numbers", "kcert.parameters",
               "kcert.reproduce", "kcert.settings", "kcert.results", "kcert.certificate", "kcert.case",
               "kcert.rounding")),
    ("catalog", ("kcert.catalog",)),
    ("execution", ("kcert.execution",)),
    ("cases", ("kcert.backward", "kcert.casefile", "kcert.demo")),
    ("gates", ("kcert.gates",)),
    ("core", ("kcert.core",)),
    ("checks", ("kcert.checks",)),
    ("certification", ("kcert.certification", "kcert.settling")),
    ("report", ("kcert.report",)),
    ("sources", ("kcert.adapters", "kcert.step", "kcert.training", "kcert.model")),
    ("controls", ("kcert.controls",)),
    ("calibration", ("kcert.calibration",)),
    ("entry points", ("kcert.assertions", "kcert.commands")),
    ("front ends", ("kcert.pytest_plugin", "kcert.cli", "kcert.__main__", "kcert")),
)


def _layer(module: str) -> int | None:
    """The index in :data:`LAYERS` of the longest package that holds ``module`` (None: unplaced); the entry
    "kcert" is the package's ``__init__`` alone."""
    placed = [(len(p), i) for i, (_, packages) in enumerate(LAYERS) for p in packages
              if module == p or (p != "kcert" and module.startswith(p + "."))]
    return max(placed)[1] if placed else None


def _kcert_imports(name, path, tree):
    return sorted({(line, m) for line, m in _imports(name, path, tree) if _in(m, "kcert")})


def test_every_module_has_a_layer():
    unplaced = [name for name, _, _ in _modules() if _layer(name) is None]
    assert not unplaced, f"modules without a layer (add them to LAYERS and docs/design.md): {unplaced}"


def test_no_import_against_the_layer_order():
    # kcert/__init__.py names the public API lazily (any layer): it is the top of the order
    found = [f"{path.relative_to(SRC)}:{line} ({LAYERS[_layer(name)][0]}) imports {module} "
             f"({LAYERS[_layer(module)][0]})"
             for name, path, tree in _modules() if name != "kcert"
             for line, module in _kcert_imports(name, path, tree)
             if _layer(module) is not None and _layer(name) is not None and _layer(module) > _layer(name)]
    assert not found, "imports against the layer order of docs/design.md:\n" + "\n".join(found)


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index, low, on, stack, found, counter = {}, {}, set(), [], [], 0
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter = counter + 1
        stack.append(root), on.add(root)
        while work:
            v, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter = counter + 1
                    stack.append(child), on.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on:
                    low[v] = min(low[v], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                component = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    component.append(w)
                    if w == v:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_no_import_circle():
    # every import counts, a deferred one inside a function too: a circle ties modules together whatever
    # the moment it is resolved (kcert/__init__.py's lazy names excepted: it is the public door)
    modules = {name: (path, tree) for name, path, tree in _modules()}
    graph = {name: {m for _, m in _kcert_imports(name, path, tree) if m in modules and m != name}
             for name, (path, tree) in modules.items() if name != "kcert"}
    circles = _circles(graph)
    assert not circles, "import circles:\n" + "\n".join(" <-> ".join(c) for c in circles)


def test_the_circle_finder_finds_circles():
    assert _circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _circles({"a": {"b"}, "b": set()}) == []


def test_stats_and_verdicts_import_without_torch():
    # every module of kcert.stats, found by walking the package (a new statistics module is covered
    # without editing this test)
    code = (
        "import importlib, json, pkgutil, sys\n"
        "import kcert, kcert.stats, kcert.verdict, kcert.diagnostics\n"
        "names = [m.name for m in pkgutil.walk_packages(kcert.stats.__path__, 'kcert.stats.')]\n"
        "for name in names:\n"
        "    importlib.import_module(name)\n"
        "assert 'torch' not in sys.modules, 'torch was imported'\n"
        "print(json.dumps(names))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    names = json.loads(done.stdout.strip().splitlines()[-1])
    assert {"kcert.stats.ulp", "kcert.stats.bias", "kcert.stats.moments"} <= set(names), names


def test_public_contract_names_exist():
    for name in ("Case", "Gaussian", "Fixed", "Axes", "Labels", "certify", "Verdict", "Certificate"):
        assert getattr(kcert, name) is not None
    assert {v.value for v in kcert.Verdict} == {"PASS", "WARN", "FAIL", "SKIPPED"}
    assert issubclass(kcert.ParameterError, kcert.KcertError) and issubclass(kcert.ParameterError, ValueError)


def test_no_source_module_over_800_lines():
    long = {str(path.relative_to(SRC)): n for _, path, _ in _modules()
            if (n := len(path.read_text().splitlines())) > MAX_LINES}
    assert not long, f"source modules over {MAX_LINES} lines: {long}"


def test_report_imports_no_gate():
    found = [f"{path.relative_to(SRC)}:{line} imports {module}"
             for name, path, tree in _modules() if _in(name, "kcert.report")
             for line, module in sorted(set(_imports(name, path, tree))) if _in(module, "kcert.gates")]
    assert not found, "report/ must not import a gate:\n" + "\n".join(found)


# Functions report/ may take from stats/: they put a finding into words and compute nothing.
REPORT_STATS_WORDS = {("kcert.stats.aggregation", "short_sentence")}


def _stats_names(name: str, path: Path, tree: ast.AST):
    """(line, module, name) for every name a module takes from kcert.stats (name None: the module itself)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from ((node.lineno, a.name, None) for a in node.names if _in(a.name, "kcert.stats"))
        elif isinstance(node, ast.ImportFrom):
            parent = node.module
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                parent = ".".join(base + ([node.module] if node.module else []))
            for alias in node.names:
                if _in(f"{parent}.{alias.name}", "kcert.stats"):
                    module = SRC.parent.joinpath(*f"{parent}.{alias.name}".split("."))
                    if module.with_suffix(".py").exists() or (module / "__init__.py").exists():
                        yield node.lineno, f"{parent}.{alias.name}", None
                    elif _in(parent, "kcert.stats"):
                        yield node.lineno, parent, alias.name


def test_report_computes_no_statistic():
    """report/ takes only constants (codes, labels) from kcert.stats, never a module or a function: a
    number a renderer shows beyond a stored field is a method of its result type (issue 24, item 6)."""
    found = [f"{path.relative_to(SRC)}:{line} takes {module}" + (f".{what}" if what else "")
             for name, path, tree in _modules() if _in(name, "kcert.report")
             for line, module, what in sorted(set(_stats_names(name, path, tree)), key=str)
             if what is None or not (what.isupper() or (module, what) in REPORT_STATS_WORDS)]
    assert not found, "report/ must compute no statistic (give the result type a method):\n" + "\n".join(found)


def test_gates_import_only_result_types_from_execution():
    found = [f"{path.relative_to(SRC)}:{line} imports {module}"
             for name, path, tree in _modules() if _in(name, "kcert.gates")
             for line, module in sorted(set(_imports(name, path, tree)))
             if _in(module, "kcert.execution") and not any(_in(module, ok) for ok in GATE_EXECUTION_ALLOWED)]
    assert not found, (f"gates/ may import from execution/ only {GATE_EXECUTION_ALLOWED}:\n" + "\n".join(found))


def _scoped(tree: ast.AST, scope: ast.AST | None = None):
    """(innermost enclosing function or the module, node) for every node of ``tree``."""
    scope = scope or tree
    for child in ast.iter_child_nodes(tree):
        yield scope, child
        inner = child if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)) else scope
        yield from _scoped(child, inner)


def _built_here(scope: ast.AST, name: str) -> bool:
    """Whether every binding of ``name`` in ``scope`` calls something other than Runner: a state object
    built right there (``state = RunState(...)``), not a Runner."""
    values = [node.value for s, node in _scoped(scope, scope) if s is scope and isinstance(node, ast.Assign)
              for target in node.targets if isinstance(target, ast.Name) and target.id == name]
    return bool(values) and all(isinstance(v, ast.Call) and not ast.unparse(v.func).endswith("Runner")
                                for v in values)


def _stores(node: ast.AST):
    """The attribute targets of an assignment (``x.a = ``, ``x.a += ``, ``x.a: T = ``), and the
    ``setattr(x, "a", ...)`` calls with a constant name."""
    if isinstance(node, ast.Assign):
        targets = node.targets
    elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
        targets = [node.target]
    elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "setattr"
          and len(node.args) >= 2 and isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str)):
        yield node.args[0], node.args[1].value
        return
    else:
        return
    for target in targets:
        for sub in ast.walk(target):
            if isinstance(sub, ast.Attribute) and isinstance(sub.ctx, ast.Store):
                yield sub.value, sub.attr


def test_no_runner_state_set_from_outside_the_runner():
    found = []
    for name, path, tree in _modules():
        if name == "kcert.execution.runner":
            continue
        for scope, node in _scoped(tree):
            for owner, attr in _stores(node):
                if attr not in RUNNER_STATE:
                    continue
                if isinstance(owner, ast.Name) and (owner.id == "self" or _built_here(scope, owner.id)):
                    continue  # an object's own attribute, or a state object built right here
                found.append(f"{path.relative_to(SRC)}:{node.lineno} {ast.unparse(owner)}.{attr} = ...")
    assert not found, "the Runner's state is set only inside execution/runner.py:\n" + "\n".join(found)


def test_error_classes_live_in_errors():
    errors = {node.name for node in ast.parse((SRC / "errors.py").read_text()).body if isinstance(node, ast.ClassDef)}
    found = [f"{path.relative_to(SRC)}:{node.lineno} class {node.name}"
             for name, path, tree in _modules() if name != "kcert.errors"
             for node in ast.walk(tree) if isinstance(node, ast.ClassDef)
             if any(ast.unparse(base).rpartition(".")[2] in errors for base in node.bases)]
    assert not found, "error classes belong in kcert/errors.py:\n" + "\n".join(found)


def test_a_module_outside_every_layer_is_unplaced():
    assert _layer("kcert.somewhere_new") is None and _layer("kcert.stats.bias") == 0
    assert _layer("kcert.results.bias") == 1 and _layer("kcert.cli") == len(LAYERS) - 1


def test_result_types_are_built_by_keyword():
    # a result type's fields are many and some share a type: a positional construction that swaps two of
    # them runs silently (issue 24: VarianceResult was built from 14 positional arguments)
    carried = ("bias", "bitwise", "observed", "paired", "rare", "tail", "tail_ratio", "training")  # results carry
    types = {node.name for name, _, tree in _modules()
             if _in(name, "kcert.results") or _in(name, "kcert.gates") or name in {f"kcert.stats.{m}" for m in carried}
             for node in ast.walk(tree) if isinstance(node, ast.ClassDef)
             and any("dataclass" in ast.unparse(d) for d in node.decorator_list)}
    found = [f"{path.relative_to(SRC)}:{node.lineno} {ast.unparse(node.func)}({len(node.args)} positional)"
             for _, path, tree in _modules() for node in ast.walk(tree)
             if isinstance(node, ast.Call) and node.args
             and (getattr(node.func, "id", None) or getattr(node.func, "attr", None)) in types]
    assert len(types) > 30 and {"VarianceResult", "BiasResult", "Certificate", "TailRatioInterval"} <= types
    assert not found, "result types built from positional arguments:\n" + "\n".join(found)
