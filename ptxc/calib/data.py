"""Calibration data: an iterable of input dicts, or a folder of ``.npy``/``.npz`` files.

A folder is read in sorted name order, one batch per entry:

* ``NAME.npz``: one batch, its arrays keyed by input name;
* ``NAME.npy``: one batch of the model's only input (a model with several inputs needs .npz
  files or sub-folders);
* ``NAME/``: a sub-folder holding ``<input>.npy`` for each input.

Every batch is checked against the model's inputs (names, shape, dtype) before it runs; a bad
one is a CalibrationError naming the file or batch number and what is wrong.
"""

from __future__ import annotations

import os
from typing import Iterable, Iterator

import numpy as np

from ..errors import CalibrationError


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


def batches(data, input_names: list[str]) -> tuple[Iterator[tuple[str, dict]], int | None]:
    """(iterator of (where, input dict), number of batches or None) for ``data``: a folder path,
    or an iterable of input dicts."""
    if isinstance(data, (str, os.PathLike)):
        entries = folder_batches(os.fspath(data), input_names)
        return ((where, load()) for where, load in entries), len(entries)
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
