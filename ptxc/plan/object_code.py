"""A strict structural check of a cpu plan's object code before LLVM's object loader sees it.

Why: LLVM's ELF reader and RuntimeDyld trust an object file's tables (they are written for
objects a compiler just made), so a damaged one (a byte flipped in a section header, a symbol
index past the symbol table, a relocation outside its section) aborts or segfaults the process
inside ``add_object_file``. A plan's SHA-256 catches accidental damage, but a file edited with a
recomputed checksum reaches the loader; it must meet a typed :class:`~ptxc.errors.PlanError`
there, never a crash. So :func:`check_object` walks every table the loader will walk, with
bounds, and accepts only the shapes of object that ptxc's own code generation emits (a
relocatable ELF64 for this host's machine, with no program headers, groups, TLS, common
symbols, unwind tables or compressed sections).

What it checks, in order: the ELF header (magic, class 64, little-endian, version 1, type
``ET_REL``, this host's machine, header and section-entry sizes, no program headers); the section
header table inside the blob; each section (a known type, its bytes inside the blob, a
power-of-two alignment of at most 4 KiB, its name inside the section-name string table);
string tables (start and end with NUL); the one symbol table (entry size, ``sh_link`` to a string
table, ``sh_info`` within it; each symbol's name inside the string table, its type and binding
known, its section index valid and allocated, its value and size inside that section);
relocation sections (entry size, ``sh_link`` to the symbol table, ``sh_info`` to an allocated
section; each entry's symbol index inside the table, its type one this machine's code uses,
the bytes it patches inside the target section, its addend inside what the symbol names). And
what the object links against: every
defined global symbol is a kernel of the plan's table (each kernel defined once, as a function
in an executable section), and every undefined symbol is one the CPU runtime provides
(the C math functions and libgcc helpers of :mod:`ptxc.codegen.host`, and the ``mem*`` functions
LLVM may turn loops into). That last part is the object's counterpart of the IR allowlist of
:func:`ptxc.plan.checks._check_code`: the code is the program, so the object may reach nothing in
the process beyond them by name.

What it cannot check: the machine code itself. A flipped byte inside ``.ltext`` is still a
well-formed object, and running it may fault, as running a damaged shared library may; only a
signature (:mod:`ptxc.plan.trust`) keeps such a file out.

Example: a section header's ``sh_offset`` of 0x4141414141 in a 984-byte object::

    check_object(blob, "x86_64-unknown-linux-gnu", ["kernel_0"])
    -> ValueError: object section #3 ('.ltext'): bytes [0x4141414141, +399) lie outside the
       984-byte object
"""

from __future__ import annotations

import struct

__all__ = ["check_object", "ALLOWED_EXTRA_SYMBOLS"]

_EHDR = struct.Struct("<16sHHIQQQIHHHHHH")
_SHDR = struct.Struct("<IIQQQQIIQQ")
_SYM = struct.Struct("<IBBHQQ")
_RELA = struct.Struct("<QQq")
_REL = struct.Struct("<QQ")

ET_REL = 1
SHT_NULL, SHT_PROGBITS, SHT_SYMTAB, SHT_STRTAB, SHT_RELA = 0, 1, 2, 3, 4
SHT_NOBITS, SHT_REL = 8, 9
_TYPES = {SHT_NULL, SHT_PROGBITS, SHT_SYMTAB, SHT_STRTAB, SHT_RELA, SHT_NOBITS, SHT_REL}
SHF_WRITE, SHF_ALLOC, SHF_EXECINSTR = 0x1, 0x2, 0x4
SHF_GROUP, SHF_TLS, SHF_COMPRESSED = 0x200, 0x400, 0x800
SHN_UNDEF, SHN_LORESERVE, SHN_ABS = 0, 0xFF00, 0xFFF1
STT_NOTYPE, STT_OBJECT, STT_FUNC, STT_SECTION, STT_FILE = 0, 1, 2, 3, 4
STB_LOCAL, STB_GLOBAL, STB_WEAK = 0, 1, 2
_NAMED = ("eh_frame", "except", "exidx", "extab", ".tdata", ".tbss", ".got", ".plt", ".ctors",
          ".dtors", "init_array", "fini_array")
