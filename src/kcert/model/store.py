"""Recordings shared by every module row of a ``certify_model`` run (docs/model.md, "Cost").

Without it, each row's recording probe runs ref's model up to its own module for every replicate: with
~30 modules in two directions that is most of a run's avoidable cost. With it, the first row to meet a
draw of the model inputs runs ref's whole forward once, with a pre-hook on every selected module that
keeps the module's first call's inputs (flattened with its :class:`~kcert.model.record.Layout`, cloned
at hook time so later in-place ops of the forward cannot alter them), and saves all of them to one file
of a temporary directory named by a digest of the drawn inputs; the other rows load that file. Memory
holds one draw's recordings (the last file loaded), never R of them; the files are bounded by
:func:`budget` and removed when the run ends.

A module the forward did not reach, whose flatten raised (another structure than the layout's), or a
draw met once the budget is spent, is recorded as without the store (``record`` up to that module), so
errors and results are those of a run without it. The store sits outside the recording probes (a
module-level registry in record.py), so a checkpoint's fingerprint of a case does not depend on it.
"""

from __future__ import annotations

import hashlib
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

import torch
from torch import nn

from .record import SHARED, Recorder

MAX_BYTES = 4 * 2**30  # never more than this on disk ...
DISK_FRACTION = 0.25  # ... nor more than this share of the temporary directory's free space


def budget(directory: str) -> int:
    """The bytes the store may write in ``directory``: min(:data:`MAX_BYTES`, a share of its free space)."""
    return int(min(MAX_BYTES, DISK_FRACTION * shutil.disk_usage(directory).free))


def inputs_digest(kwargs: Mapping[str, torch.Tensor]) -> str:
    """A digest of drawn model inputs: names, dtypes, shapes and bytes."""
    h = hashlib.sha1()
    for name in sorted(kwargs):
        value = kwargs[name]
        h.update(name.encode())
        if isinstance(value, torch.Tensor):
            data = value.detach().to("cpu").contiguous().reshape(-1)
            h.update(f"{value.dtype}{tuple(value.shape)}".encode())
            h.update((data.view(torch.uint8) if data.numel() else data.to(torch.uint8)).numpy().tobytes())
        else:
            h.update(repr(value).encode())
    return h.hexdigest()


class RecordingStore:
    """The shared recordings of one run (a context manager: registered on entry, files removed on exit)."""

    def __init__(self, model: nn.Module, extra: Mapping, recorders: Sequence[Recorder]):
        self.model, self.extra = model, dict(extra)
        self.recorders = list(recorders)
        self.index = {id(r): i for i, r in enumerate(self.recorders)}
        self.directory: Path | None = None
        self.budget = 0
        self.written = 0
        self.files: dict[str, Path] = {}  # digest -> file
        self.current: tuple[str, dict[int, dict[str, torch.Tensor]]] | None = None  # the last draw held
        self.forwards = self.loads = 0  # for benchmarks and tests

    def __enter__(self) -> RecordingStore:
        self.directory = Path(tempfile.mkdtemp(prefix="kcert-recordings-"))
        self.budget = budget(str(self.directory))
        SHARED.append(self)
        return self

    def __exit__(self, *exc) -> None:
        if SHARED and SHARED[-1] is self:
            SHARED.pop()
        self.current = None
        if self.directory is not None:
            shutil.rmtree(self.directory, ignore_errors=True)

    def leaves(self, recorder: Recorder, kwargs: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor] | None:
        """The recorded tensor leaves of ``recorder``'s module on ``kwargs``; None: record it without the store."""
        i = self.index.get(id(recorder))
        if i is None:
            return None
        key = inputs_digest(kwargs)
        if self.current is None or self.current[0] != key:
            if key in self.files:
                held = self._load(key)
            elif self.written >= self.budget:
                return None  # full: a miss records as without the store (one module, not the whole model)
            else:
                held = self._record(key, kwargs)
            self.current = (key, held)
        return self.current[1].get(i)

    def _record(self, key: str, kwargs: Mapping[str, torch.Tensor]) -> dict[int, dict[str, torch.Tensor]]:
        held: dict[int, dict[str, torch.Tensor]] = {}
        originals: dict[tuple, tuple[torch.Tensor, torch.Tensor]] = {}  # kept alive: no address is reused

        def clone(t: torch.Tensor) -> torch.Tensor:
            # one clone per tensor as it is at this moment (q, k and v projections receive the same one)
            try:
                version = t._version
            except RuntimeError:  # an inference tensor keeps no version counter: cloned on its own
                version = len(originals)
            ident = (t.data_ptr(), t.dtype, tuple(t.shape), t.stride(), t.device, version)
            if ident not in originals:
                originals[ident] = (t, t.clone())
            return originals[ident][1]

        def hook_for(i: int, recorder: Recorder):
            def hook(mod, args, kw):
                if i in held or i in failed:
                    return
                try:
                    values = recorder.layout.flatten((args, kw), recorder.where)
                except Exception:  # noqa: BLE001 - recorded without the store, which raises it as before
                    failed.add(i)
                    return
                held[i] = {n: clone(v) for n, v in values.items()}
            return hook

        failed: set[int] = set()
        handles = [r.module.register_forward_pre_hook(hook_for(i, r), with_kwargs=True)
                   for i, r in enumerate(self.recorders)]
        try:
            with torch.no_grad():
                self.model(**kwargs, **self.extra)
        except Exception:  # noqa: BLE001 - modules reached before it keep their inputs; the others record alone
            pass
        finally:
            for h in handles:
                h.remove()
        originals.clear()
        self.forwards += 1
        flat = {f"{i}.{n}": v for i, values in held.items() for n, v in values.items()}
        size = sum(s.nbytes() for s in {v.untyped_storage().data_ptr(): v.untyped_storage()
                                        for v in flat.values()}.values())
        if self.written + size <= self.budget:
            path = self.directory / f"{key}.pt"
            torch.save(flat, path)
            self.files[key] = path
        self.written += size  # past the budget: no file, and the next miss records alone
        return held

    def _load(self, key: str) -> dict[int, dict[str, torch.Tensor]]:
        flat = torch.load(self.files[key], map_location="cpu", weights_only=True, mmap=True)
        self.loads += 1
        held: dict[int, dict[str, torch.Tensor]] = {}
        for k, v in flat.items():
            i, name = k.split(".", 1)
            held.setdefault(int(i), {})[name] = v
        return held


__all__ = ["RecordingStore", "budget", "inputs_digest"]
