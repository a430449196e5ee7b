"""The engine's front door: what a front end asks for (GenerationRequest), what it learns about the
pair it talks to (LoadedPair), and the one interface both engines implement (AnswerEngine).

The window, the server, the command line, compare and the scripts talk to ``Engine`` (local models)
and ``RemoteEngine`` (an OpenAI-compatible server) only through AnswerEngine, so a front end never
depends on which one it holds. Strings from users are parsed at the edges (argparse, settings, HTTP):
nothing here takes a drafter's name, only a DrafterKind.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from app.core.chat.prompt import Message, Prompt
from app.core.chat.reasoning import ThinkingFormat
from app.core.lm import FimTokens
from app.core.params import DEFAULT_DRAFTER, DrafterKind, SamplingParams, SpeculationParams
from app.core.speculation.events import Event


@dataclass(frozen=True)
class GenerationRequest:
    """One answer to generate: to ``messages`` (rendered with the model's chat template and
    ``template_variables``), or to raw ``prompt`` tokens when they are given."""

    messages: Sequence[Message] = ()
    prompt: Sequence[int] | None = None
    sampling: SamplingParams = SamplingParams()
    speculation: SpeculationParams = SpeculationParams()
    drafter: DrafterKind = DEFAULT_DRAFTER
    cancel: threading.Event = field(default_factory=threading.Event, compare=False)
    template_variables: Mapping[str, Any] = field(default_factory=dict)
    # marker texts a reader of the answer needs (a tool-call format's): where they are control tokens,
    # the answer's text spells them instead of rendering nothing
    spell: Sequence[str] = ()
    # (opening, closing) texts around a tool call in this answer (tools.CALL_SPANS), for the rounds'
    # parts; None: the common markers
    tool_spans: Sequence[tuple[str, str]] | None = None
    # start from empty caches, so that no run of a comparison gets a head start from the one before
    empty_cache: bool = False
    # a GBNF grammar the answer must follow (llama.cpp's syntax, start rule "root"), enforced on the main
    # model's distribution at every verified position (app/core/speculation/constraint.py); None: free text
    grammar: str | None = None
    # whether the answer feeds the engine's suffix index (app/core/speculation/suffix_memory.py): a
    # comparison's runs do not, or its plain answer would be drafted back whole by its speculative run
    feed_suffix_index: bool = True

    def __post_init__(self) -> None:
        # a name is parsed where it is typed (argparse, settings, HTTP): the core takes only the kind
        if not isinstance(self.drafter, DrafterKind):
            raise TypeError(f"drafter must be a DrafterKind, not {self.drafter!r}")


@dataclass(frozen=True)
class LoadedPair:
    """What the loaded pair is, made once by the engine that loaded it: names and files, its context
    and vocabulary, where its layers went, how its model thinks, and who drafts for each choice."""

    main_name: str
    main_path: str
    draft_name: str | None = None
    draft_path: str | None = None
    n_ctx: int = 0                       # 0: not known (a remote server's)
    n_vocab: int = 0
    warnings: tuple[str, ...] = ()
    placement: tuple[tuple[str, str], ...] = ()   # (model, where its layers went)
    has_draft_model: bool = False        # a draft model is loaded
    drafts_as: DrafterKind | None = None  # the draft is a drafter file: the kind it drafts as (MTP, EAGLE-3)
    other_vocabulary: str | None = None  # the draft's vocabulary is another: how many tokens they share
    thinking: ThinkingFormat | None = None      # the main model thinks: its reasoning markers (thinking on)
    thinking_off: ThinkingFormat | None = None  # the same with its template's switch off (None: no switch)
    chat_template: str | None = None
    remote_url: str | None = None        # a server answers, at this address as it was given
    suffix_index: bool = False           # the engine keeps a suffix index: the default asks it after lookup

    @property
    def model_id(self) -> str:
        """The name clients ask for: the main model's file name without its extension."""
        return Path(self.main_path).stem

    @property
    def main_file(self) -> str:
        return Path(self.main_path).name

    @property
    def draft_file(self) -> str | None:
        return Path(self.draft_path).name if self.draft_path else None

    def who_drafts(self, chosen: DrafterKind, speculation: SpeculationParams | None = None) -> DrafterKind:
        """Who drafts with this pair when ``chosen`` is asked for (``DrafterKind.for_pair``: lookup
        drafts without a draft model, or the default does where a suffix index can stand in for the
        model; a drafter file drafts as its kind); NONE when nobody does,
        which is also so when ``speculation`` drafts at most 0 tokens (no round can draft)."""
        if speculation is not None and speculation.draft_max == 0:
            return DrafterKind.NONE
        if chosen is DrafterKind.LOOKUP_MODEL and self.suffix_index and self.drafts_as is None:
            return chosen   # the default stays itself: lookup, else the suffix index (else the model, if any)
        return chosen.for_pair(self.has_draft_model, self.drafts_as)


class AnswerEngine(Protocol):
    """What every front end may use of an engine, local or remote. One thread owns an engine."""

    @property
    def pair(self) -> LoadedPair:
        """The loaded pair, described once."""

    def generate(self, request: GenerationRequest) -> Iterator[Event]:
        """The answer's events: Started (local engines), TokenPiece and Round events, a Summary last;
        each is final as it comes."""

    def prompt(self, messages: Sequence[Message], variables: Mapping[str, Any] | None = None,
               prefill: Sequence[tuple[str, bool]] = ()) -> Prompt:
        """``messages`` as prompt tokens with the main model's chat template (``prefill``: text that
        begins the answer); raises QuickdraftError where the engine cannot render prompts."""

    def tokenize(self, text: str, add_special: bool = True, parse_special: bool = True) -> list[int]:
        """A raw prompt text as tokens: ``add_special`` adds the model's BOS where it wants one,
        ``parse_special`` reads control-token text as control tokens."""

    def pieces(self, tokens: Sequence[int]) -> list[bytes]:
        """Each token's bytes, control tokens rendered as their text (llama-server's /detokenize)."""

    def fim_tokens(self) -> FimTokens:
        """The main model's fill-in-the-middle tokens (llama-server's /infill)."""

    def eog_tokens(self) -> list[int]:
        """The main model's end-of-generation tokens (llama-server's ignore_eos bans them)."""

    def thinking_format(self, variables: Mapping[str, Any] | None = None) -> ThinkingFormat | None:
        """How the answer's text marks reasoning with these template variables (None: no thinking)."""

    def close(self) -> None:
        """Free the models, or the connection."""
