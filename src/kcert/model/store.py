"""Recordings shared by every module row of a ``certify_model`` run (docs/model.md, "Cost").

Without it, each row's recording probe runs ref's model up to its own module for every replicate: with
~30 modules in two directions that is most of a run's avoidable cost. With it, the first row to meet a
draw of the model inputs runs ref's whole forward once, with a pre-hook on every selected module that
keeps the module's first call's inputs (flattened with its :class:`~kcert.model.record.Layout`, cloned
at hook time so later in-place ops of the forward cannot alter them), and writes their bytes to one file
of a temporary directory named by a digest of the drawn inputs (each clone once); the other rows read back
their own module's tensors only (an index in memory says where each lies, with its dtype, shape and strides).
Memory holds one draw's recordings at most (the draw being recorded), never R of them; the files are
bounded by :func:`budget` and removed when the run ends.

Why raw bytes and not ``torch.save``/``torch.load``: each row reads each draw once, so a run of ~60 rows
reads every draw ~60 times; loading the whole draw's zip archive cost ~3 ms per read (measured on the
2-layer Llama of benchmarks/model_zoo.py, ~100 tensors per draw), reading one module's few tensors with
positioned reads ~0.2 ms (docs/model.md, "Shared recordings").

A module the forward did not reach, whose flatten raised (another structure than the layout's), or a
draw met once the budget is spent, is recorded as without the store (``record`` up to that module), so
errors and results are those of a run without it. The store sits outside the recording probes (a
module-level registry in record.py), so a checkpoint's fingerprint of a case does not depend on it.
"""

from __future__ import annotations

import hashlib
import shutil
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from .record import SHARED, Recorder

OUTPUT = "\x00output"  # the names under which a module's outputs are kept beside its inputs
MODEL = -1  # the index under which the model's own (end-to-end) outputs are kept, beside the modules' 0, 1, ...
# The zoo's 2-layer Llama writes ~2.4 MB per draw (inputs and kept outputs of 30 modules, each clone once): a
# row at 4096 replicates needs ~10 GB per process; past the budget each new draw is recorded again per row.
MAX_BYTES = 16 * 2**30  # never more than this on disk ...
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

    def __init__(self, model: nn.Module, extra: Mapping, recorders: Sequence[Recorder],
                 pickers: Sequence[Callable[[Any], tuple] | None] | None = None,
                 model_pick: Callable[[Any, Mapping], tuple] | None = None):
        self.model, self.extra = model, dict(extra)
        self.recorders = list(recorders)
        # recorder's position -> picks the certified outputs out of its module's output (None: outputs not kept)
        self.pickers = list(pickers) if pickers is not None else [None] * len(self.recorders)
        # picks the end-to-end row's outputs out of the model's output on the drawn inputs (None: not kept)
        self.model_pick = model_pick
        self.index = {id(r): i for i, r in enumerate(self.recorders)}
        self.directory: Path | None = None
        self.budget = 0
        self.written = 0
        self.files: dict[str, Path] = {}  # digest -> file
        # digest -> module index -> name -> where its bytes lie in the draw's file
        self.index_of: dict[str, dict[int, dict[str, _Placed]]] = {}
        self.current: tuple[str, dict[int, dict[str, torch.Tensor]]] | None = None  # the last draw's modules held
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
                self.current = (key, {})  # filled module by module as rows ask
            elif self.written >= self.budget:
                return None  # full: a miss records as without the store (one module, not the whole model)
            else:
                self.current = (key, self._record(key, kwargs))
        held = self.current[1]
        if i not in held and key in self.files and i in self.index_of[key]:
            held[i] = self._load(key, i)
        values = held.get(i)
        return None if values is None else {n: v for n, v in values.items() if not n.startswith(OUTPUT)}

    def outputs(self, recorder: Recorder) -> tuple[torch.Tensor, ...] | None:
        """ref's module's certified outputs in the current draw's forward (after :meth:`leaves` of that draw),
        or None when they were not kept."""
        i = self.index.get(id(recorder))
        values = None if i is None or self.current is None else self.current[1].get(i)
        return _kept(values) if values else None

    def model_outputs(self, kwargs: Mapping[str, torch.Tensor]) -> tuple[torch.Tensor, ...] | None:
        """The end-to-end outputs of ref's model on ``kwargs`` kept by the forward that recorded this draw, or None
        (a draw no row recorded, outputs not kept). Reads the file; the current draw's held modules stay."""
        if self.model_pick is None:
            return None
        key = inputs_digest(kwargs)
        if self.current is not None and self.current[0] == key and MODEL in self.current[1]:
            values = self.current[1][MODEL]
        elif key in self.files and MODEL in self.index_of[key]:
            values = self._load(key, MODEL)
        else:
            return None
        return _kept(values)

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

        first: dict[int, list[bool]] = {}  # per module, a stack: is the call now running its first one?

        def pre_for(i: int, recorder: Recorder):
            inputs = hook_for(i, recorder)

            def pre(mod, args, kw):
                first.setdefault(i, []).append(i not in held)
                inputs(mod, args, kw)
            return pre

        def post_for(i: int, pick: Callable[[Any], tuple]):
            def post(mod, args, kw, out):
                if not first[i].pop() or i not in held:
                    return
                try:
                    picked = pick(out)
                except Exception:  # noqa: BLE001 - outputs not kept: the row computes ref's as without the store
                    return
                if all(isinstance(t, torch.Tensor) for t in picked):  # cloned now: the forward may write into them
                    held[i].update(_keep(picked, clone))
            return post

        failed: set[int] = set()
        handles = [r.module.register_forward_pre_hook(pre_for(i, r), with_kwargs=True)
                   for i, r in enumerate(self.recorders)]
        handles += [r.module.register_forward_hook(post_for(i, pick), with_kwargs=True)
                    for i, (r, pick) in enumerate(zip(self.recorders, self.pickers)) if pick is not None]
        try:
            with torch.no_grad():
                out = self.model(**kwargs, **self.extra)
                if self.model_pick is not None:
                    picked = self.model_pick(out, kwargs)
                    if all(isinstance(t, torch.Tensor) for t in picked):
                        held[MODEL] = _keep(picked, clone)
        except Exception:  # noqa: BLE001 - modules reached before it keep their inputs; the others record alone,
            pass  # and the end-to-end row runs ref's model itself (and raises there as without the store)
        finally:
            for h in handles:
                h.remove()
        originals.clear()
        self.forwards += 1
        size = sum(s.nbytes() for s in {v.untyped_storage().data_ptr(): v.untyped_storage()
                                        for values in held.values() for v in values.values()}.values())
        if self.written + size <= self.budget:
            path = self.directory / f"{key}.bin"
            self.index_of[key] = _write(path, held)
            self.files[key] = path
        self.written += size  # past the budget: no file, and the next miss records alone
        return held

    def _load(self, key: str, i: int) -> dict[str, torch.Tensor]:
        """Module ``i``'s tensors of draw ``key``: a positioned read of each of their storages."""
        placed = self.index_of[key][i]
        storages: dict[int, torch.UntypedStorage] = {}  # offset -> storage: names that shared one still do
        with open(self.files[key], "rb") as f:
            for p in placed.values():
                if p.offset not in storages:
                    buffer = torch.empty(p.nbytes, dtype=torch.uint8)
                    f.seek(p.offset)
                    if f.readinto(memoryview(buffer.numpy())) != p.nbytes:
                        raise OSError(f"kcert's recording store: {self.files[key]} is shorter than written")
                    storages[p.offset] = buffer.to(p.device).untyped_storage()  # where it was recorded
        self.loads += 1
        return {name: p.tensor(storages[p.offset]) for name, p in placed.items()}


