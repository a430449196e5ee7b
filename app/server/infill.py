"""llama-server's /infill prompt: fill-in-the-middle with the model's own FIM tokens, laid out as
llama-server's ``format_prompt_infill`` lays it out (the repository-level pattern of Qwen2.5-Coder's
report, arXiv 2409.12186), so a model answers Quickdraft's /infill as it answers llama-server's:

    [FIM_REP]myproject\\n [FIM_SEP]filename0\\n extra chunk 0 ... [FIM_SEP]filename\\n
    [BOS] [FIM_PRE] prefix prompt [FIM_SUF] suffix [FIM_MID]

The prefix keeps its last 3/4 of a batch, the suffix what is left of the batch's last quarter after
the prompt, and the extra chunks the context that is left after a batch; a model without FIM_REP and
FIM_SEP gets each chunk after llama-server's "--- snippet ---" separator instead.
"""

from __future__ import annotations

from dataclasses import dataclass

from app.core.frontdoor import AnswerEngine
from app.core.lm import FimTokens
from app.server.errors import ApiError

FIM_BATCH = 2048      # llama-server's default --batch-size, which sizes its FIM context (capped at n_ctx here)
SNIPPET = "\n\n--- snippet ---\n\n"


@dataclass(frozen=True)
class Infill:
    """An /infill request's parts: the text before and after the gap (each a string, or strings and
    token ids mixed), the extra files ((filename, text) pairs) and the prompt that starts the middle."""

    prefix: tuple[str | int, ...]
    suffix: tuple[str | int, ...]
    extra: tuple[tuple[str, str], ...] = ()
    prompt: str = ""


def infill_tokens(engine: AnswerEngine, infill: Infill, n_ctx: int) -> list[int]:
    """The prompt tokens for ``infill``. A model without FIM prefix, suffix and middle tokens gets a 400
    typed as llama-server's not_supported_error (llama-server answers 501; a 4xx tells the client the
    request, not the server, is at fault, so it does not retry)."""
    fim = engine.fim_tokens()
    if fim.missing:
        raise ApiError(400, f"Infill is not supported by this model: it has no FIM {', '.join(fim.missing)} "
                       "token.", type="not_supported_error", param="input_prefix")
    batch = min(FIM_BATCH, n_ctx)
    prompt = engine.tokenize(infill.prompt, add_special=False, parse_special=True) if infill.prompt else []
    prefix = mixed_tokens(engine, infill.prefix, add_special=False, parse_special=False, param="input_prefix")
    suffix = mixed_tokens(engine, infill.suffix, add_special=False, parse_special=False, param="input_suffix")
    prefix = prefix[len(prefix) - min(len(prefix), 3 * (batch // 4)):]
    suffix = suffix[:min(len(suffix), max(0, batch // 4 - (2 + len(prompt))))]
    extra = _extra_tokens(engine, fim, infill.extra)
    extra = extra[len(extra) - min(len(extra), max(0, n_ctx - batch + 2)):]   # llama-server's n_predict: -1
    bos = engine.tokenize("", add_special=True, parse_special=False)   # [BOS] where the model wants one
    return extra + bos + [fim.prefix, *prefix, *prompt, fim.suffix, *suffix, fim.middle]


def _extra_tokens(engine: AnswerEngine, fim: FimTokens, chunks: tuple[tuple[str, str], ...]) -> list[int]:
    def plain(text: str) -> list[int]:
        return engine.tokenize(text, add_special=False, parse_special=False)

    repo_level = fim.sep is not None
    out = [fim.repo, *plain("myproject\n")] if fim.repo is not None else []
    for filename, text in chunks:
        out += [fim.sep, *plain(filename + "\n")] if repo_level else plain(SNIPPET)
        out += plain(text)
    return out + ([fim.sep, *plain("filename\n")] if repo_level else [])


def mixed_tokens(engine: AnswerEngine, parts: tuple[str | int, ...], add_special: bool, parse_special: bool,
                 param: str = "prompt") -> list[int]:
    """llama-server's ``tokenize_mixed``: text parts tokenized (the BOS only before a first part that is
    text), token ids as they are, in order; an id outside the vocabulary is a 400 naming ``param``."""
    out: list[int] = []
    n_vocab = engine.pair.n_vocab
    for i, part in enumerate(parts):
        if isinstance(part, str):
            out += engine.tokenize(part, add_special=add_special and i == 0, parse_special=parse_special)
        elif 0 <= part < n_vocab:
            out.append(part)
        else:
            raise ApiError(400, f"Token id {part} is outside the vocabulary (0..{n_vocab - 1}).", param=param)
    return out
