"""The Jinja sandbox chat templates render in: bounded (no single operation may build a string past
RENDER_MAX_CHARS or raise a huge power: a deadline cannot interrupt one C call) and read as llama.cpp's
own Jinja engine reads them where the two differ (nothing added to text is empty text)."""

from __future__ import annotations

import functools
import json
from datetime import datetime
from functools import lru_cache

from app.core.chat import sizes

RENDER_MAX_CHARS = 4_000_000
_MAX_POWER = 1024


@lru_cache(maxsize=8)
def compile_template(template: str):
    """``template`` compiled in the bounded sandbox, with the globals and filters chat templates use."""
    from jinja2.exceptions import TemplateError

    def raise_exception(message: str):
        raise TemplateError(message)

    env = _bounded_sandbox_class()(trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"])
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    env.filters["tojson"] = _tojson
    _bound_filters(env)
    return env.from_string(template)


def _bound_filters(env) -> None:
    """Jinja's filters that build a string in one C call, checked before they build it (sizes.py)."""
    from jinja2.filters import make_attrgetter

    def join_size(eval_ctx, value, d="", attribute=None):
        return sizes.join_size(d, value)

    def listed_join(join):   # a generator is listed first, so that it can be counted and then joined
        def listed(eval_ctx, value, d="", attribute=None):
            if attribute is not None:
                value, attribute = map(make_attrgetter(eval_ctx.environment, attribute), value), None
            return join(eval_ctx, value if isinstance(value, (list, tuple)) else list(value), d)
        return listed

    checks = {
        "center": lambda value, width=80: sizes.call_size(str(value).center, (width,), {}),
        "indent": lambda s, width=4, *args, **kwargs: sizes.indent_size(s, width),
        "replace": lambda eval_ctx, s, old, new, count=None: sizes.replace_size(str(s), old, new),
        "format": lambda value, *args, **kwargs: sizes.percent_size(str(value), kwargs or args),
        "join": join_size,
    }
    for name, size in checks.items():
        env.filters[name] = _checked_filter(name, env.filters[name], size)
    env.filters["join"] = functools.wraps(env.filters["join"])(listed_join(env.filters["join"]))


def _checked_filter(name: str, filter_, size):
    from jinja2.exceptions import SecurityError

    @functools.wraps(filter_)   # keeps Jinja's pass_eval_context mark
    def checked(*args, **kwargs):
        if size(*args, **kwargs) > RENDER_MAX_CHARS:
            raise SecurityError(f"a '{name}' filter whose result is too long for a chat template")
        return filter_(*args, **kwargs)
    return checked


def _tojson(value, ensure_ascii: bool = False, indent=None, separators=None, sort_keys: bool = False) -> str:
    """JSON as chat templates expect it (Hugging Face's and llama.cpp's ``tojson``): keys in their
    order, text not escaped for HTML, as Jinja's own filter does (it writes "<" as "\\u003c")."""
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


@lru_cache(maxsize=1)
def _bounded_sandbox_class():
    from jinja2.compiler import CodeGenerator
    from jinja2.exceptions import SecurityError
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def refuse_over_bound(size: int, what: str) -> None:
        if size > RENDER_MAX_CHARS:
            raise SecurityError(f"{what} too long for a chat template")

    class BoundedGenerator(CodeGenerator):
        def visit_Concat(self, node, frame) -> None:   # ``a ~ b``: checked once built (its parts are bounded)
            self.write("environment.bounded_concat(")
            super().visit_Concat(node, frame)
            self.write(")")

    class BoundedSandbox(ImmutableSandboxedEnvironment):
        """Refuses the single operations a deadline cannot interrupt: a huge repeat or power, and
        string building past the render bound (a width, a replace, a join, a format: sizes.py)."""

        intercepted_binops = frozenset({"*", "**", "+", "%"})
        code_generator_class = BoundedGenerator

        def call_binop(self, context, operator, left, right):
            if operator == "+" and _nothing_and_text(left, right):
                # llama.cpp's Jinja adds null or undefined to a string as "" (firefunction-v2 adds a
                # ``functions`` nobody sets), where Jinja's raises: templates written for it render here too
                left, right = ("" if _is_nothing(v) else v for v in (left, right))
            if operator == "**" and isinstance(right, int) and abs(right) > _MAX_POWER:
                raise SecurityError("a power too large for a chat template")
            if operator == "*":
                refuse_over_bound(_repeat_size(left, right), "a repetition")
            refuse_over_bound(sizes.concat_size(left, right) if operator == "+" else 0, "a concatenation")
            refuse_over_bound(sizes.percent_size(left, right) if operator == "%" else 0, "a % format")
            return super().call_binop(context, operator, left, right)

        def call(__self, __context, __obj, *args, **kwargs):  # noqa: N805 (Jinja's names: no clash with kwargs)
            if getattr(__obj, "__name__", "") == "join" and args and not isinstance(args[0], (list, tuple)):
                args = (list(args[0]), *args[1:])   # listed, so that it can be counted and then joined
            refuse_over_bound(sizes.call_size(__obj, args, kwargs), f"a {getattr(__obj, '__name__', 'call')}()")
            return super().call(__context, __obj, *args, **kwargs)

        def wrap_str_format(self, value):
            wrapped = super().wrap_str_format(value)
            if wrapped is None:
                return None

            def bounded(*args, **kwargs):
                named = args[0] if value.__name__ == "format_map" and args and isinstance(args[0], dict) else kwargs
                refuse_over_bound(sizes.format_size(value.__self__, args, named), "a format()")
                return wrapped(*args, **kwargs)
            return bounded

        def bounded_concat(self, value):
            refuse_over_bound(len(value), "a concatenation")
            return value

    return BoundedSandbox


def _is_nothing(value) -> bool:
    from jinja2 import Undefined

    return value is None or isinstance(value, Undefined)


def _nothing_and_text(left, right) -> bool:
    return (_is_nothing(left) and isinstance(right, str)) or (isinstance(left, str) and _is_nothing(right))


def _repeat_size(left, right) -> int:
    for seq, count in ((left, right), (right, left)):
        if isinstance(seq, (str, list, tuple)) and isinstance(count, int):
            return len(seq) * count
    return 0



# --- tokens ---------------------------------------------------------------------------------------
