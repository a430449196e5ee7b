"""What llama-server's own endpoints read of a vocabulary beyond the engine's needs: a token's text
with control tokens rendered (as llama-server's /tokenize and /detokenize show them), and the
fill-in-the-middle tokens (llama_vocab_fim_*) that /infill builds its prompt with, and the
end-of-generation tokens that ``ignore_eos`` bans."""

from __future__ import annotations

import ctypes

from app.core.llama.library import lib
from app.core.lm import FimTokens


def fim_tokens(vocab) -> FimTokens:
    """The FIM tokens of ``vocab`` (a llama_vocab pointer), as llama.cpp reads them from the GGUF's
    tokenizer keys or finds them by their usual texts."""
    llama_cpp = lib()

    def token(read) -> int | None:
        value = int(read(vocab))
        return None if value == llama_cpp.LLAMA_TOKEN_NULL else value

    return FimTokens(token(llama_cpp.llama_vocab_fim_pre), token(llama_cpp.llama_vocab_fim_suf),
                     token(llama_cpp.llama_vocab_fim_mid), token(llama_cpp.llama_vocab_fim_rep),
                     token(llama_cpp.llama_vocab_fim_sep))


def special_piece(vocab, token: int) -> bytes:
    """A token's bytes with control tokens rendered as their text (llama-server's
    ``common_token_to_piece(vocab, token, special=true)``)."""
    llama_cpp = lib()
    buf = ctypes.create_string_buffer(64)
    n = llama_cpp.llama_token_to_piece(vocab, token, buf, len(buf), 0, True)
    if n < 0:
        buf = ctypes.create_string_buffer(-n)
        n = llama_cpp.llama_token_to_piece(vocab, token, buf, len(buf), 0, True)
    return buf.raw[:n]
