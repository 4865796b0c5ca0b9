"""Where a tensor lives after bufferization: a :class:`Root` (one piece of memory) and a
:class:`Place` (a static layout on a root).

Roots are the memory the loop function can name: its input arguments (read-only; the caller's
buffers), its output arguments, ``loop.alloc`` scratch buffers and ``loop.global`` weights
(read-only). A place is a root seen with a layout (shape, strides, offset in elements from the
root's base pointer), so a slice of a slice or a reshape of a slice is one place on the root, and
materializes as one ``loop.view`` of the root (never a view of a view): a view's ``offset`` and
``strides`` count from the base pointer (docs of ``loop.view``).

Roots are created during the analysis (plan.py) and materialized lazily by the lowering: a
root's loop value (block argument, ``loop.alloc``, ``loop.global``) exists once the first op that
touches it is emitted.
"""

from __future__ import annotations

from ...dialects.loop_memory import reshape_type, subview_type
from ...ir.core import Value
from ...ir.types import BufferType

#: kinds of roots
ARG, OUTPUT, ALLOC, GLOBAL = "arg", "output", "alloc", "global"


class Root:
    """One piece of memory of a default (row-major) layout; ``values`` lists the tensor values
    that live anywhere on it (for the in-place analysis)."""

    __slots__ = ("kind", "type", "name", "value", "values", "constant")

    def __init__(self, kind: str, type: BufferType, name: str | None = None, constant=None):
        self.kind = kind
        self.type = type
        self.name = name
        self.constant = constant      # the DenseElements of a global
        self.value: Value | None = None
        self.values: list[Value] = []

    @property
    def writable(self) -> bool:
        """Inputs are the caller's and weights are constants: neither is ever written."""
        return self.kind in (OUTPUT, ALLOC)

    def __repr__(self) -> str:
        return f"Root({self.kind}, {self.type}, {self.name!r})"


class Place:
    """A layout on a root; equal places are the same memory seen the same way."""

    __slots__ = ("root", "layout")

    def __init__(self, root: Root, layout: BufferType | None = None):
        self.root = root
        self.layout = layout if layout is not None else root.type

    @classmethod
    def fresh(cls, kind: str, t, name: str | None = None) -> "Place":
        """A place that is the whole of a new root of ``t``'s shape and element type."""
        return cls(Root(kind, BufferType(t.shape, t.element), name))

    def __eq__(self, other) -> bool:
        return isinstance(other, Place) and other.root is self.root and \
            other.layout == self.layout

    def __hash__(self) -> int:
        return hash((id(self.root), self.layout))

    def __repr__(self) -> str:
        return f"Place({self.root!r}, {self.layout})"

    @property
    def shape(self) -> tuple[int, ...]:
        return self.layout.shape

    @property
    def is_whole(self) -> bool:
        return self.layout == self.root.type

    def sub(self, offsets, sizes, strides) -> "Place":
        """The slice ``offsets + i * strides`` (``sizes`` elements per dim) of this place."""
        return Place(self.root, subview_type(self.layout, offsets, sizes, strides))

    def reshaped(self, shape) -> "Place | None":
        """This place seen with another shape (row-major order), or None when its layout cannot
        express that shape as strides."""
        t = reshape_type(self.layout, shape)
        return None if t is None else Place(self.root, t)

    def overlaps(self, other: "Place") -> bool:
        """Whether the two places may share an element (conservative: same root and
        intersecting element ranges)."""
        if other.root is not self.root:
            return False
        a, b = self.layout, other.layout
        if not a.size or not b.size:
            return False
        return a.min_element <= b.max_element and b.min_element <= a.max_element


def boxes_disjoint(a, b) -> bool:
    """Whether two slices ``(offsets, sizes, strides)`` of one tensor share no element: some
    dimension where their index ranges do not intersect, or where both step by one stride from
    offsets in different residues (conservative otherwise)."""
    for (o1, n1, s1), (o2, n2, s2) in zip(zip(*a), zip(*b)):
        if n1 == 0 or n2 == 0:
            return True
        lo1, hi1 = sorted((o1, o1 + (n1 - 1) * s1))
        lo2, hi2 = sorted((o2, o2 + (n2 - 1) * s2))
        if hi1 < lo2 or hi2 < lo1:
            return True
        if n1 > 1 and n2 > 1 and abs(s1) == abs(s2) and (o1 - o2) % abs(s1):
            return True  # interleaved: one stride, offsets in different residues
    return False