def _keep(outputs: Sequence[torch.Tensor], clone: Callable[[torch.Tensor], torch.Tensor]) -> dict[str, torch.Tensor]:
    """Outputs under the names they are kept by beside a module's inputs (:data:`OUTPUT` and their position)."""
    return {f"{OUTPUT}{k}": clone(t) for k, t in enumerate(outputs)}


def _kept(values: Mapping[str, torch.Tensor]) -> tuple[torch.Tensor, ...] | None:
    """The outputs kept among ``values`` (by :func:`_keep`), in order; None when none were."""
    count = sum(name.startswith(OUTPUT) for name in values)
    return tuple(values[f"{OUTPUT}{k}"] for k in range(count)) if count else None


@dataclass(frozen=True)
class _Placed:
    """Where one recorded tensor's storage lies in a draw's file, and how to view it again."""

    offset: int
    nbytes: int
    dtype: torch.dtype
    shape: tuple[int, ...]
    stride: tuple[int, ...]
    storage_offset: int
    device: torch.device

    def tensor(self, storage: torch.UntypedStorage) -> torch.Tensor:
        return torch.empty(0, dtype=self.dtype, device=storage.device).set_(storage, self.storage_offset, self.shape,
                                                                            self.stride)


def _write(path: Path, held: Mapping[int, Mapping[str, torch.Tensor]]) -> dict[int, dict[str, _Placed]]:
    """Write every recorded storage's bytes to ``path`` once (a tensor that several modules received, or that one
    module returned and the next received, is one clone: one copy in the file); each module's index says where
    its tensors lie, with their dtype, shape, strides and storage offset."""
    index: dict[int, dict[str, _Placed]] = {}
    where: dict[int, int] = {}  # storage address -> offset in the file (the clones are alive: addresses unique)
    offset = 0
    with open(path, "wb") as f:
        for i, values in held.items():
            index[i] = {}
            for name, t in values.items():
                storage = t.untyped_storage()
                if storage.data_ptr() not in where:
                    where[storage.data_ptr()] = offset
                    # the storage's bytes, any dtype; an accelerator's copied to the host to be written
                    data = torch.empty(0, dtype=torch.uint8, device=storage.device).set_(storage).cpu()
                    f.write(memoryview(data.numpy()))
                    offset += storage.nbytes()
                index[i][name] = _Placed(where[storage.data_ptr()], storage.nbytes(), t.dtype, tuple(t.shape),
                                         tuple(t.stride()), t.storage_offset(), t.device)
    return index


__all__ = ["RecordingStore", "budget", "inputs_digest"]
