"""How long a string a chat template's single C-level operation would build, before it builds it.

A template's time limit (deadline.py) lands between Python instructions; one call into C such as
``'x'.center(10**10)`` runs to its end (27 s, 10 GB). So the sandbox (prompt.py) asks these
functions for the size an operation would produce, from its arguments alone, and refuses it when
that is over the render bound. Each estimate is an upper bound that costs at most one pass over
strings already built; 0 means "not a building operation, or a bounded one".
"""

from __future__ import annotations

import re
import string
from typing import Any

_NUMBER = re.compile(r"\d+")
_WIDTH_METHODS = ("center", "ljust", "rjust", "zfill")


def call_size(method: Any, args: tuple, kwargs: dict) -> int:
    """For a bound method of a str (or bytes): the longest result it can give."""
    text, name = getattr(method, "__self__", None), getattr(method, "__name__", "")
    if not isinstance(text, (str, bytes)):
        return 0
    arg = _argument(args, kwargs)
    if name in _WIDTH_METHODS:
        return _int(arg(0, "width"))
    if name == "expandtabs":
        return len(text) * max(_int(arg(0, "tabsize", 8)), 1)
    if name == "replace":
        return replace_size(text, arg(0, "old", ""), arg(1, "new", ""))
    if name == "join":
        return join_size(text, arg(0, "iterable", ()))
    if name == "translate":
        table = arg(0, "table", {})
        longest = max((len(v) for v in table.values() if isinstance(v, (str, bytes))), default=1) \
            if isinstance(table, dict) else 1
        return len(text) * max(longest, 1)
    return 0


def replace_size(text, old, new) -> int:
    if not isinstance(old, (str, bytes)) or not isinstance(new, (str, bytes)):
        return 0
    found = len(text) + 1 if not old else text.count(old)
    return len(text) + max(len(new) - len(old), 0) * found


def join_size(separator, items) -> int:
    """Only for a list or tuple: a generator would be used up by counting it (``listed`` first)."""
    if not isinstance(items, (list, tuple)):
        return 0
    parts = sum(len(item) for item in items if isinstance(item, (str, bytes)))
    return parts + len(separator) * max(len(items) - 1, 0)


def format_size(template: str, args: tuple, kwargs: dict) -> int:
    """``str.format``: a width or precision written in a field (``{:>99999999}``) or, in a nested
    field (``{:{}}``), passed as an argument."""
    widest = 0
    try:
        fields = [spec for _, name, spec, _ in string.Formatter().parse(template) if name is not None and spec]
    except ValueError:
        return 0   # not a valid format: str.format raises it
    for spec in fields:
        widest = max([widest, *(int(n) for n in _NUMBER.findall(spec))])
        if "{" in spec:
            widest = max([widest, *(_int(v) for v in (*args, *kwargs.values()))])
    return widest


def percent_size(template, values) -> int:
    """``template % values``: a width or precision written (``%99999999d``) or passed with ``*``."""
    if not isinstance(template, str):
        return 0
    widest = max((int(n) for n in _NUMBER.findall(template)), default=0)
    if "*" in template:
        passed = values if isinstance(values, tuple) else (values,)
        widest = max([widest, *(_int(v) for v in passed)])
    return widest + len(template)


def concat_size(left, right) -> int:
    """``left + right`` for two strings, lists or tuples (doubling in a loop reaches gigabytes in 30 steps)."""
    if isinstance(left, (str, bytes, list, tuple)) and type(left) is type(right):
        return len(left) + len(right)
    return 0


def indent_size(text, width) -> int:
    """Jinja's ``indent`` filter: the indent (a count or a string) before every line."""
    lines = str(text).count("\n") + 1
    return len(str(text)) + lines * (len(width) if isinstance(width, str) else _int(width))


def _argument(args: tuple, kwargs: dict):
    def arg(index: int, name: str, default: Any = 0) -> Any:
        return args[index] if len(args) > index else kwargs.get(name, default)
    return arg


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0
