"""Calibration data: an iterable of input dicts, a folder of ``.npy``/``.npz`` files, or one
``.npz`` file holding the whole data set.

A folder is read in sorted name order, one batch per entry:

* ``NAME.npz``: one batch, its arrays keyed by input name;
* ``NAME.npy``: one batch of the model's only input (a model with several inputs needs .npz
  files or sub-folders);
* ``NAME/``: a sub-folder holding ``<input>.npy`` for each input.

A single ``FILE.npz`` holds one array per input, named by the input, each with a leading sample
axis of the same length N; it is split into batches of the model's batch size B (the inputs'
leading dim) in order, ``N // B`` of them. The ``N % B`` samples left over are not used (a
warning on the ``ptxc`` logger says how many): a partial batch does not fit a static shape.
Before: calibrating on a data set in one array meant writing one file per batch by hand (the
README's int8 example); after: ``np.savez("calib.npz", x=images)``.

Every batch is checked against the model's inputs (names, shape, dtype) before it runs; a bad
one is a CalibrationError naming the file or batch number and what is wrong.
"""

from __future__ import annotations

import logging
import os
from typing import Iterable, Iterator

import numpy as np

from ..errors import CalibrationError

log = logging.getLogger("ptxc.calib")


class Entries(list):
    """The batches of a data set as a list of ``(where, load)`` pairs, ``load()`` giving one
    input dict: known in number before any is loaded, so they can be split (calibration and
    held-out batches, :func:`ptxc.calib.sensitivity`) without loading them all."""


def folder_batches(path: str, input_names: list[str]) -> list:
    """Loaders (callables giving one input dict each) for the entries of folder ``path``."""
    if not os.path.isdir(path):
        raise CalibrationError(f"calibration data {path!r} is not a folder")
    out = []
    for name in sorted(os.listdir(path)):
        full = os.path.join(path, name)
        if os.path.isdir(full):
            out.append((full, _subfolder_loader(full, input_names)))
        elif name.endswith(".npz"):
            out.append((full, _npz_loader(full)))
        elif name.endswith(".npy"):
            if len(input_names) != 1:
                raise CalibrationError(
                    f"{full}: a .npy file holds one input, but the model has inputs "
                    f"{input_names}; use .npz files or one sub-folder per batch")
            out.append((full, _npy_loader(full, input_names[0])))
    if not out:
        raise CalibrationError(f"calibration folder {path!r} has no .npy, .npz or sub-folder "
                               "batches")
    return out


def _load(path: str) -> np.ndarray:
    try:
        return np.load(path, allow_pickle=False)
    except Exception as e:
        raise CalibrationError(f"{path}: cannot read: {type(e).__name__}: {e}") from None


def _npy_loader(path, name):
    return lambda: {name: _load(path)}


def _npz_loader(path):
    def load():
        z = _load(path)
        return {k: z[k] for k in z.files}
    return load


def _subfolder_loader(path, names):
    return lambda: {n: _load(os.path.join(path, n + ".npy")) for n in names
                    if os.path.exists(os.path.join(path, n + ".npy"))}


