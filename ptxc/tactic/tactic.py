"""A tactic: one way to generate one kernel, as a value that can be printed, hashed and stored.

    t = Tactic("mma", {"mma_stages": 4, "mma_tiles": ("128x128x2x2",)})
    str(t)                     # 'mma{mma-stages=4 mma-tiles=[128x128x2x2]}'
    Tactic.parse(str(t), MapToGpu) == t
    Tactic.from_json(t.to_json()) == t
    t.apply(map_to_gpu_pass)   # the pass with these options, for this kernel only

Every target has one *schedule pass*: the pass of its loop stage that decides how each top-level
kernel becomes code (cuda: ``map-to-gpu``; cpu: ``cpu-schedule``). A tactic names

* ``schedule``: which of the pass's schedules must take the kernel (``"auto"``: the pass tries
  its schedules in its own order, as a build without tuning does), and
* ``params``: values for the pass's option fields (snake_case), for this kernel only.

So the candidates are the pass's own options, per kernel: the same names the pipeline text and
``pass_options`` use, validated by the same field validators (:meth:`apply`). The default
heuristic is the tactic ``auto`` with no params (:data:`DEFAULT`): one tactic among the others,
and what a build without tuning gets.

Text form: the pipeline text's option syntax (``name{key=value ...}``, kebab-case keys, ``[a,b]``
for lists), so a tactic reads like the pass option it is. JSON form (timing caches):
``{"schedule": ..., "params": {field: value}}``, lists for tuples.
"""

from __future__ import annotations

import hashlib
import json
import re

import attrs

from ..errors import TuningError

_SCHEDULE = re.compile(r"[a-z][a-z0-9_]*")
_JSON_SCALARS = (bool, int, float, str)


def _freeze_params(value) -> tuple:
    """``params`` as a sorted tuple of ``(field, value)``, lists made tuples (hashable)."""
    items = value.items() if isinstance(value, dict) else value
    out = []
    for k, v in items:
        if not isinstance(k, str) or not k.isidentifier():
            raise TuningError(f"tactic option {k!r} is not an option field name")
        out.append((k, tuple(v) if isinstance(v, list) else v))
    keys = [k for k, _ in out]
    if len(set(keys)) != len(keys):
        raise TuningError(f"tactic options {keys} name an option twice")
    return tuple(sorted(out))


@attrs.frozen
class Tactic:
    """See the module docstring. ``schedule`` names one of the schedule pass's schedules, or
    ``auto``; ``params`` maps option fields to values (kept as a sorted tuple of pairs)."""

    schedule: str = "auto"
    params: tuple = attrs.field(default=(), converter=_freeze_params)

    def __attrs_post_init__(self):
        if not isinstance(self.schedule, str) or not _SCHEDULE.fullmatch(self.schedule):
            raise TuningError(f"tactic schedule {self.schedule!r} is not a schedule name")
        for k, v in self.params:
            ok = isinstance(v, _JSON_SCALARS) or (
                isinstance(v, tuple) and all(isinstance(x, _JSON_SCALARS) for x in v))
            if not ok:
                raise TuningError(f"tactic option {k}={v!r}: a value is a bool, int, float, "
                                  "str or a tuple of them")

    @property
    def options(self) -> dict:
        """``params`` as a dict (field -> value)."""
        return dict(self.params)

    def __str__(self) -> str:
        from ..rewrite.pass_ import format_option
        if not self.params:
            return self.schedule
        return self.schedule + "{" + " ".join(
            f"{k.replace('_', '-')}={format_option(v)}" for k, v in self.params) + "}"

    @property
    def digest(self) -> str:
        """A short stable hash of the tactic (16 hex digits)."""
        return hashlib.sha256(json.dumps(self.to_json(), sort_keys=True).encode()).hexdigest()[:16]

    # ---- storage --------------------------------------------------------------------------------
    def to_json(self) -> dict:
        return {"schedule": self.schedule,
                "params": {k: list(v) if isinstance(v, tuple) else v for k, v in self.params}}

    @classmethod
    def from_json(cls, data) -> "Tactic":
        """The tactic of :meth:`to_json`'s dict; a TuningError for anything else."""
        if not isinstance(data, dict) or set(data) - {"schedule", "params"} or \
                not isinstance(data.get("params", {}), dict):
            raise TuningError(f"a tactic is {{'schedule': str, 'params': {{...}}}}, not "
                              f"{data!r}")
        return cls(data.get("schedule", "auto"), data.get("params", {}))

    @classmethod
    def parse(cls, text: str, pass_cls=None) -> "Tactic":
        """The tactic written as ``str()`` writes it. With ``pass_cls`` (the schedule pass's
        class) the values take the option fields' types, as pipeline text's do; without it they
        stay strings. A TuningError names the column of a syntax error."""
        from ..rewrite.pipeline import _Scanner
        s = _Scanner(text)
        try:
            schedule = s.match(_SCHEDULE, "a schedule name")
            raw: dict[str, str] = {}
            if s.accept("{"):
                while not s.accept("}"):
                    if s.pos >= len(text):
                        raise s.error("unclosed '{'")
                    key = s.match(re.compile(r"[A-Za-z_][A-Za-z0-9_\-]*"), "an option name")
                    if not s.accept("="):
                        raise s.error(f"expected '=' after option {key!r}")
                    raw[key.replace("-", "_")] = s.value()
                    s.accept(",")
            s.ws()
            if s.pos != len(text):
                raise s.error("unexpected text after the tactic")
        except Exception as e:  # the scanner's CompileError, as this module's error
            raise TuningError(f"tactic {text!r}: {e}") from None
        params = raw if pass_cls is None else _typed(raw, pass_cls, text)
        return cls(schedule, params)

    # ---- use ------------------------------------------------------------------------------------
    def apply(self, schedule_pass):
        """``schedule_pass`` (a frozen pass object) with this tactic's params set; a TuningError
        naming the tactic where an option is unknown or its value is refused by the pass's
        validators."""
        if not self.params:
            return schedule_pass
        fields = attrs.fields_dict(type(schedule_pass))
        unknown = [k for k, _ in self.params if k not in fields]
        if unknown:
            raise TuningError(f"tactic {self}: {schedule_pass.name} has no option "
                              f"{', '.join(unknown)}")
        try:
            return attrs.evolve(schedule_pass, **_typed(self.options, type(schedule_pass),
                                                        str(self)))
        except (ValueError, TypeError) as e:
            raise TuningError(f"tactic {self}: {e}") from None


def _typed(raw: dict, pass_cls, where: str) -> dict:
    """Option values converted to ``pass_cls``'s field types (pipeline text's conversion)."""
    from ..errors import CompileError
    from ..rewrite.pass_ import convert_option
    fields = attrs.fields_dict(pass_cls)
    out = {}
    for k, v in raw.items():
        if k not in fields:
            raise TuningError(f"tactic {where!r}: {pass_cls.name} has no option "
                              f"{k.replace('_', '-')}")
        try:
            out[k] = convert_option(pass_cls.name, fields[k], v)
        except CompileError as e:
            raise TuningError(f"tactic {where!r}: {e}") from None
    return out


#: the default heuristic: the schedule pass's own choice, no option changed
DEFAULT = Tactic()
