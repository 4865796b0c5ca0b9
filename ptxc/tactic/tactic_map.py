"""A schedule pass's ``tactics`` option: kernel key -> :class:`~.tactic.Tactic`, read-only and
hashable.

    MapToGpu(tactics={"5e1c0a...": Tactic("mma", {"mma_stages": 4})})
    p.tactics["5e1c0a..."]        # Tactic('mma', ...)
    hash(p)                       # a pass stays hashable (its options key caches)

A pass is a frozen attrs class whose options compare and hash by value (ptxc/rewrite/pass_.py),
so its ``tactics`` cannot be a dict: :func:`tactic_map` (the field's converter) checks each key
(a kernel key, ptxc/tactic/kernels.py: text) and value (a Tactic, or its text or JSON form, read
as one) and freezes them into a :class:`TacticMap`, which compares equal to any mapping of the
same items and hashes by its sorted items.
"""

from __future__ import annotations

from collections.abc import Mapping

from ..errors import TuningError
from .tactic import Tactic


class TacticMap(Mapping):
    """A read-only mapping of kernel keys to tactics (module docstring)."""

    __slots__ = ("_items",)

    def __init__(self, items=()):
        self._items = dict(items)

    def __getitem__(self, key: str) -> Tactic:
        return self._items[key]

    def __iter__(self):
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __hash__(self) -> int:
        return hash(tuple(sorted(self._items.items())))

    def __eq__(self, other) -> bool:
        return isinstance(other, Mapping) and dict(self._items) == dict(other)

    def __repr__(self) -> str:
        return f"TacticMap({self._items!r})"


#: no tactics (a build without tuning)
NO_TACTICS = TacticMap()


def tactic_map(value) -> TacticMap:
    """``value`` (a mapping of kernel keys to Tactics, their text or their JSON dicts; None:
    empty) as a :class:`TacticMap`; a TuningError naming a bad key or value."""
    if value is None:
        return NO_TACTICS
    if isinstance(value, TacticMap):
        return value
    if not isinstance(value, Mapping):
        raise TuningError(f"tactics: a mapping of kernel keys to tactics, not {value!r}")
    out = {}
    for key, t in value.items():
        if not isinstance(key, str) or not key:
            raise TuningError(f"tactics: the key {key!r} is not a kernel key (text)")
        if isinstance(t, str):
            t = Tactic.parse(t)
        elif isinstance(t, dict):
            t = Tactic.from_json(t)
        if not isinstance(t, Tactic):
            raise TuningError(f"tactics[{key!r}]: {t!r} is not a Tactic")
        out[key] = t
    return TacticMap(sorted(out.items()))
