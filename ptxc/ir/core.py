"""The IR's objects: values with use-lists, operations, blocks and regions.

As in MLIR: an :class:`Operation` has a name ``dialect.op``, operands (SSA values), results,
attributes and regions; a region holds blocks; a block holds block arguments and an ordered list of
operations. Every :class:`Value` has one definition (an op result or a block argument) and a
use-list, kept up to date by every mutation, so rewrites can ask "who reads this?" in O(1).

Operations are generic; what a particular op means (operands, attributes, type inference,
reference semantics) is declared once in its :class:`~ptxc.ir.spec.OpSpec`, looked up by name.
"""

from __future__ import annotations

from typing import Iterator

from .types import Type


class Use:
    """One operand slot of one operation that reads a value."""

    __slots__ = ("op", "index")

    def __init__(self, op: "Operation", index: int):
        self.op = op
        self.index = index

    def __repr__(self) -> str:
        return f"Use({self.op.name}#{self.index})"


class Value:
    """An SSA value. ``name_hint`` is kept for printing (ONNX tensor names survive to every stage)."""

    __slots__ = ("type", "uses", "name_hint")

    def __init__(self, type: Type, name_hint: str | None = None):
        self.type = type
        self.uses: list[Use] = []
        self.name_hint = name_hint

    @property
    def users(self) -> list["Operation"]:
        """The distinct operations reading this value, in use order."""
        seen: dict[int, Operation] = {}
        for u in self.uses:
            seen.setdefault(id(u.op), u.op)
        return list(seen.values())

    @property
    def has_uses(self) -> bool:
        return bool(self.uses)

    def replace_all_uses_with(self, new: "Value") -> None:
        if new is self:
            return
        for use in list(self.uses):
            use.op.set_operand(use.index, new)

    def replace_uses_if(self, new: "Value", pred) -> None:
        for use in list(self.uses):
            if pred(use):
                use.op.set_operand(use.index, new)


class OpResult(Value):
    __slots__ = ("op", "index")

    def __init__(self, type: Type, op: "Operation", index: int, name_hint: str | None = None):
        super().__init__(type, name_hint)
        self.op = op
        self.index = index

    @property
    def owner(self) -> "Operation":
        return self.op

    def __repr__(self) -> str:
        return f"<{self.op.name} result #{self.index}: {self.type}>"


class BlockArgument(Value):
    __slots__ = ("block", "index")

    def __init__(self, type: Type, block: "Block", index: int, name_hint: str | None = None):
        super().__init__(type, name_hint)
        self.block = block
        self.index = index

    @property
    def owner(self) -> "Block":
        return self.block

    def __repr__(self) -> str:
        return f"<block argument #{self.index}: {self.type}>"


class Operation:
    """One operation. Build through :class:`~ptxc.ir.builder.Builder` or :meth:`create`."""

    __slots__ = ("name", "operands", "results", "attributes", "regions", "block", "loc",
                 "_prev", "_next")

    def __init__(self, name: str, operands=(), result_types=(), attributes=None, regions=(),
                 loc: str | None = None, result_names=None):
        self.name = name
        self.operands: list[Value] = []
        self.attributes: dict = dict(attributes or {})
        self.regions: list[Region] = []
        self.block: Block | None = None
        self.loc = loc
        self._prev: Operation | None = None
        self._next: Operation | None = None
        names = list(result_names or [])
        names += [None] * (len(result_types) - len(names))
        self.results = [OpResult(t, self, i, n) for i, (t, n) in enumerate(zip(result_types, names))]
        for v in operands:
            self._append_operand(v)
        for r in regions:
            self.add_region(r)

    create = classmethod(lambda cls, *a, **k: cls(*a, **k))

    # ---- operands -------------------------------------------------------------------------
    def _append_operand(self, v: Value) -> None:
        if not isinstance(v, Value):
            raise TypeError(f"{self.name}: operand {len(self.operands)} is {v!r}, not a Value")
        v.uses.append(Use(self, len(self.operands)))
        self.operands.append(v)

    def set_operand(self, index: int, new: Value) -> None:
        old = self.operands[index]
        for i, u in enumerate(old.uses):
            if u.op is self and u.index == index:
                del old.uses[i]
                break
        self.operands[index] = new
        new.uses.append(Use(self, index))

    def set_operands(self, values) -> None:
        self.drop_operands()
        for v in values:
            self._append_operand(v)

    def drop_operands(self) -> None:
        for i, v in enumerate(self.operands):
            v.uses[:] = [u for u in v.uses if not (u.op is self and u.index == i)]
        self.operands = []

    # ---- results --------------------------------------------------------------------------
    @property
    def result(self) -> OpResult:
        if len(self.results) != 1:
            raise ValueError(f"{self.name} has {len(self.results)} results, not one")
        return self.results[0]

    def replace_all_uses_with(self, values) -> None:
        values = list(values)
        if len(values) != len(self.results):
            raise ValueError(f"{self.name}: {len(values)} replacements for {len(self.results)} results")
        for r, v in zip(self.results, values):
            r.replace_all_uses_with(v)

    @property
    def has_uses(self) -> bool:
        return any(r.uses for r in self.results)

    # ---- regions --------------------------------------------------------------------------
    def add_region(self, region: "Region | None" = None) -> "Region":
        region = region if region is not None else Region()
        region.parent = self
        self.regions.append(region)
        return region

    def walk(self) -> Iterator["Operation"]:
        """This op and every op nested in it, pre-order."""
        yield self
        for region in self.regions:
            for block in region.blocks:
                for op in list(block.ops):
                    yield from op.walk()

    # ---- position -------------------------------------------------------------------------
    @property
    def parent_op(self) -> "Operation | None":
        if self.block is None or self.block.region is None:
            return None
        return self.block.region.parent

    @property
    def next_op(self) -> "Operation | None":
        return self._next

    @property
    def prev_op(self) -> "Operation | None":
        return self._prev

    def detach(self) -> "Operation":
        if self.block is not None:
            self.block._unlink(self)
        return self

    def erase(self) -> None:
        """Remove this op; its results must have no uses left."""
        for r in self.results:
            if r.uses:
                users = ", ".join(sorted({u.op.name for u in r.uses}))
                raise ValueError(f"cannot erase {self.name}: result #{r.index} is used by {users}")
        self.detach()
        self.drop_operands()
        for region in self.regions:
            for block in region.blocks:
                for op in reversed(list(block.ops)):
                    op.drop_operands()

    # ---- attributes -----------------------------------------------------------------------
    def attr(self, name: str, default=None):
        """The attribute ``name``, else its spec default, else ``default``."""
        if name in self.attributes:
            return self.attributes[name]
        from .spec import lookup  # late: spec imports core
        spec = lookup(self.name)
        if spec is not None and name in spec.attributes:
            d = spec.attributes[name].default
            if d is not None:
                return d
        return default

    @property
    def spec(self):
        from .spec import lookup
        return lookup(self.name)

    @property
    def where(self) -> str:
        """How errors name this op: ``"graph.conv" (node 'conv1')``."""
        return f'"{self.name}"' + (f" (node {self.loc!r})" if self.loc else "")

    def clone(self, mapping: dict | None = None) -> "Operation":
        """A deep copy; operands are looked up in ``mapping`` (old value -> new), which is filled
        with the results and block arguments of the copy."""
        mapping = {} if mapping is None else mapping
        new = Operation(self.name, [mapping.get(v, v) for v in self.operands],
                        [r.type for r in self.results], dict(self.attributes), loc=self.loc,
                        result_names=[r.name_hint for r in self.results])
        for r_old, r_new in zip(self.results, new.results):
            mapping[r_old] = r_new
        for region in self.regions:
            nr = new.add_region()
            for block in region.blocks:
                nb = Block([a.type for a in block.args], [a.name_hint for a in block.args])
                nr.append(nb)
                for a_old, a_new in zip(block.args, nb.args):
                    mapping[a_old] = a_new
                for op in block.ops:
                    nb.append(op.clone(mapping))
        return new

    def __repr__(self) -> str:
        return f"<Operation {self.name}{' ' + repr(self.loc) if self.loc else ''}>"


