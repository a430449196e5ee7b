"""llama.cpp's grammar sampler over one model's vocabulary, and llama-cpp-python's JSON-Schema-to-GBNF
converter: the two pieces constrained decoding takes from llama.cpp rather than writing its own.

``TokenGrammar`` is one grammar state: which tokens it allows next (``allowed``: llama.cpp's
``llama_sampler_apply`` on those candidates, every one it rejects set to -inf), a copy of the state
(``clone``) and the state after a token (``accept``). llama.cpp aborts the process when a grammar
accepts a token it forbids (an end-of-generation token before the grammar is complete) and throws
through the C API for any other, so ``accept`` takes only a token ``allowed`` let through: the
speculative loop (app/core/speculation/constraint.py) checks every token before it accepts it.
"""

from __future__ import annotations

import ctypes
import json
import os
import re
import sys
import tempfile
import threading
from typing import Any, Sequence

import numpy as np

from app.core.errors import QuickdraftError
from app.core.llama import library
from app.core.llama.library import lib

# llama_token_data as numpy lays it out: id, logit, p (int32, float32, float32; 12 bytes, no padding)
TOKEN_DATA = np.dtype([("id", "<i4"), ("logit", "<f4"), ("p", "<f4")])
ROOT = "root"
_stderr_lock = threading.Lock()


class GrammarError(QuickdraftError):
    """A GBNF grammar llama.cpp cannot parse, or a JSON Schema the converter cannot turn into one."""


class TokenGrammar:
    """One state of a GBNF grammar over ``model``'s vocabulary (a loaded ``LlamaModel``). Raises
    GrammarError naming the problem when llama.cpp refuses the grammar."""

    def __init__(self, model, gbnf: str | None = None, *, _sampler=None):
        self.model = model
        if _sampler is not None:
            self._sampler = _sampler
            return
        if not gbnf or not gbnf.strip():
            raise GrammarError("The grammar is empty.")
        self._sampler = _parse(model, gbnf)

    def allowed(self, ids: np.ndarray) -> np.ndarray:
        """Which of the token ``ids`` the grammar allows next, as booleans."""
        data = np.zeros(len(ids), dtype=TOKEN_DATA)
        data["id"] = ids
        llama_cpp = lib()
        array = llama_cpp.llama_token_data_array(data.ctypes.data_as(llama_cpp.llama_token_data_p), len(data), -1, False)
        llama_cpp.llama_sampler_apply(self._sampler, ctypes.byref(array))
        return np.isfinite(data["logit"])

    def allows(self, token: int) -> bool:
        return bool(self.allowed(np.array([token], dtype=np.int32))[0])

    def accept(self, token: int) -> None:
        """The state after ``token``, which ``allowed`` must have let through (see the module docstring)."""
        lib().llama_sampler_accept(self._sampler, int(token))

    def clone(self) -> "TokenGrammar":
        return TokenGrammar(self.model, _sampler=lib().llama_sampler_clone(self._sampler))

    def close(self) -> None:
        if self._sampler:
            lib().llama_sampler_free(self._sampler)
            self._sampler = None

    def __del__(self):  # pragma: no cover - safety net; the loop closes its states
        try:
            self.close()
        except Exception:
            pass


def _parse(model, gbnf: str):
    """llama.cpp's grammar sampler for ``gbnf``. Its parser prints why it refuses a grammar to the
    process's stderr (not through its log), so stderr is read into a file while it parses: the reason
    goes into the GrammarError, and anything else written meanwhile is passed on to stderr."""
    library.take_messages()
    with _stderr_lock, tempfile.TemporaryFile() as caught:
        sys.stderr.flush()
        saved = os.dup(2)
        try:
            os.dup2(caught.fileno(), 2)
            sampler = lib().llama_sampler_init_grammar(model.vocab, gbnf.encode("utf-8"), ROOT.encode())
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        caught.seek(0)
        printed = caught.read().decode("utf-8", "replace")
    if not sampler:
        raise GrammarError(f"The grammar is not valid GBNF: {_reason(printed, ' '.join(library.take_messages()))}.")
    if printed:
        sys.stderr.write(printed)
    return sampler


def _reason(printed: str, logged: str) -> str:
    found = re.search(r"error parsing grammar: ([^\n]*)", printed)
    if found:   # "expecting ')' at " and the grammar's rest, which is empty at its end
        reason = found.group(1).strip()
        return (reason + " the end of the grammar" if reason.endswith(" at") else reason)[:200]
    said = " ".join(logged.replace("failed to parse grammar", "").split())
    return said[:200] if said else "llama.cpp could not parse it"


# --- JSON Schema to GBNF -----------------------------------------------------------------------------

def schema_converter(prop_order: Sequence[str] = ()):
    """llama-cpp-python's converter, for rules of several schemas in one grammar (``schema_rule``)."""
    from llama_cpp.llama_grammar import SchemaConverter

    return SchemaConverter(prop_order={name: i for i, name in enumerate(prop_order)}, allow_fetch=False,
                           dotall=False, raw_pattern=False)


def schema_rule(converter, schema: Any, name: str, what: str = "The JSON Schema") -> str:
    """Add ``schema``'s rules to ``converter`` under ``name``; returns the rule's name. Raises
    GrammarError naming what the converter could not read."""
    if not isinstance(schema, dict):
        raise GrammarError(f"{what} must be a JSON object; got {type(schema).__name__} {schema!r:.60}.")
    try:
        resolved = converter.resolve_refs(json.loads(json.dumps(schema)), "")
        return converter.visit(resolved, name)
    except RecursionError:
        raise GrammarError(f"{what} nests too deeply to be turned into a grammar.") from None
    except Exception as exc:   # the converter asserts and raises what it finds; each is the schema's fault
        raise GrammarError(f"{what} cannot be turned into a grammar: {str(exc) or type(exc).__name__}"[:300]
                           .rstrip(".") + ".") from None


def json_schema_grammar(schema: Any, what: str = "The JSON Schema") -> str:
    """The GBNF grammar of JSON values ``schema`` allows (llama-cpp-python's converter)."""
    converter = schema_converter()
    schema_rule(converter, schema, "", what)
    return grammar_text(converter)


# llama-cpp-python's converter lets a JSON string hold control characters, which JSON forbids (strict
# parsers, pydantic's among them, refuse the answer); llama.cpp's own converter has the strict rule
_STRICT_CHAR = r'char ::= [^"\\\x7F\x00-\x1F] | "\\" (["\\/bfnrt] | "u" [0-9a-fA-F] [0-9a-fA-F] [0-9a-fA-F] [0-9a-fA-F])'


def grammar_text(converter) -> str:
    """The converter's rules as one GBNF text, with JSON's own rule for a string's characters."""
    from llama_cpp.llama_grammar import PRIMITIVE_RULES

    loose = "char ::= " + PRIMITIVE_RULES["char"].content
    return "\n".join(_STRICT_CHAR if line == loose else line for line in converter.format_grammar().split("\n"))


def gbnf_literal(text: str) -> str:
    """``text`` as a GBNF string literal."""
    return schema_converter()._format_literal(text)


def gbnf_not_containing(text: str) -> str:
    """A GBNF expression for one step of text that cannot begin ``text`` (repeat it for free text
    that never contains ``text``: Qwen3-Coder's parameter values)."""
    return schema_converter().not_literal(text)
