"""Helpers for tests that write IR as text: a module from a few lines of ops, and the ops of
``main`` printed one per line (for exact before/after expectations)."""

from ptxc.ir import parse_ir, print_ir, verify


def module(args: str, body: str, rets: list[tuple[str, str]]):
    """A verified module: ``args`` as ``"%x: tensor<4xf32>, ..."``, ``body`` the ops (one a
    line), ``rets`` the returned (value, type) pairs."""
    arg_list = [a.strip() for a in args.split(", %")] if args else []
    arg_list = [a if a.startswith("%") else "%" + a for a in arg_list]
    names = ", ".join(f'"{a.split(":")[0].strip()[1:]}"' for a in arg_list)
    arg_types = ", ".join(a.split(":", 1)[1].strip() for a in arg_list)
    ret_vals = ", ".join(v for v, _ in rets)
    ret_types = ", ".join(t for _, t in rets)
    res_names = ", ".join(f'"r{i}"' for i in range(len(rets)))
    body = "\n".join("    " + ln.strip() for ln in body.strip().splitlines())
    m = parse_ir(f'''"builtin.module"() ({{
  "func.func"() ({{
  ^bb0({args}):
{body}
    "func.return"({ret_vals}) : ({ret_types}) -> ()
  }}) {{arg_names = [{names}], function_type = ({arg_types}) -> ({ret_types}), result_names = [{res_names}], sym_name = "main"}} : () -> ()
}}) : () -> ()
''')
    verify(m)
    return m


def body_lines(m) -> list[str]:
    """The ops of main, one per line, stripped."""
    lines = print_ir(m).splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.strip().startswith("^bb0"))
    out = []
    for ln in lines[start + 1:]:
        if ln.strip().startswith("}) {arg_names"):
            break
        out.append(ln.strip())
    return out