def npz_file_batches(path: str, input_names: list[str], types: list | None) -> list:
    """Loaders for the batches of one ``.npz`` holding the whole data set (module docstring)."""
    z = _load(path)
    try:
        arrays = {k: z[k] for k in z.files}
    except Exception as e:  # a damaged member
        raise CalibrationError(f"{path}: cannot read: {type(e).__name__}: {e}") from None
    missing = [n for n in input_names if n not in arrays]
    unknown = sorted(set(arrays) - set(input_names))
    if missing or unknown:
        raise CalibrationError(f"{path}: missing array(s) {missing}, unknown array(s) {unknown}"
                               f"; it needs one array per model input, named by it: "
                               f"{input_names}")
    if types is None:
        raise CalibrationError(f"{path}: splitting a data set file into batches needs the "
                               "model's input types")
    sizes = set()
    for n, t in zip(input_names, types):
        a = arrays[n]
        if t.rank == 0 or a.ndim == 0:
            raise CalibrationError(f"{path}: input {n!r} ({t}) has no leading batch axis to "
                                   "split the data set along; give a folder of batches")
        sizes.add(t.shape[0])
    lengths = {n: arrays[n].shape[0] for n in input_names}
    if len(set(lengths.values())) != 1:
        raise CalibrationError(f"{path}: the arrays' leading (sample) axes differ: {lengths}")
    if len(sizes) != 1:
        raise CalibrationError(f"{path}: the model's inputs have different batch sizes "
                               f"{sorted(sizes)}; give a folder of batches")
    b, n = sizes.pop(), next(iter(lengths.values()))
    if n < b:
        raise CalibrationError(f"{path}: {n} samples, fewer than one batch of {b} (the "
                               "model's batch size; --input-shape or input_shapes= sets it)")
    if n % b:
        log.warning("%s: %d samples make %d batches of %d; the last %d are not used", path, n,
                    n // b, b, n % b)
    return [(f"{path}[{i}:{i + b}]", _slice_loader(arrays, i, b)) for i in range(0, n - b + 1, b)]


def _slice_loader(arrays, start, size):
    return lambda: {k: a[start:start + size] for k, a in arrays.items()}


def entries(data, input_names: list[str], types: list | None = None) -> Entries:
    """Every batch of ``data`` (any form :func:`batches` takes) as :class:`Entries`; an
    iterable of dicts is read through here (a generator is consumed)."""
    if isinstance(data, Entries):
        return data
    if isinstance(data, (str, os.PathLike)):
        path = os.fspath(data)
        if os.path.isfile(path):
            if not path.endswith(".npz"):
                raise CalibrationError(
                    f"calibration data {path!r}: a file must be an .npz of arrays named by "
                    "input, with a leading sample axis; or give a folder of batches")
            return Entries(npz_file_batches(path, input_names, types))
        if not os.path.exists(path):
            raise CalibrationError(f"calibration data {path!r} is not a folder or an .npz file: "
                                   "no such path")
        return Entries(folder_batches(path, input_names))
    if isinstance(data, dict):
        raise CalibrationError("calibration data must be an iterable of input dicts (a list of "
                               "dicts, a generator), a folder or an .npz file, not one dict")
    if not isinstance(data, Iterable):
        raise CalibrationError(f"calibration data must be a folder, an .npz file or an "
                               f"iterable of input dicts, got {type(data).__name__}")
    return Entries((f"batch {i}", (lambda d=d: d)) for i, d in enumerate(data))


def batches(data, input_names: list[str], types: list | None = None
            ) -> tuple[Iterator[tuple[str, dict]], int | None]:
    """(iterator of (where, input dict), number of batches or None) for ``data``: a folder
    path, an ``.npz`` file (split into batches of the leading dim of ``types``), an
    :class:`Entries`, or an iterable of input dicts (read as it goes)."""
    if isinstance(data, (str, os.PathLike, Entries)):
        found = entries(data, input_names, types)
        return ((where, load()) for where, load in found), len(found)
    if isinstance(data, dict):
        raise CalibrationError("calibration data must be an iterable of input dicts (a list of "
                               "dicts, a generator) or a folder, not one dict")
    if not isinstance(data, Iterable):
        raise CalibrationError(f"calibration data must be a folder or an iterable of input "
                               f"dicts, got {type(data).__name__}")
    n = len(data) if hasattr(data, "__len__") else None
    return ((f"batch {i}", d) for i, d in enumerate(data)), n


def check_batch(where: str, batch, names: list[str], types: list) -> list[np.ndarray]:
    """The batch's arrays in input order, checked against the input types."""
    if not isinstance(batch, dict):
        raise CalibrationError(f"calibration {where}: expected a dict input name -> array, got "
                               f"{type(batch).__name__}")
    missing = [n for n in names if n not in batch]
    unknown = sorted(set(batch) - set(names))
    if missing or unknown:
        raise CalibrationError(f"calibration {where}: missing input(s) {missing}, unknown "
                               f"input(s) {unknown}; the model's inputs are {names}")
    out = []
    for n, t in zip(names, types):
        x = np.asarray(batch[n])
        if x.dtype != t.element.np_dtype or tuple(x.shape) != t.shape:
            raise CalibrationError(f"calibration {where}: input {n!r} is {x.dtype}"
                                   f"{list(x.shape)}, the model expects {t}")
        out.append(x)
    return out
