"""Can one GGUF file draft for another: llama.cpp's rules for a draft of the same vocabulary
(common/speculative.cpp), a draft of another vocabulary through text, and the drafter files made for
one main model (an MTP drafter, an EAGLE-3 or DFlash drafter), read from the files' metadata alone."""

from __future__ import annotations

from dataclasses import dataclass

from app.core.gguf.info import FINAL_STATE_ARCHITECTURES, MTP_DRAFTER_ARCHITECTURES, GGUFInfo

# llama.cpp's rules for a draft model (common/speculative.cpp)
VOCAB_MAX_SIZE_DIFFERENCE = 128
VOCAB_CHECK_START_TOKEN_ID = 5


# what a draft of another vocabulary is offered as (the pickers, check-pair, the pairing ranking)
OTHER_VOCABULARY_NOTE = "different vocabulary: slower per accepted token, works with any main model"


@dataclass(frozen=True)
class PairCheck:
    compatible: bool
    reasons: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()
    other_vocabulary: bool = False        # compatible through text (app/core/speculation/crossvocab.py)
    vocabulary_differences: tuple[str, ...] = ()   # how the two vocabularies differ (llama.cpp's rules)

    def message(self) -> str:
        return "; ".join(self.reasons or self.warnings) or "compatible"


def check_pair(main: GGUFInfo, draft: GGUFInfo) -> PairCheck:
    """Can ``draft`` draft for ``main``? A draft whose tokens mean the same as the main model's (llama.cpp's
    rules, ``vocabulary_differences``) proposes its own tokens. Any other draft with a tokenizer drafts
    through text: its tokens become text, which the main model's tokenizer reads again (slower per
    accepted token; ``other_vocabulary``). An MTP drafter reads the main model's hidden states and
    memory, so it drafts only for the model it was made for, in its vocabulary."""
    reasons: list[str] = _mtp_drafter_mismatch(main, draft) + _hidden_state_drafter_mismatch(main, draft)
    differences = vocabulary_differences(main, draft)
    other = bool(differences)
    if other and draft.is_drafter_file:   # it reads the main model's states: its tokens must be the main's
        reasons += differences
    elif other:
        reasons += [f"the {who} has no tokenizer, so its tokens cannot become text"
                    for who, info in (("main model", main), ("draft", draft)) if info.vocab_type == "none"]
    warnings: list[str] = [OTHER_VOCABULARY_NOTE] if other and not reasons else []
    warnings += [f"the {who} is a {note}" for who, info in (("main model", main), ("draft", draft))
                 if (note := info.memory_note())]
    if draft.file_size >= main.file_size and not draft.is_drafter_file:
        warnings.append(
            f"the draft ({_gb(draft.file_size)}) is not smaller than the main model "
            f"({_gb(main.file_size)}): drafting will slow generation down"
        )
    return PairCheck(not reasons, tuple(reasons), tuple(warnings), other and not reasons, tuple(differences))


def vocabulary_differences(main: GGUFInfo, draft: GGUFInfo) -> list[str]:
    """Why the draft's tokens do not mean the same as the main model's, by llama.cpp's rules
    (common/speculative.cpp): the tokenizer type, the special tokens, the sizes, the token texts. Empty:
    the same vocabulary, so the draft's tokens can be verified as they are."""
    if main.vocab_type != draft.vocab_type:
        return [f"different tokenizer types: the main model uses {main.vocab_type_name}, "
                f"the draft {draft.vocab_type_name}"]
    reasons = _special_token_differences(main, draft)
    size_gap = abs(main.vocab_size - draft.vocab_size)
    if size_gap > VOCAB_MAX_SIZE_DIFFERENCE:
        reasons.append(
            f"vocabulary sizes differ by {size_gap} tokens ({main.vocab_size:,} vs {draft.vocab_size:,}; "
            f"at most {VOCAB_MAX_SIZE_DIFFERENCE} allowed)"
        )
    else:
        i = _first_token_mismatch(main.tokens, draft.tokens)
        if i is not None:
            reasons.append(f"the vocabularies differ: token {i} is {main.tokens[i]!r} in the main model "
                           f"but {draft.tokens[i]!r} in the draft")
    return reasons


