"""Pipeline text, as MLIR's ``--pass-pipeline``: ``dce,canonicalize{max-iterations=4},cse``.

A pipeline is passes separated by commas; a pass may carry options in braces, separated by
spaces or commas: ``canonicalize{max-iterations=4 verify-patterns=true}``. A tuple option takes
comma-separated items in quotes or brackets: ``some-pass{ops=[a,b]}``. ``str()`` of a pass gives
its pipeline text, so ``format_pipeline(parse_pipeline(t))`` is ``t`` up to spacing and default
options.
"""

from __future__ import annotations

import re
from typing import Callable, Mapping

from ..errors import CompileError
from .pass_ import Pass, get_pass

_NAME = re.compile(r"[a-z][a-z0-9]*(?:-[a-z0-9]+)*")
_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_\-]*")


class _Scanner:
    def __init__(self, text: str):
        self.text = text
        self.pos = 0

    def error(self, msg: str) -> CompileError:
        return CompileError(f"pipeline {self.text!r}, column {self.pos + 1}: {msg}")

    def ws(self) -> None:
        while self.pos < len(self.text) and self.text[self.pos].isspace():
            self.pos += 1

    def peek(self, ch: str) -> bool:
        self.ws()
        return self.text.startswith(ch, self.pos)

    def accept(self, ch: str) -> bool:
        if self.peek(ch):
            self.pos += len(ch)
            return True
        return False

    def match(self, regex: re.Pattern, what: str) -> str:
        self.ws()
        m = regex.match(self.text, self.pos)
        if not m:
            raise self.error(f"expected {what}")
        self.pos = m.end()
        return m.group(0)

    def value(self) -> str:
        self.ws()
        if self.accept("["):
            end = self.text.find("]", self.pos)
            if end < 0:
                raise self.error("unclosed '['")
            v, self.pos = self.text[self.pos:end], end + 1
            return v
        if self.peek('"') or self.peek("'"):
            q = self.text[self.pos]
            end = self.text.find(q, self.pos + 1)
            if end < 0:
                raise self.error(f"unclosed {q}")
            v, self.pos = self.text[self.pos + 1:end], end + 1
            return v
        start = self.pos
        while self.pos < len(self.text) and not self.text[self.pos].isspace() and \
                self.text[self.pos] not in ",}":
            self.pos += 1
        if self.pos == start:
            raise self.error("expected an option value")
        return self.text[start:self.pos]


#: named pipelines: a name that stands for a pipeline text (``graph-opt``), read from the
#: installed table (ptxc.rewrite.passes.all_pipelines) on first use
_PIPELINES: dict[str, str] = {}
_table: Callable[[], Mapping[str, str]] | None = None


def install_pipeline_table(table: Callable[[], Mapping[str, str]]) -> None:
    """Give the named pipelines their table (a function returning ``{name: pipeline text}``,
    each text checked when first used); it is called on the first :func:`parse_pipeline`."""
    global _table
    if _table is not None and _table is not table:
        raise ValueError(f"a pipeline table is installed already ({_table.__module__}."
                         f"{_table.__qualname__})")
    _table = table


def registered_pipelines() -> dict[str, str]:
    if not _PIPELINES:
        if _table is None:
            raise CompileError("no pipeline table is installed: ptxc/__init__.py installs "
                               "ptxc.rewrite.passes.all_pipelines")
        for name, text in _table().items():
            if not _NAME.fullmatch(name):
                raise ValueError(f"pipeline name {name!r} must be kebab-case")
            _PIPELINES[name] = text
    return dict(_PIPELINES)


def parse_pipeline(text: str) -> list[Pass]:
    """The passes of a pipeline text (see the module docstring); errors name the column.
    A registered pipeline name expands to its passes."""
    pipelines = registered_pipelines()
    s = _Scanner(text)
    passes: list[Pass] = []
    s.ws()
    if s.pos == len(text):
        return passes
    while True:
        name = s.match(_NAME, "a pass name (kebab-case)")
        options: dict[str, str] = {}
        if s.accept("{"):
            while not s.accept("}"):
                if s.pos >= len(text):
                    raise s.error("unclosed '{'")
                key = s.match(_KEY, "an option name")
                if not s.accept("="):
                    raise s.error(f"expected '=' after option {key!r}")
                if key in options:
                    raise s.error(f"option {key!r} given twice")
                options[key] = s.value()
                s.accept(",")
        if name in pipelines and not options:
            passes.extend(parse_pipeline(pipelines[name]))
            s.ws()
            if s.pos == len(text):
                return passes
            if not s.accept(","):
                raise s.error("expected ',' between passes")
            continue
        try:
            passes.append(get_pass(name, **options))
        except CompileError as e:
            raise CompileError(f"pipeline {text!r}: {e}") from None
        s.ws()
        if s.pos == len(text):
            return passes
        if not s.accept(","):
            raise s.error("expected ',' between passes")


def format_pipeline(passes) -> str:
    """Pipeline text for ``passes``."""
    return ",".join(str(p) for p in passes)
