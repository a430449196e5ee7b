"""Fields llama-server takes beside OpenAI's: ``n_predict``, ``logit_bias`` in both of its forms, the
log-probabilities asked in three ways (``logprobs_from``), and the table of those Quickdraft does not
run, refused with a 400 that names them. (``n_indent`` and ``t_max_predict_ms`` are sampling's stop
rules, api.py; ``t_max_prompt_ms`` is taken and has no effect, as in llama-server, which lists it as not
implemented: llama.vim sends it with every request.)

A refused field is one whose value would change the answer: a request that gives its neutral value
(what llama-server does when it is left out: ``repeat_penalty: 1``) is answered,
since clients such as editors send every default; any other value gets the 400, never a silent 200.
"""

from __future__ import annotations

import math
from typing import Any

from app.core.params import MAX_LOGPROBS, SAMPLER_NAMES
from app.server.errors import ApiError

# field -> the values that leave the answer as it is (None, JSON null, is always neutral)
NEUTRAL: dict[str, tuple] = {
    "presence_penalty": (0,), "frequency_penalty": (0,), "repeat_penalty": (1,),
    "mirostat": (0,), "typical_p": (1,), "dynatemp_range": (0,), "xtc_probability": (0,),
    "dry_multiplier": (0,), "top_n_sigma": (-1,), "n_keep": (0, -1),
    "lora": ([],), "echo": (False,), "best_of": (1,), "suffix": ("",),
}
WHY = {"lora": "no LoRA adapters are loaded", "suffix": "use /infill for fill-in-the-middle"}
OPENAI_TOP_LOGPROBS = 20   # OpenAI's most for a chat's top_logprobs
MAX_BIAS = 100.0        # OpenAI's range for a logit_bias value, -100 to 100
MAX_BIASED_TOKENS = 4096


def refuse_unsupported(body: dict) -> None:
    """A 400 naming the first field of NEUTRAL given with a value that would change the answer."""
    for name, neutral in NEUTRAL.items():
        value = body.get(name)
        if value is None or any(_same(value, n) for n in neutral):
            continue
        why = WHY.get(name, "Quickdraft does not run this sampler or option")
        raise ApiError(400, f"'{name}' is not supported ({why}); leave it out or give its neutral value"
                       f"{' ' + repr(neutral[0]) if neutral else ''}.", param=name)


def logprobs_from(body: dict) -> int | None:
    """How many alternatives each answer token's log-probability lists (None: no log-probabilities):
    OpenAI's chat ``logprobs: true`` with ``top_logprobs``, its legacy completions' ``logprobs: N``, or
    llama-server's ``n_probs``."""
    value, top, n_probs = body.get("logprobs"), body.get("top_logprobs"), body.get("n_probs")
    if n_probs is not None:
        if isinstance(n_probs, bool) or not isinstance(n_probs, int) or not 0 <= n_probs <= MAX_LOGPROBS:
            raise ApiError(400, f"'n_probs' must be an integer from 0 to {MAX_LOGPROBS}.", param="n_probs")
        if n_probs > 0:
            return n_probs
    if top is not None and value is not True:
        raise ApiError(400, "'top_logprobs' needs 'logprobs': true.", param="top_logprobs")
    if value is None or value is False:
        return None
    if value is True:
        if top is None:
            return 0
        if isinstance(top, bool) or not isinstance(top, int) or not 0 <= top <= OPENAI_TOP_LOGPROBS:
            raise ApiError(400, f"'top_logprobs' must be an integer from 0 to {OPENAI_TOP_LOGPROBS}.",
                           param="top_logprobs")
        return top
    if isinstance(value, int) and 0 <= value <= MAX_LOGPROBS:   # a legacy completion's count
        return value
    raise ApiError(400, f"'logprobs' must be true or false, or a count from 0 to {MAX_LOGPROBS}.", param="logprobs")


def _same(value: Any, neutral: Any) -> bool:
    if isinstance(value, bool) or isinstance(neutral, bool):
        return value is neutral
    return value == neutral


def n_predict(body: dict, max_tokens: int | None) -> int | None:
    """llama-server's ``n_predict``, which wins over ``max_tokens`` when both are given: -1 is no limit
    (None); 0 is one token, as llama-server checks its limit only after a token is out."""
    value = body.get("n_predict")
    if value is None:
        return max_tokens
    if isinstance(value, bool) or not isinstance(value, int) or value < -1:
        raise ApiError(400, f"'n_predict' must be -1 (no limit) or a number of tokens; got {value!r:.40}.",
                       param="n_predict")
    return None if value == -1 else max(value, 1)