def _mtp_drafter_mismatch(main: GGUFInfo, draft: GGUFInfo) -> list[str]:
    if main.is_mtp_drafter:
        return [f"{main.display_name} is an MTP drafter, not a model that answers: choose it as the draft"]
    if not draft.is_mtp_drafter:
        return []
    wanted = MTP_DRAFTER_ARCHITECTURES[draft.architecture]
    if main.architecture != wanted:
        return [f"it is an MTP drafter for {wanted} models, and the main model is {main.architecture}"]
    if draft.n_embd_out != main.n_embd:
        return [f"it is an MTP drafter for a {wanted} model {draft.n_embd_out} wide, and the main model is "
                f"{main.n_embd} wide (another size of {wanted})"]
    return []


def _hidden_state_drafter_mismatch(main: GGUFInfo, draft: GGUFInfo) -> list[str]:
    """An EAGLE-3 or DFlash file: only ever a draft, made for one width and depth of main model. The
    loop drafts with EAGLE-3, DFlash and DSpark; DFlash2's selector only llama.cpp's own driver reads
    (``drafts_as``)."""
    if main.hidden_state_drafter:
        return [f"{main.display_name} is an {main.hidden_state_drafter} drafter, not a model that answers"]
    kind = draft.hidden_state_drafter
    if not kind:
        return []
    reasons = []
    if draft.target_width != main.n_embd:
        reasons.append(f"it is an {kind} drafter for a main model {draft.target_width} wide; "
                       f"the main model is {main.n_embd} wide")
    if main.n_layers is not None and max(draft.target_layers, default=0) > main.n_layers:
        reasons.append(f"it reads layer {max(draft.target_layers)}; the main model has {main.n_layers}")
    elif problem := final_state_problem(max(draft.target_layers, default=0), main.n_layers, main.architecture):
        reasons.append(problem)
    if draft.drafts_as is None:
        reasons.append(f"Quickdraft does not draft with {kind} drafters: choose a draft model, prompt lookup, "
                       f"MTP heads, an EAGLE-3 or a DFlash drafter")
    return reasons


def _special_token_differences(main: GGUFInfo, draft: GGUFInfo) -> list[str]:
    out = []
    if main.add_bos != draft.add_bos or main.add_eos != draft.add_eos:
        out.append("the models disagree on adding a begin/end-of-sequence token to the prompt")
    if main.bos_token_id != draft.bos_token_id:
        out.append(f"different begin-of-sequence tokens ({main.bos_token_id} vs {draft.bos_token_id})")
    if main.eos_token_id != draft.eos_token_id:
        out.append(f"different end-of-sequence tokens ({main.eos_token_id} vs {draft.eos_token_id})")
    return out


def _first_token_mismatch(a: tuple[str, ...], b: tuple[str, ...]) -> int | None:
    for i in range(VOCAB_CHECK_START_TOKEN_ID, min(len(a), len(b))):
        if a[i] != b[i]:
            return i
    return None


def _gb(n: int) -> str:
    return f"{n / 1e9:.2f} GB" if n >= 1e8 else f"{n / 1e6:.1f} MB"


def final_state_problem(deepest: int, n_layers: int | None, architecture: str) -> str | None:
    """Why a drafter whose deepest target layer is ``deepest`` cannot read it: that layer is the main
    model's final hidden state, which llama.cpp gives for some architectures only. None when it can."""
    if deepest != n_layers or architecture in FINAL_STATE_ARCHITECTURES:
        return None
    return (f"it reads the main model's final hidden state (layer {n_layers}), which llama.cpp gives for some "
            f"architectures only, not for {architecture}")
