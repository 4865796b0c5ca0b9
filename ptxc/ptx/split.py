"""One LLVM module per kernel, identical kernels once, and their PTX joined into one text.

Why: LLVM's NVPTX O3 and codegen of ResNet-50's mapped program (one module holding every
kernel: 32 MB of LLVM IR at batch 32 fp16) took 200 s on one core, and it is the same work
per kernel with nothing shared between kernels (each is a ``ptx_kernel``; no kernel calls
another). So each kernel becomes a module of its own, with only what it uses, compiled apart
(in several processes where several cores are free: :mod:`.jobs`), and the PTX texts are
joined. A kernel's module names it ``ptxcKERNEL`` (:data:`PLACEHOLDER`), so two launches that
compile to the same code (ResNet's repeated bottleneck blocks) have the same module text and
are optimized and code-generated once; the joined PTX still holds one ``.entry kernel_N`` per
launch, with the names, the kernel table and the footprint lines unchanged.

Before -> after (three launches, kernel_1 and kernel_2 the same code)::

    one module: kernel_0, kernel_1, kernel_2   ->  O3 + codegen of 3 kernels on one core
    modules: [kernel_0], [ptxcKERNEL = kernel_1 = kernel_2]
             ->  O3 + codegen of 2 modules (in parallel), PTX:
                 .version/.target/.address_size once, the extern dynamic shared array once,
                 .entry kernel_0, .entry kernel_1, .entry kernel_2 (kernel_2's text is
                 kernel_1's with the name substituted)

Names inside a kernel's PTX are all derived from its own (``kernel_N_param_0``,
``kernel_N_$_shared0``); a function or global that optimization left besides the kernel
(a libdevice function not inlined, its constant tables) is renamed ``ptxcKERNEL_<name>``
before codegen (:func:`privatize`), so two kernels' copies never collide in the joined text.
"""

from __future__ import annotations

import hashlib
import re

from llvmlite import ir

#: the name every kernel has in its own module (substituted back in its PTX)
PLACEHOLDER = "ptxcKERNEL"
_HEADER_END = re.compile(r"^\.address_size \d+\n", re.M)
_EXTERN = re.compile(r"^\.extern [^\n]*;\n", re.M)


def kernel_modules(m: ir.Module, kernels: list, twins: dict | None = None) -> list[str]:
    """The text of one standalone module per kernel of the emitted NVPTX module ``m``
    (``kernels``: the KernelInfo list, in order), each kernel named :data:`PLACEHOLDER`:
    the triple and data layout, every declaration, the kernel's globals (its ``gpu.shared``
    arrays, the dynamic shared array if it uses it), the function, the unnamed metadata it
    may reference, and its ``nvvm.annotations`` and the module flags. A twin (``twins``:
    name -> the earlier kernel with its code) gets the earlier kernel's module."""
    head = [f'target triple = "{m.triple}"', f'target datalayout = "{m.data_layout}"', ""]
    twins = twins or {}
    decls = [str(f) for f in m.functions if f.is_declaration and f.name not in twins]
    globals_ = {g.name: g for g in m.global_values if isinstance(g, ir.GlobalVariable)}
    generic = [md for md in m.metadata if '@"' not in str(md)]  # branch weights, flags
    flags = [md for md in generic if "nvvm-reflect-ftz" in str(md)]
    annot: dict = {}  # kernel name -> its nvvm.annotations nodes
    if "nvvm.annotations" in m.namedmetadata:
        for md in m.namedmetadata["nvvm.annotations"].operands:
            annot.setdefault(md.operands[0].name, []).append(md)
    out = []
    done: dict = {}
    for k in kernels:
        first = twins.get(k.name)
        if first is not None:
            out.append(done[first])
            continue
        fn = m.get_global(k.name)
        body = str(fn)
        own = [str(g) for n, g in globals_.items()
               if n.startswith(k.name + ".") or f'@"{n}"' in body]
        meta = [str(md) for md in generic]  # numbered as in m: gaps are allowed
        refs = []  # the kernel's annotations, numbered after m's nodes (the same in every
        for i, md in enumerate(annot.get(k.name, [])):  # kernel's module: dedup sees equals)
            refs.append(f"!{len(m.metadata) + i}")
            meta.append(refs[-1] + str(md)[len(md.get_reference()):])
        if refs:
            meta.append(f"!nvvm.annotations = !{{{', '.join(refs)}}}")
        if flags:
            meta.append(f"!llvm.module.flags = !{{{', '.join('!' + f.name for f in flags)}}}")
        text = "\n".join(head + decls + own + [body] + meta) + "\n"
        out.append(_rename(text, k.name, PLACEHOLDER))
        done[k.name] = out[-1]
    return out


def _rename(text: str, old: str, new: str) -> str:
    """``old``'s quoted LLVM names (``@"old"``, ``@"old.shared0"``) as ``new``'s."""
    return text.replace(f'"{old}"', f'"{new}"').replace(f'"{old}.', f'"{new}.')


def key(text: str) -> str:
    """The identity of a kernel's module (two launches with the same key share their code)."""
    return hashlib.sha256(text.encode()).hexdigest()


def privatize(mod) -> None:
    """Rename every function and global defined in an optimized kernel module besides the
    kernel to ``ptxcKERNEL_<name>`` (they are internal, so no one outside sees the name)."""
    for f in mod.functions:
        if not f.is_declaration and f.name != PLACEHOLDER and PLACEHOLDER not in f.name:
            f.name = f"{PLACEHOLDER}_{f.name}"
    for g in mod.global_variables:
        if not g.is_declaration and PLACEHOLDER not in g.name:
            g.name = f"{PLACEHOLDER}_{g.name}"


def join_ptx(parts: list[tuple[str, str]]) -> str:
    """One PTX text from ``(kernel name, PTX of its module)`` pairs, in order: the header
    (``.version``, ``.target``, ``.address_size``) once, then the ``.extern`` declarations
    once each, then each kernel's text with :data:`PLACEHOLDER` as its name."""
    header, externs, bodies = None, [], []
    for name, ptx in parts:
        m = _HEADER_END.search(ptx)
        if m is None:
            raise ValueError(f"PTX of {name} has no .address_size line")
        if header is None:
            header = ptx[:m.end()]
        rest = ptx[m.end():]
        for e in _EXTERN.findall(rest):
            if e not in externs:
                externs.append(e)
        bodies.append(_EXTERN.sub("", rest).replace(PLACEHOLDER, name))
    if header is None:
        return ""
    return header + "".join(externs) + "".join(bodies)
