"""A vocabulary's fingerprint: a hash of every token's text and type, as the GGUF states them.

Whatever is kept in token ids (the suffix index: app/core/speculation/suffix_store.py) is meaningful
to a model of the same vocabulary only: the same ids, the same texts, the same kinds. Two files with
equal fingerprints read and write the same ids; any change to a token's text or type changes it.
"""

from __future__ import annotations

import hashlib
import struct

from app.core.gguf.info import GGUFInfo


def vocabulary_fingerprint(info: GGUFInfo) -> str:
    """A hex SHA-256 over the tokenizer's kind and each token's text and type, in id order."""
    digest = hashlib.sha256()
    digest.update(f"{info.vocab_type}\0{info.tokenizer_pre}\0{len(info.tokens)}\0".encode())
    types = info.token_types or (0,) * len(info.tokens)
    for text, kind in zip(info.tokens, types):
        data = text.encode("utf-8", "surrogatepass")
        digest.update(struct.pack("<Ii", len(data), kind))   # the length keeps texts from running together
        digest.update(data)
    return digest.hexdigest()