#: the largest section alignment and zero-filled (NOBITS) section an object may ask for
MAX_ALIGN = 4096
MAX_NOBITS = 1 << 20

#: machine -> (ELF e_machine, {relocation type: bytes it patches}); the relocations LLVM's
#: code generation emits for ptxc's kernels (large code model: absolute 64-bit addresses)
_MACHINES = {
    "x86_64": (62, {0: 0, 1: 8, 2: 4, 4: 4, 9: 4, 10: 4, 11: 4, 24: 8, 26: 4, 41: 4, 42: 4}),
    "aarch64": (183, {0: 0, 257: 8, 258: 4, 261: 4, 264: 4, 265: 4, 266: 4, 267: 4, 268: 4,
                      269: 4, 270: 4, 271: 4, 272: 4, 273: 4, 275: 4, 277: 4, 278: 4, 282: 4,
                      283: 4, 284: 4, 285: 4, 286: 4, 299: 4}),
}
#: functions LLVM's code generation may call although the IR never names them: the ``mem*``
#: functions loop idioms become, and the compiler runtime's integer and power helpers
ALLOWED_EXTRA_SYMBOLS = frozenset({
    "memcpy", "memset", "memmove", "__divti3", "__udivti3", "__modti3", "__umodti3",
    "__powisf2", "__powidf2", "__truncdfhf2", "__truncsfhf2", "__extendhfsf2", "__extendhfdf2"})


def _machine(triple: str):
    arch = (triple or "").split("-")[0]
    if arch in ("x86_64", "amd64"):
        return _MACHINES["x86_64"]
    if arch in ("aarch64", "arm64"):
        return _MACHINES["aarch64"]
    return None


def _cstr(table: bytes, at: int, where: str) -> str:
    """The NUL-terminated string at ``at`` of a string table."""
    if not 0 <= at < len(table):
        raise ValueError(f"{where}: name offset {at} is outside its {len(table)}-byte string "
                         "table")
    end = table.find(b"\0", at)
    if end < 0:
        raise ValueError(f"{where}: name at {at} runs off its string table")
    try:
        return table[at:end].decode("ascii")
    except UnicodeDecodeError:
        raise ValueError(f"{where}: name at {at} is not ASCII") from None