class Block:
    """Arguments and an ordered, doubly linked list of operations (O(1) insert and erase)."""

    __slots__ = ("args", "region", "_first", "_last", "_len")

    def __init__(self, arg_types=(), arg_names=None):
        names = list(arg_names or [])
        names += [None] * (len(arg_types) - len(names))
        self.args = [BlockArgument(t, self, i, n) for i, (t, n) in enumerate(zip(arg_types, names))]
        self.region: Region | None = None
        self._first: Operation | None = None
        self._last: Operation | None = None
        self._len = 0

    def add_arg(self, type: Type, name_hint: str | None = None) -> BlockArgument:
        a = BlockArgument(type, self, len(self.args), name_hint)
        self.args.append(a)
        return a

    def erase_arg(self, index: int) -> None:
        if self.args[index].uses:
            raise ValueError(f"block argument #{index} still has uses")
        del self.args[index]
        for i, a in enumerate(self.args):
            a.index = i

    @property
    def ops(self) -> Iterator[Operation]:
        op = self._first
        while op is not None:
            nxt = op._next
            yield op
            op = nxt

    def __len__(self) -> int:
        return self._len

    @property
    def first_op(self) -> Operation | None:
        return self._first

    @property
    def last_op(self) -> Operation | None:
        return self._last

    def _link(self, op: Operation, prev: Operation | None, nxt: Operation | None) -> None:
        if op.block is not None:
            raise ValueError(f"{op.name} is already in a block; detach it first")
        op.block = self
        op._prev, op._next = prev, nxt
        if prev is None:
            self._first = op
        else:
            prev._next = op
        if nxt is None:
            self._last = op
        else:
            nxt._prev = op
        self._len += 1

    def _unlink(self, op: Operation) -> None:
        if op._prev is None:
            self._first = op._next
        else:
            op._prev._next = op._next
        if op._next is None:
            self._last = op._prev
        else:
            op._next._prev = op._prev
        op._prev = op._next = None
        op.block = None
        self._len -= 1

    def append(self, op: Operation) -> Operation:
        self._link(op, self._last, None)
        return op

    def insert_before(self, anchor: Operation, op: Operation) -> Operation:
        self._link(op, anchor._prev, anchor)
        return op

    def insert_after(self, anchor: Operation, op: Operation) -> Operation:
        self._link(op, anchor, anchor._next)
        return op

    @property
    def parent_op(self) -> Operation | None:
        return self.region.parent if self.region is not None else None


class Region:
    __slots__ = ("blocks", "parent")

    def __init__(self, blocks=()):
        self.blocks: list[Block] = []
        self.parent: Operation | None = None
        for b in blocks:
            self.append(b)

    def append(self, block: Block) -> Block:
        block.region = self
        self.blocks.append(block)
        return block

    @property
    def block(self) -> Block:
        """The only block (most regions have one)."""
        if len(self.blocks) != 1:
            raise ValueError(f"region has {len(self.blocks)} blocks, not one")
        return self.blocks[0]


def op_position_index(block: Block) -> dict[int, int]:
    """id(op) -> position in its block; for order queries over a whole block."""
    return {id(op): i for i, op in enumerate(block.ops)}