# llama.cpp's other names for its samplers (common_sampler_types_from_names: kebab-case, no dash, these
# three), and the letters of its one-string form (common_sampler_type_to_chr)
SAMPLER_ALIASES = {"nucleus": "top_p", "temp": "temperature", "typ": "typ_p", "typical_p": "typ_p"}
SAMPLER_LETTERS = {"d": "dry", "k": "top_k", "y": "typ_p", "p": "top_p", "s": "top_n_sigma", "m": "min_p",
                   "t": "temperature", "x": "xtc", "i": "infill", "e": "penalties"}


def samplers(body: dict) -> tuple[str, ...] | None:
    """llama-server's ``samplers``: the chain's order, as names (any case, with llama.cpp's aliases) or
    one string of letters; None when not given. A sampler Quickdraft does not run is a 400."""
    value = body.get("samplers")
    if value is None:
        return None
    if isinstance(value, str):
        names = [SAMPLER_LETTERS.get(letter, letter) for letter in value]
    elif isinstance(value, list) and all(isinstance(name, str) for name in value):
        names = [_canonical_sampler(name) for name in value]
    else:
        raise ApiError(400, "'samplers' must be an array of sampler names or a string of sampler letters.",
                       param="samplers")
    unknown = [name for name in names if name not in SAMPLER_NAMES]
    if unknown:
        raise ApiError(400, f"'samplers' names {unknown[0]!r:.40}, which Quickdraft does not run; it runs "
                       f"{', '.join(SAMPLER_NAMES)}.", param="samplers")
    return tuple(names)


_BY_PLAIN_NAME = {known.replace("_", ""): known for known in SAMPLER_NAMES}   # "topk": "top_k"


def _canonical_sampler(name: str) -> str:
    name = name.lower()
    name = SAMPLER_ALIASES.get(name, name)
    return _BY_PLAIN_NAME.get(name.replace("-", "").replace("_", ""), name)


def logit_bias(body: dict) -> tuple[tuple[int, float], ...]:
    """``logit_bias`` as OpenAI gives it ({"token id": bias}) or as llama-server does ([[id, bias], ...],
    where a bias of false bans the token): (id, bias) pairs, one per token id; -inf bans. Text keys
    are ``text_biases``'."""
    return tuple((token, bias) for token, bias in _bias_pairs(body) if isinstance(token, int))


def text_biases(body: dict) -> tuple[tuple[str, float], ...]:
    """The (text, bias) pairs of ``logit_bias``: llama-server biases every token of the text (tokenized
    without BOS, control-token text as text), on the engine's thread (worker.py)."""
    return tuple((text, bias) for text, bias in _bias_pairs(body) if isinstance(text, str))


def _bias_pairs(body: dict) -> list[tuple[int | str, float]]:
    value = body.get("logit_bias")
    if value is None:
        return []
    if isinstance(value, dict):
        pairs = list(value.items())
    elif isinstance(value, list) and all(isinstance(p, list) and len(p) == 2 for p in value):
        pairs = [tuple(p) for p in value]
    else:
        raise ApiError(400, "'logit_bias' must be an object {\"token id\": bias} or an array [[token id, bias], ...].",
                       param="logit_bias")
    if len(pairs) > MAX_BIASED_TOKENS:
        raise ApiError(400, f"'logit_bias' may bias at most {MAX_BIASED_TOKENS} tokens.", param="logit_bias")
    return list(dict(_bias_pair(token, bias) for token, bias in pairs).items())


def _bias_pair(token: Any, bias: Any) -> tuple[int | str, float]:
    if isinstance(token, str) and token.lstrip("-").isdigit():
        token = int(token)
    if isinstance(token, bool) or not isinstance(token, (int, str)) or token == "" or \
            (isinstance(token, int) and token < 0):
        raise ApiError(400, f"'logit_bias' keys must be token ids (0 or more) or texts; got {token!r:.40}.",
                       param="logit_bias")
    if bias is False:
        return token, -math.inf
    if isinstance(bias, bool) or not isinstance(bias, (int, float)) or not -MAX_BIAS <= bias <= MAX_BIAS:
        raise ApiError(400, f"'logit_bias' values must be numbers from -{MAX_BIAS:g} to {MAX_BIAS:g} (or false to ban "
                       f"the token); got {bias!r:.40} for token {token}.", param="logit_bias")
    return token, float(bias)
