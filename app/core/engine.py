"""Engine: owns a loaded main model (and optionally a draft) and runs generations on them.

One thread owns an Engine (the GUI's worker, or the CLI's main thread): llama.cpp objects are not
shared between threads.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping
from typing import Any, Callable, Iterator, Sequence

from app.core.chat.prompt import Message, Prompt, check_messages, prompt_tokens
from app.core.chat.reasoning import (TOOL_CALL_MARKERS, PartTracker, SpelledVocabulary, ThinkingFormat, prompt_tail,
                                     spelled_markers, thinking_format)
from app.core.chat.tools import spelled_tokens
from app.core.errors import DrafterUnavailableError, IncompatibleDraftError, ModelLoadError
from app.core.gguf.info import MTP_DRAFTER_ARCHITECTURES, GGUFInfo, read_gguf_info
from app.core.gguf.pair_check import check_pair, vocabulary_differences
from app.core.gguf.shared_vocab import shared_vocabulary
from app.core.llama import binding as llama, devices, dflash, eagle3, infill, mtp
from app.core.llama.grammar import TokenGrammar
from app.core.llama.shared_context import SharedContext
from app.core.llama.special import fim_tokens, special_piece
from app.core.lm import FimTokens, common_prefix_length
from app.core.llama.placement import footprint, plan_gpu_layers, resolved
from app.core.llama.state_cache import StateCache
from app.core.llama.ram import total_memory_bytes
from app.core.frontdoor import GenerationRequest, LoadedPair
from app.core.pair_costs import PairCosts
from app.core.slot_files import SlotFiles
from app.core.params import DrafterKind, ModelParams, PolicyName, SpeculationParams, StatesConfig, SuffixConfig
from app.core.speculation.acceptance import AcceptanceModel
from app.core.speculation.constraint import GrammarConstraint
from app.core.speculation.costmodel import ProfileStore, model_identity
from app.core.speculation.crossvocab import CrossVocabDrafter
from app.core.speculation.drafters import (BlockDrafter, DraftModelDrafter, Drafter, HeadDrafter, LookupThenModelDrafter,
                                          PromptLookupDrafter)
from app.core.speculation.events import Event
from app.core.speculation.loop import READ_CHUNK, SpeculativeGeneration
from app.core.speculation.policy import AutoPolicy, make_policy
from app.core.speculation.policy_base import DraftPolicy, FixedPolicy
from app.core.speculation.suffix_drafter import suffix_drafter
from app.core.speculation.suffix_memory import ConversationFeed, SuffixMemory, open_memory


class Engine(SlotFiles):
    """A loaded pair answering: the local AnswerEngine (app/core/frontdoor.py)."""

    def __init__(self, main: "llama.LlamaSession", main_info: GGUFInfo,
                 draft: "llama.LlamaSession | None" = None, draft_info: GGUFInfo | None = None,
                 warnings: Sequence[str] = (), main_params: ModelParams | None = None,
                 draft_params: ModelParams | None = None, profile_store: ProfileStore | None = None,
                 drafter_file: "llama.LlamaModel | None" = None):
        self.main = main
        self.main_info = main_info
        self.draft = draft
        self.draft_info = draft_info
        # a draft of another vocabulary drafts through text (crossvocab.py) with the tokens both share
        self.shared_vocab = shared_vocabulary(main_info, draft_info) if draft is not None and draft_info is not None \
            and vocabulary_differences(main_info, draft_info) else None
        self.warnings = tuple(warnings)
        self.main_params = main_params or ModelParams(main_info.path)
        self.draft_params = draft_params or (ModelParams(draft_info.path) if draft_info else None)
        self.costs = PairCosts(main, main_info, self.main_params, draft, self.draft_params, self.shared_vocab,
                               profile_store)
        self.acceptance = AcceptanceModel()  # what verification accepted, across a conversation
        self._last_prompt: tuple[tuple, Prompt] | None = None
        # a drafter file (an MTP drafter, an EAGLE-3 drafter: the draft of the pair), loaded; its drafting
        # context is made on the main one when it first drafts
        self.drafter_file = drafter_file
        self._heads: dict[DrafterKind, "mtp.ChainingHead | mtp.AssistantHead | dflash.DFlashHead"] = {}   # by kind
        self.states: StatesConfig | None = None    # cache states kept between conversations (Engine.load)
        self._state_caches: dict[str, StateCache] = {}
        self._owns_models = True   # False for another slot's engine (another_slot): it only borrows them
        self._infill: "infill.InfillFilter | None" = None   # llama-server's "infill" sampler, once asked for
        self.suffix: SuffixMemory | None = None    # the main model's index of past documents (Engine.load)
        self._feed: ConversationFeed | None = None   # what this engine's answers fed it
        self.read_chunk = READ_CHUNK   # a long prompt's tokens read per step (a server's slots: fewer)

    # --- loading -------------------------------------------------------------------------------

    @classmethod
    def load(cls, main: ModelParams, draft: ModelParams | None = None,
             profile_store: ProfileStore | None = None, cancelled: Callable[[], bool] | None = None,
             states: "StatesConfig | None" = None, suffix: "SuffixConfig | None" = None) -> "Engine":
        """Check the files, then load the main model and the draft. Raises QuickdraftError
        subclasses with a message for the user; nothing stays loaded after a failure.
        ``profile_store`` keeps cost profiles between runs (else they live as long as the engine).
        A main model that carries MTP layers is loaded with them, so that it can draft for itself.
        ``cancelled``, asked as llama.cpp reads the files, cuts the load short (LoadCancelledError).
        ``states``: where cache states are kept between conversations (state_cache.py; None: nowhere);
        ``suffix``: where the suffix index is (None: none read or written; one unusable is a warning)."""
        main_info, draft_info, warnings = read_pair(main.path, draft.path if draft else None)
        if main_info.mtp_layers:
            main = dataclasses.replace(main, load_mtp=True)
        device = devices.choose_device(main.device)
        main, draft = devices.on_device(main, device), devices.on_device(draft, device)
        placement = plan_gpu_layers(main, main_info, draft, draft_info, devices.free_bytes(device))
        main = resolved(main, placement.main_layers)
        draft = resolved(draft, placement.draft_layers) if draft is not None else None
        warnings += placement.notes + devices.device_notes(main, draft, device)
        _check_fits_in_memory(main_info, main, draft_info, draft)
        loaded: list = []
        draft_session = drafter_file = None
        try:
            main_session = _open(main, loaded, cancelled)
            if draft_info is not None and draft_info.is_drafter_file:
                drafter_file = _open_model(draft, loaded, cancelled)   # its context is made on the main one when it drafts
            elif draft is not None:
                draft_session = _open(draft, loaded, cancelled)
        except BaseException:
            for obj in reversed(loaded):
                obj.close()
            raise
        memory, problem = open_memory(suffix, main.path, main_info) if suffix is not None else (None, "")
        engine = cls(main_session, main_info, draft_session, draft_info, warnings + ([problem] if problem else []),
                     main, draft, profile_store, drafter_file)
        engine.states = states
        engine.suffix, engine._feed = memory, ConversationFeed(memory) if memory is not None else None
        return engine

    @functools.cached_property
    def pair(self) -> LoadedPair:
        """The loaded pair, described once (on the engine's thread: it renders the chat template)."""
        thinking, thinking_off = self._thinking_formats()
        draft_model = self.draft.model if self.draft is not None else self.drafter_file
        placement = [("main", self.main.model.placement)] + ([("draft", draft_model.placement)] if draft_model else [])
        return LoadedPair(
            main_name=self.main_info.display_name, main_path=self.main_params.path,
            draft_name=self.draft_info.display_name if self.draft_info else None,
            draft_path=self.draft_params.path if self.draft_params else None,
            n_ctx=self.main.n_ctx, n_vocab=self.main.model.n_vocab, warnings=self.warnings,
            placement=tuple((name, where.describe()) for name, where in placement),
            has_draft_model=self.draft is not None, drafts_as=self._drafter_file_kind,
            other_vocabulary=self.shared_vocab.describe() if self.shared_vocab is not None else None,
            thinking=thinking, thinking_off=thinking_off, chat_template=self.main.model.chat_template(),
            suffix_index=self.suffix is not None)

    def _thinking_formats(self) -> tuple[ThinkingFormat | None, ThinkingFormat | None]:
        """How the main model marks its reasoning with thinking on, and with its template's switch off
        (None: the template has no switch, or the model does not think)."""
        fmt = self.thinking_format()
        if fmt is None or fmt.switch is None:
            return fmt, None
        return self.thinking_format({fmt.switch: True}), self.thinking_format({fmt.switch: False})

    @property
    def _drafter_file_kind(self) -> DrafterKind | None:
        """How the pair's drafter file drafts (MTP, EAGLE-3); None without one."""
        return self.draft_info.drafts_as if self.drafter_file is not None else None

    def use_main(self, session: "llama.LlamaSession") -> None:
        """Answer with ``session`` as the main model's cache (a slot's sequence of a shared context)."""
        old, self.main = self.main, session
        self.costs.main = session
        old.close()

    def another_slot(self, shared: "SharedContext | None" = None, seq: int = 0) -> "Engine":
        """Another engine on the same loaded models, with caches of its own (a server slot; with ``shared``,
        its main cache is sequence ``seq`` of that context: shared_context.py). What the pair learned and
        its saved states are shared. Raises ModelLoadError when the new contexts do not fit."""
        opened: list = [shared.session(seq)] if shared is not None else []   # closed again if the draft fails
        try:
            main = opened[0] if shared is not None else \
                _context(self.main.model, self.main_params, opened, self.main.threads)
            draft = _context(self.draft.model, self.draft_params, opened, self.draft.threads) \
                if self.draft is not None else None
        except BaseException:
            for session in reversed(opened):
                session.close()
            raise
        slot = Engine(main, self.main_info, draft, self.draft_info, self.warnings, self.main_params, self.draft_params,
                      drafter_file=self.drafter_file)
        slot.costs, slot.acceptance = self.costs, self.acceptance
        slot.states, slot._state_caches, slot._owns_models = self.states, self._state_caches, False
        slot.suffix, slot._feed = self.suffix, ConversationFeed(self.suffix) if self.suffix is not None else None
        return slot

    @property
    def cached_length(self) -> int:
        """How many tokens the main model's cache holds."""
        return len(self.main.cached)

    def cached_prefix(self, tokens: Sequence[int]) -> int:
        """How many of ``tokens``, from the start, the main model's cache holds already."""
        return common_prefix_length(self.main.cached, tokens)

    def close(self) -> None:
        for head in self._heads.values():
            head.close()
        self._heads = {}
        if self._infill is not None:
            self._infill.close()
            self._infill = None
        if not self._owns_models:
            for session in (self.draft, self.main):
                if session is not None:
                    session.close()
            self.draft = None
            return
        if self.suffix is not None:
            self.suffix.close()   # what was fed is written before the process ends
        if self.drafter_file is not None:
            self.drafter_file.close()
            self.drafter_file = None
        for session in (self.draft, self.main):
            if session is not None:
                session.close()
                session.model.close()
        self.draft = None

    # --- generation ----------------------------------------------------------------------------

    def prompt(self, messages: Sequence[Message], variables: Mapping[str, Any] | None = None,
               prefill: Sequence[tuple[str, bool]] = ()) -> Prompt:
        """The prompt for ``messages``, with a warning when the chat template could not be used and the
        thinking format its answer follows. The last one is remembered: counting a prompt's tokens
        and then generating renders it once. ``variables``: further names for the chat template
        (``prompt.render_prompt``); ``prefill``: the answer's start (``prompt.prompt_tokens``)."""
        key = (_messages_key(check_messages(messages)), _messages_key([dict(variables or {})]), tuple(prefill))
        if self._last_prompt is None or self._last_prompt[0] != key:
            rendered = prompt_tokens(self.main.model, messages, variables, prefill)
            self._last_prompt = (key, dataclasses.replace(rendered, thinking=self._thinking_after(rendered.tokens)))
        return self._last_prompt[1]

    def tokenize(self, text: str, add_special: bool = True, parse_special: bool = True) -> list[int]:
        return self.main.model.tokenize(text, add_special=add_special, parse_special=parse_special)

    def pieces(self, tokens: Sequence[int]) -> list[bytes]:
        return [special_piece(self.main.model.vocab, token) for token in tokens]

    def fim_tokens(self) -> FimTokens:
        return fim_tokens(self.main.model.vocab)

    def eog_tokens(self) -> list[int]:
        return self.main.model.eog_tokens()

    def generate(self, request: GenerationRequest) -> Iterator[Event]:
        """Generate an answer to the request's messages (or to its raw prompt tokens), yielding a
        Started event, TokenPiece and Round events and, last, a Summary, each stamped on the
        generation's clock. Raises GrammarError for a grammar llama.cpp refuses, before anything."""
        constraint = GrammarConstraint(TokenGrammar(self.main.model, request.grammar), self.main.model) \
            if request.grammar is not None else None
        chat = self.prompt(request.messages, request.template_variables) if request.prompt is None else None
        tokens = list(request.prompt) if chat is None else list(chat.tokens)
        thinking = self._thinking_after(tokens) if chat is None else chat.thinking
        if request.empty_cache:   # the prompt is read from scratch: no state is put back either
            self.forget_cache()
        else:
            self._resume(tokens)
        chosen = self._drafter(request.drafter)
        policy = self._policy(request.speculation, chosen)
        spelled = {**(spelled_markers(self.main.model, thinking) if thinking else {}),
                   **spelled_tokens(self.main.model, request.spell)}
        generation = SpeculativeGeneration(
            main=self.main,
            vocab=SpelledVocabulary(self.main.model, spelled) if spelled else self.main.model,
            drafter=chosen, policy=policy,
            sampling=request.sampling,
            draft_min=request.speculation.draft_min,
            cancel=request.cancel,
            warnings=(chat.warning,) if chat is not None and chat.warning else (),
            parts=PartTracker(thinking, request.tool_spans or TOOL_CALL_MARKERS),
            threads=self._threads,
            infill=self._infill_filter() if "infill" in (request.sampling.samplers or ()) else None,
            constraint=constraint,
            read_chunk=self.read_chunk,
            merged=getattr(self.main, "shared", None) is not None,
        )
        events = generation.run(tokens)
        if self._feed is not None and request.feed_suffix_index:
            events = self._feed.feeding(events, tokens)
        if isinstance(policy, AutoPolicy):
            uses_model = any(isinstance(d, (DraftModelDrafter, CrossVocabDrafter))
                             for d in getattr(chosen, "drafters", (chosen,)))   # a chain's (FirstOfDrafter)
            untimed = uses_model and policy.costs.draft_step_s is None
            events = self.costs.keep_what_is_learned(events, policy.costs, tokens[-1:] if untimed else None)
        return events

    def _resume(self, tokens: list[int]) -> None:
        """Before the prompt is read: keep the cache of a conversation the prompt leaves, and put back
        a saved one the prompt continues (state_cache.py), for the main model and a draft of its
        vocabulary. Not while a head drafts: it needs the main model's hidden states for every
        position, and a state put back brings none."""
        if self.states is None or self._heads:
            return
        sessions = [("main", self.main, self.main_params)]
        if self.draft is not None and self.shared_vocab is None:
            sessions.append(("draft", self.draft, self.draft_params))
        for name, session, params in sessions:
            if name not in self._state_caches:
                identity = {**model_identity(params.path), "n_ctx": session.n_ctx, "n_batch": params.n_batch,
                            "load_mtp": params.load_mtp}
                self._state_caches[name] = StateCache(self.states.folder, identity, self.states.max_bytes)
            self._state_caches[name].switch(session, tokens)

    def _infill_filter(self) -> "infill.InfillFilter":
        """llama.cpp's infill sampler on the main model's vocabulary, made when a request first names it."""
        if self._infill is None:
            self._infill = infill.InfillFilter(self.main.model)
        return self._infill

    def _threads(self) -> tuple[int, int]:
        """How many threads each model decodes with now (learned unless the user gave the count:
        app/core/llama/threads.py); 0 for a draft that is not a model of its own."""
        return self.main.n_threads, self.draft.n_threads if self.draft else 0

    def thinking_format(self, variables: Mapping[str, Any] | None = None) -> ThinkingFormat | None:
        """How the main model's chat template marks reasoning (None: it does not think); ``variables``
        (``{"enable_thinking": False}``) decide whether its generation prompt opens the block itself."""
        return self._thinking_after(prompt_tokens(self.main.model, [{"role": "user", "content": "?"}], variables).tokens)

    def _thinking_after(self, tokens: Sequence[int]) -> ThinkingFormat | None:
        return thinking_format(self.main.model.chat_template(), prompt_tail(self.main.model, tokens))

    def _policy(self, speculation: SpeculationParams, chosen: Drafter | None) -> DraftPolicy:
        """The auto policy learns on the engine's cost model as it answers, never calibrating first."""
        if chosen is None:
            return FixedPolicy(speculation)
        if speculation.policy is not PolicyName.AUTO:
            return make_policy(speculation, None, self.acceptance)
        return make_policy(speculation, self.costs.model(speculation.batch_max), self.acceptance, self.costs.pads())

    def _drafter(self, kind: DrafterKind) -> Drafter | None:
        """A fresh drafter for one generation; choices with the model fall back to what is loaded (a
        drafter file is the pair's draft model: it drafts as its kind, MTP or EAGLE-3). With a suffix
        index the default asks it after prompt lookup (before it where they disagree and it has the better
        claim: suffix_drafter.DefaultChain), before the draft model."""
        default = kind is DrafterKind.LOOKUP_MODEL and self.suffix is not None
        kind = kind.for_pair(self.draft is not None, self._drafter_file_kind)
        if kind is DrafterKind.SUFFIX or (default and kind in (DrafterKind.LOOKUP, DrafterKind.LOOKUP_MODEL)):
            model = [self._model_drafter()] if kind is DrafterKind.LOOKUP_MODEL else []
            return suffix_drafter(kind, self.suffix, model)
        if kind is DrafterKind.LOOKUP:
            return PromptLookupDrafter()
        if kind is DrafterKind.LOOKUP_MODEL:
            return LookupThenModelDrafter(PromptLookupDrafter(tells_unasked=False), self._model_drafter())
        if kind is DrafterKind.MODEL:
            return self._model_drafter()
        if kind in (DrafterKind.MTP, DrafterKind.EAGLE3):
            return HeadDrafter(self._head(kind), kind)
        if kind is DrafterKind.DFLASH:
            return BlockDrafter(self._head(kind))
        return None

    def _model_drafter(self) -> Drafter:
        """The draft model's drafter: its own tokens, or through text when its vocabulary is another."""
        if self.shared_vocab is None:
            return DraftModelDrafter(self.draft)
        return CrossVocabDrafter(self.draft, self.main.model, self.draft.model, self.shared_vocab)

    def _head(self, kind: DrafterKind) -> "mtp.ChainingHead | mtp.AssistantHead":
        """The drafting context ``kind`` drafts with, made when first asked: MTP on the pair's MTP drafter
        file if it has one, else on the main model's own MTP layers (DrafterUnavailableError says why there are
        none); EAGLE-3 and DFlash on the pair's drafter file of that kind."""
        if kind not in self._heads:
            head = self._new_head(kind)
            # tokens the main model decoded before have no hidden states for the head: read them again
            self.main.truncate(head.hidden.valid)
            self._heads[kind] = head
        return self._heads[kind]

    def _new_head(self, kind: DrafterKind) -> "mtp.ChainingHead | mtp.AssistantHead":
        file_kind = self._drafter_file_kind
        if kind in (DrafterKind.EAGLE3, DrafterKind.DFLASH):
            if file_kind is not kind:
                raise DrafterUnavailableError(f"{self.main_info.display_name} has no {kind.label} drafter loaded: "
                                              f"choose a {kind.label} drafter made for it as the draft (`quickdraft "
                                              f"info FILE` says which main model a drafter was made for).")
            head = eagle3.Eagle3Head if kind is DrafterKind.EAGLE3 else dflash.DFlashHead
            return head(self.main, self.drafter_file)
        if file_kind is DrafterKind.MTP:
            return mtp.AssistantHead(self.main, self.drafter_file)
        return mtp.MTPHead(self.main)

    def forget_cache(self) -> None:
        """Empty both KV caches, so the next generation decodes its whole prompt (benchmarks)."""
        for head in self._heads.values():
            head.forget()
        for session in (self.main, self.draft):
            if session is not None:
                session.truncate(0)

    def detokenize(self, tokens: Sequence[int]) -> str:
        return self.main.model.detokenize(tokens)


def _messages_key(messages: list[dict]) -> tuple:
    return tuple(tuple(sorted((k, repr(v)) for k, v in m.items())) for m in messages)


def _open_model(params: ModelParams, loaded: list, cancelled: Callable[[], bool] | None) -> "llama.LlamaModel":
    model = llama.LlamaModel(params, cancelled)
    loaded.append(model)
    return model


def _open(params: ModelParams, loaded: list, cancelled: Callable[[], bool] | None) -> "llama.LlamaSession":
    return _context(_open_model(params, loaded, cancelled), params, loaded)


def _context(model: "llama.LlamaModel", params: ModelParams, loaded: list,
             threads: "llama.ThreadTuner | None" = None) -> "llama.LlamaSession":
    """A context on ``model``; ``threads``: the thread counts another context of it learns (a slot's)."""
    session = llama.LlamaSession(model, params.n_ctx, params.n_threads, params.n_batch, threads)
    loaded.append(session)
    return session


def read_pair(main_path: str, draft_path: str | None) -> tuple[GGUFInfo, GGUFInfo | None, list[str]]:
    """Read both files' metadata (cheap: no weights) and check that the draft can draft for the main
    model: (main info, draft info, warnings). Raises IncompatibleDraftError, or the reader's errors."""
    main_info = read_gguf_info(main_path)
    if main_info.is_mtp_drafter:
        raise ModelLoadError(f"{main_info.display_name} is an MTP drafter, not a model that answers: load the "
                             f"{MTP_DRAFTER_ARCHITECTURES[main_info.architecture]} model it was made for and "
                             f"choose this file as its draft.")
    if main_info.hidden_state_drafter:
        raise ModelLoadError(f"{main_info.display_name} is an {main_info.hidden_state_drafter} drafter, not a model "
                             f"that answers: it drafts for {main_info.drafts_for()}.")
    if draft_path is None:
        return main_info, None, []
    draft_info = read_gguf_info(draft_path)
    pair = check_pair(main_info, draft_info)
    if not pair.compatible:
        raise IncompatibleDraftError(
            f"{draft_info.display_name} cannot draft for {main_info.display_name}: {'; '.join(pair.reasons)}.")
    return main_info, draft_info, list(pair.warnings)


def _check_fits_in_memory(main_info: GGUFInfo, main: ModelParams,
                          draft_info: GGUFInfo | None, draft: ModelParams | None) -> None:
    """Refuse a CPU-only pair that cannot fit in RAM: llama.cpp would page it from disk forever."""
    ram = total_memory_bytes()
    if ram is None:
        return
    need = _cpu_bytes(main_info, main) + (_cpu_bytes(draft_info, draft) if draft_info and draft else 0)
    if need > ram:
        raise ModelLoadError(
            f"{main_info.display_name}{' with its draft' if draft else ''} needs about {need / 2**30:.1f} GiB "
            f"of memory but this machine has {ram / 2**30:.1f} GiB. Choose a smaller quantization, a "
            f"smaller context, or offload layers to a GPU.")


def _cpu_bytes(info: GGUFInfo, params: ModelParams) -> int:
    """What stays in RAM: everything without a GPU, else what its GPU layers do not take."""
    on_gpu = int(params.n_gpu_layers) if params.device != devices.CPU_ONLY else 0
    return footprint(info, params.n_ctx, params.n_batch).cpu_bytes(on_gpu)