def check_object(blob: bytes, triple: str, kernels, allowed=frozenset()) -> None:
    """Raise ValueError naming the first structural fault of the object ``blob`` (see the module
    docstring); ``kernels`` are the plan's kernel names, ``allowed`` the undefined symbols the
    runtime provides (besides :data:`ALLOWED_EXTRA_SYMBOLS`)."""
    data = bytes(blob)
    n = len(data)
    if n < _EHDR.size:
        raise ValueError(f"object of {n} bytes is shorter than an ELF64 header")
    (ident, e_type, e_machine, e_version, _entry, e_phoff, e_shoff, _flags, e_ehsize,
     e_phentsize, e_phnum, e_shentsize, e_shnum, e_shstrndx) = _EHDR.unpack_from(data)
    if ident[:4] != b"\x7fELF" or ident[4] != 2 or ident[5] != 1 or ident[6] != 1:
        raise ValueError(f"object is not a little-endian ELF64 file (ident {ident[:7].hex()})")
    machine = _machine(triple)
    if e_type != ET_REL or e_version != 1:
        raise ValueError(f"object has ELF type {e_type}, version {e_version}; a relocatable "
                         "object (type 1, version 1) is expected")
    if machine is not None and e_machine != machine[0]:
        raise ValueError(f"object is for ELF machine {e_machine}; this host ({triple}) is "
                         f"{machine[0]}")
    if e_ehsize != _EHDR.size or e_shentsize != _SHDR.size:
        raise ValueError(f"object header size {e_ehsize} or section entry size {e_shentsize} "
                         f"is not {_EHDR.size}/{_SHDR.size}")
    if e_phnum or e_phoff or e_phentsize not in (0, 56):
        raise ValueError("object has program headers (a relocatable object has none)")
    if not 1 <= e_shnum < SHN_LORESERVE or e_shoff % 8 \
            or not _EHDR.size <= e_shoff <= n - e_shnum * _SHDR.size:
        raise ValueError(f"object section header table ({e_shnum} entries at {e_shoff:#x}) "
                         f"does not lie inside the {n}-byte object, aligned")
    if not 0 < e_shstrndx < e_shnum:
        raise ValueError(f"object section-name table index {e_shstrndx} is not a section")
    shdrs = [_SHDR.unpack_from(data, e_shoff + i * _SHDR.size) for i in range(e_shnum)]
    if any(shdrs[0]):
        raise ValueError("object section #0 is not the null section")
    for i, (_, typ, flags, addr, off, size, _, _, align, _) in enumerate(shdrs[1:], 1):
        where = f"object section #{i}"
        if typ not in _TYPES:
            raise ValueError(f"{where} has type {typ:#x}, which ptxc's code generation does not "
                             "emit")
        if flags & (SHF_GROUP | SHF_TLS | SHF_COMPRESSED) or addr:
            raise ValueError(f"{where} is a group, TLS or compressed section, or has an address")
        if align > MAX_ALIGN or align & (align - 1):
            raise ValueError(f"{where} has alignment {align} (a power of two <= {MAX_ALIGN})")
        if typ == SHT_NOBITS:
            if size > MAX_NOBITS:
                raise ValueError(f"{where} asks for {size} zero bytes (at most {MAX_NOBITS})")
        elif not (off <= n and size <= n - off):
            raise ValueError(f"{where}: bytes [{off:#x}, +{size}) lie outside the {n}-byte "
                             "object")
    sections = [data[s[4]:s[4] + s[5]] if s[1] != SHT_NOBITS else b"" for s in shdrs]

    def strtab(i: int, where: str) -> bytes:
        if not 0 < i < e_shnum or shdrs[i][1] != SHT_STRTAB:
            raise ValueError(f"{where}: section #{i} is not a string table")
        t = sections[i]
        if not t or t[0] != 0 or t[-1] != 0:
            raise ValueError(f"{where}: string table #{i} does not start and end with NUL")
        return t

    shstr = strtab(e_shstrndx, "object section names")
    names = [""] + [_cstr(shstr, s[0], f"object section #{i}") for i, s in
                    enumerate(shdrs[1:], 1)]
    for i, name in enumerate(names):  # the loader treats these by name: unwind and TLS tables
        if any(w in name for w in _NAMED):
            raise ValueError(f"object section #{i} is named {name!r}; ptxc's code generation "
                             "emits no unwind, exception or thread-local sections")
    symtabs = [i for i, s in enumerate(shdrs) if s[1] == SHT_SYMTAB]
    if len(symtabs) != 1:
        raise ValueError(f"object has {len(symtabs)} symbol tables; one is expected")
    si = symtabs[0]
    _, _, _, _, _, size, link, info, _, entsize = shdrs[si]
    if entsize != _SYM.size or size % _SYM.size or shdrs[si][4] % 8:
        raise ValueError(f"object symbol table: entry size {entsize}, size {size} (entries "
                         f"of {_SYM.size} bytes, aligned, are expected)")
    nsyms = size // _SYM.size
    strs = strtab(link, "object symbol table")
    if not 1 <= info <= nsyms:
        raise ValueError(f"object symbol table: first global symbol {info} of {nsyms}")
    syms = [_SYM.unpack_from(sections[si], k * _SYM.size) for k in range(nsyms)]
    if any(syms[0]):
        raise ValueError("object symbol #0 is not the null symbol")
    allowed = frozenset(allowed) | ALLOWED_EXTRA_SYMBOLS
    want = set(kernels)
    defined = set()
    for k, (name_at, st_info, _other, shndx, value, ssize) in enumerate(syms[1:], 1):
        name = _cstr(strs, name_at, f"object symbol #{k}")
        where = f"object symbol #{k} ({name!r})"
        typ, bind = st_info & 0xF, st_info >> 4
        if typ not in (STT_NOTYPE, STT_OBJECT, STT_FUNC, STT_SECTION, STT_FILE) \
                or bind not in (STB_LOCAL, STB_GLOBAL, STB_WEAK) or (bind == STB_LOCAL) != (k < info):
            raise ValueError(f"{where} has type {typ}, binding {bind} at index {k} (first "
                             f"global {info})")
        if shndx == SHN_UNDEF:
            if bind == STB_LOCAL or typ not in (STT_NOTYPE, STT_FUNC, STT_OBJECT) \
                    or name not in allowed:
                raise ValueError(f"{where} is undefined and not a function the CPU runtime "
                                 "provides")
            continue
        if shndx == SHN_ABS:
            if typ != STT_FILE and bind != STB_LOCAL:
                raise ValueError(f"{where} is an absolute global symbol")
            continue
        if shndx >= e_shnum or not shdrs[shndx][2] & SHF_ALLOC:
            raise ValueError(f"{where} is in section #{shndx}, which is not an allocated "
                             "section of the object")
        sec_size = shdrs[shndx][5]
        if not (value <= sec_size and ssize <= sec_size - value):
            raise ValueError(f"{where}: [{value:#x}, +{ssize}) lies outside its section "
                             f"#{shndx} of {sec_size} bytes")
        if bind != STB_LOCAL:
            if name not in want or typ != STT_FUNC or name in defined \
                    or not shdrs[shndx][2] & SHF_EXECINSTR:
                raise ValueError(f"{where} is a global symbol but not a kernel of the plan's "
                                 "table (defined once, as a function in code)")
            defined.add(name)
    if want - defined:
        raise ValueError(f"object lacks kernels {sorted(want - defined)}")
    for i, (_, typ, flags, _, off, size, link, info, _, entsize) in enumerate(shdrs):
        if typ not in (SHT_RELA, SHT_REL):
            continue
        where = f"object relocation section #{i} ({names[i]!r})"
        rec = _RELA if typ == SHT_RELA else _REL
        if entsize != rec.size or size % rec.size or off % 8:
            raise ValueError(f"{where}: entry size {entsize}, size {size}")
        if link != si or not 0 < info < e_shnum or not shdrs[info][2] & SHF_ALLOC \
                or shdrs[info][1] != SHT_PROGBITS:
            raise ValueError(f"{where}: links symbol table #{link} and section #{info}; the "
                             f"symbol table is #{si} and the target an allocated section")
        target = shdrs[info][5]
        for k in range(size // rec.size):
            r_offset, r_info = rec.unpack_from(sections[i], k * rec.size)[:2]
            sym, rtype = r_info >> 32, r_info & 0xFFFFFFFF
            if sym >= nsyms:
                raise ValueError(f"{where} entry {k}: symbol index {sym} is past the "
                                 f"{nsyms}-entry symbol table")
            width = 8
            if machine is not None:
                if rtype not in machine[1]:
                    raise ValueError(f"{where} entry {k}: relocation type {rtype}, which "
                                     "ptxc's code generation does not emit")
                width = machine[1][rtype]
            if not (r_offset <= target and width <= target - r_offset):
                raise ValueError(f"{where} entry {k}: patches [{r_offset:#x}, +{width}) "
                                 f"outside its {target}-byte section #{info}")
            if typ == SHT_RELA:
                _addend(rec.unpack_from(sections[i], k * rec.size)[2], syms[sym], shdrs,
                        f"{where} entry {k}")


def _addend(addend: int, sym, shdrs, where: str) -> None:
    """A relocation's addend keeps its address inside what the symbol names: a call or address
    of an external function has none (or the -4 of a PC-relative field), an address in a
    section (a constant pool, a kernel) stays inside that section. An addend that sent a call
    past its target made the damaged plan's first run jump into garbage."""
    shndx = sym[3]
    if shndx in (SHN_UNDEF, SHN_ABS) or shndx >= len(shdrs):
        lo, hi = -8, 0
    else:
        lo, hi = -8, shdrs[shndx][5] - (sym[4] if sym[1] & 0xF != STT_SECTION else 0)
    if not lo <= addend <= hi:
        raise ValueError(f"{where}: addend {addend} takes the address outside [{lo}, {hi}] "
                         "of its symbol")
