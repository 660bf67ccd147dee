"""Matching modules across frameworks: prod's qualified names renamed to ref's before they are matched
(docs/model.md, "Another framework's names"). A port of a Hugging Face model to another codebase names its
modules its own way (``layers.0.attention.wq`` for ``model.layers.0.self_attn.q_proj``); without a rename no
module matches and only the end-to-end row compares the two.

A module of the port whose forward takes other arguments (``forward(x, freqs)`` where Hugging Face's attention
receives ``hidden_states=``, ``position_embeddings=(cos, sin)``, ``attention_mask=``) cannot run on ref's recorded
inputs as they are: its rows are SKIPPED, unless an *adapter* makes prod's arguments from ref's
(:func:`adapters`: ``{r"model\\.layers\\.\\d+\\.self_attn": fn}``, ``fn(args, kwargs) -> (args, kwargs)``).

Rules are regular expressions matched against prod's *whole* qualified name (``re.fullmatch``: a rule for
``norm`` does not rename ``layers.0.attention_norm``), tried in order, the first that matches giving the name
(``\\1`` and named groups expand); a name no rule matches is kept. Or a function ``prod name -> ref name`` (None
keeps the name). Parameters follow their module: prod's ``layers.0.attention.wq.weight`` is compared with ref's
``model.layers.0.self_attn.q_proj.weight`` when ``layers.0.attention.wq`` is renamed to that module.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from ..errors import CaseError

RenameSpec = Mapping[str, str] | Iterable[tuple[str, str]] | Iterable[str] | Callable[[str], str | None]


@dataclass(frozen=True, eq=False)
class Rename:
    """prod's qualified names -> ref's: ordered ``(pattern, replacement)`` rules, or a function."""

    rules: tuple[tuple[re.Pattern, str], ...] = ()
    function: Callable[[str], str | None] | None = None

    @classmethod
    def build(cls, spec: RenameSpec | Rename | None) -> Rename | None:
        """A Rename from a dict ``{pattern: replacement}``, pairs, ``"PATTERN=REPLACEMENT"`` strings (the command
        line's ``--rename``), or a function; None stays None."""
        if spec is None or isinstance(spec, Rename):
            return spec
        if callable(spec):
            return cls(function=spec)
        if isinstance(spec, str):
            spec = [spec]
        if not isinstance(spec, Iterable):
            raise CaseError(f"rename: must be a dict of pattern -> name, 'PATTERN=NAME' strings or a function, got "
                            f"{type(spec).__name__}")
        items = list(spec.items()) if isinstance(spec, Mapping) else list(spec)
        if not items:
            return None
        rules = []
        for item in items:
            if isinstance(item, str):
                pattern, sep, replacement = item.partition("=")
                if not sep or not pattern:
                    raise CaseError(f"rename: {item!r} is not PATTERN=REPLACEMENT (a regular expression on prod's "
                                    "whole module name, then ref's name)")
            elif isinstance(item, tuple) and len(item) == 2 and all(isinstance(x, str) for x in item):
                pattern, replacement = item
            else:
                raise CaseError(f"rename: a rule must be a (pattern, replacement) pair of strings or "
                                f"'PATTERN=REPLACEMENT', got {item!r}")
            try:
                rules.append((re.compile(pattern), replacement))
            except re.error as exc:
                raise CaseError(f"rename: pattern {pattern!r} is not a regular expression: {exc}") from exc
        return cls(rules=tuple(rules))

    def describe(self) -> list[str]:
        if self.function is not None:
            return [f"function {getattr(self.function, '__qualname__', repr(self.function))}"]
        return [f"{p.pattern}={r}" for p, r in self.rules]

    def name(self, prod_name: str, used: set[int] | None = None) -> str:
        """ref's name for prod's module ``prod_name`` (itself when nothing renames it)."""
        if self.function is not None:
            new = self.function(prod_name)
            if new is not None and not isinstance(new, str):
                raise CaseError(f"rename: the function returned {type(new).__name__} for {prod_name!r}, not a "
                                "module name (a str, or None to keep the name)")
            return prod_name if new is None else new
        for i, (pattern, replacement) in enumerate(self.rules):
            found = pattern.fullmatch(prod_name)
            if found is None:
                continue
            try:
                new = found.expand(replacement)
            except (re.error, IndexError) as exc:
                raise CaseError(f"rename: rule {pattern.pattern}={replacement} cannot rename {prod_name!r}: "
                                f"{exc}") from exc
            if used is not None:
                used.add(i)
            return new
        return prod_name

    def modules(self, prod: Mapping[str, object]) -> tuple[dict[str, object], dict[str, str]]:
        """prod's modules keyed by their renamed names, and ``renamed name -> prod's own`` for those that changed.
        Two modules given one name, or a rule that renames nothing, is an error that names them."""
        out: dict[str, object] = {}
        origin: dict[str, str] = {}
        used: set[int] = set()
        for old, module in prod.items():
            new = self.name(old, used)
            if not new:
                raise CaseError(f"rename: prod's module {old!r} is renamed to an empty name")
            if new in out:
                raise CaseError(f"rename: prod's modules {origin.get(new, new)!r} and {old!r} are both named {new!r}; "
                                "each of ref's modules can match one of prod's")
            out[new] = module
            origin[new] = old
        unused = [f"{p.pattern}={r}" for i, (p, r) in enumerate(self.rules) if i not in used]
        if unused:
            raise CaseError(f"rename: {len(unused)} rule(s) rename no module of prod: {', '.join(unused)} (a pattern "
                            "must match prod's whole qualified name)")
        return out, {new: old for new, old in origin.items() if new != old}

    def parameter(self, prod_name: str) -> str:
        """ref's name for prod's parameter (or buffer) ``prod_name``: its module renamed, its own name kept."""
        owner, dot, leaf = prod_name.rpartition(".")
        if not dot:
            return prod_name
        return f"{self.name(owner)}.{leaf}"


def adapters(adapt: Mapping[str, Callable] | None, names: Iterable[str]) -> dict[str, Callable]:
    """Each of ref's modules (``names``) that an ``adapt`` pattern gives an adapter, ``fn(args, kwargs) -> (args,
    kwargs)``: what ref's module receives made into what prod's module takes. Patterns are regular expressions on
    ref's whole names, as ``rename``'s are (``model\\.layers\\.\\d+\\.self_attn``; fnmatch's ``*`` would reach
    every module under a layer too); the first that matches gives the adapter. A pattern that matches none of ref's
    modules is an error (a typo would leave rows SKIPPED)."""
    if adapt is None:
        return {}
    if not isinstance(adapt, Mapping) or not all(isinstance(k, str) and k and callable(v) for k, v in adapt.items()):
        raise CaseError("adapt: must be a dict of module-name pattern (a regular expression on ref's whole names) -> "
                        f"function (args, kwargs) -> (args, kwargs), got {adapt!r}")
    names = list(names)
    found: dict[str, Callable] = {}
    for pattern, fn in adapt.items():
        try:
            compiled = re.compile(pattern)
        except re.error as exc:
            raise CaseError(f"adapt: pattern {pattern!r} is not a regular expression: {exc}") from exc
        hits = [n for n in names if compiled.fullmatch(n)]
        if not hits:
            raise CaseError(f"adapt: pattern {pattern!r} matches none of ref's modules (a pattern must match a whole "
                            "qualified name)")
        for n in hits:
            found.setdefault(n, fn)
    return found
