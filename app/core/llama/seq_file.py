"""A sequence's cache in llama.cpp's own sequence state file, as llama-server's slot save and restore
write and read it (``POST /slots/{id}?action=save|restore``): a file one server saved, another restores,
llama-server's included.

The file is what ``llama_state_seq_save_file`` writes: magic, version and a count of 32-bit words, the
words, then the sequence's state (keys and values, any recurrent state). llama-server packs its tokens
into the words (the null token, its packing's version, the token count, the tokens, then its media
chunks' count and data: none for text); older servers wrote the tokens plainly. Both are read.

A file's tokens are read and checked before its state touches the cache: a file that is not one, a
packing of another version, media, more tokens than the context, tokens outside the vocabulary are
refused with the cache left as it was. llama.cpp then reads the state itself, and checks it (a file
of another model's shape is refused: the cache is then emptied, nothing of it trusted).
"""

from __future__ import annotations

import ctypes
import os
import struct
from array import array
from pathlib import Path
from typing import Sequence

from app.core.errors import SlotFileError
from app.core.llama import library
from app.core.llama.library import lib

HEADER = struct.Struct("=III")   # magic, version, words that follow: llama.cpp writes them in native order
TOKEN_NULL = -1                  # LLAMA_TOKEN_NULL: packed words start with it (no token is negative)
PACKED_VERSION = 1               # llama-server's SERVER_TOKENS_STATE_VERSION
PACKED_HEAD = 3                  # the null token, the version, the token count


def pack(tokens: Sequence[int]) -> list[int]:
    """llama-server's packing of a text slot's tokens: null token, version, count, tokens, no media."""
    return [TOKEN_NULL, PACKED_VERSION, len(tokens), *tokens, 0]


def unpack(words: Sequence[int]) -> list[int]:
    """The tokens in a file's words, packed or plain (older servers'); SlotFileError for what this
    server cannot restore."""
    if not words or words[0] != TOKEN_NULL:
        return list(words)
    if len(words) < PACKED_HEAD + 1 or words[1] != PACKED_VERSION:
        raise SlotFileError(f"its tokens are packed in version {words[1] if len(words) > 1 else '?'} of "
                            f"llama-server's format; this server reads version {PACKED_VERSION}")
    n = words[2]
    if not 0 <= n <= len(words) - PACKED_HEAD - 1:
        raise SlotFileError(f"it says it holds {n} tokens but has room for {len(words) - PACKED_HEAD - 1}")
    if words[PACKED_HEAD + n] != 0:
        raise SlotFileError("it holds media tokens (an image or audio): this server has no multimodal projector "
                            "to restore them with")
    if len(words) > PACKED_HEAD + n + 1:
        raise SlotFileError("it has data after its tokens that this server does not know")
    return list(words[PACKED_HEAD:PACKED_HEAD + n])


def save(session, path: Path) -> int:
    """Write ``session``'s sequence, its tokens packed as llama-server's, to ``path``: the bytes written."""
    llama_cpp = lib()
    words = pack(session.cached)
    buf = (llama_cpp.llama_token * len(words))(*words)
    library.take_errors()
    written = int(llama_cpp.llama_state_seq_save_file(session.raw_context, os.fsencode(path), session.seq,
                                                      buf, len(words)))
    if written == 0:
        raise SlotFileError(f"llama.cpp could not write it (is the folder writable, the disk full?). "
                            f"{library.take_errors()}".rstrip())
    return written


def read_words(path: Path) -> list[int]:
    """The words a sequence state file holds before its state; SlotFileError when it is not one."""
    llama_cpp = lib()
    try:
        with open(path, "rb") as f:
            head = f.read(HEADER.size)
            magic, version, n_words = HEADER.unpack(head) if len(head) == HEADER.size else (0, 0, 0)
            if magic != llama_cpp.LLAMA_STATE_SEQ_MAGIC:
                raise SlotFileError("it is not a llama.cpp sequence state file (a slot save file)")
            if version != llama_cpp.LLAMA_STATE_SEQ_VERSION:
                raise SlotFileError(f"it is in version {version} of llama.cpp's sequence state format; this "
                                    f"build reads version {llama_cpp.LLAMA_STATE_SEQ_VERSION}")
            raw = f.read(4 * n_words)
    except FileNotFoundError:
        raise SlotFileError("there is no such file in the slot save path") from None
    except OSError as exc:
        raise SlotFileError(f"it cannot be read ({exc.strerror or exc})") from None
    if len(raw) < 4 * n_words:
        raise SlotFileError("it is cut short")
    return array("i", raw).tolist()


def check_tokens(tokens: Sequence[int], n_ctx: int, n_vocab: int) -> None:
    """The tokens fit the context and the vocabulary (a file of another model has others)."""
    if len(tokens) > n_ctx:
        raise SlotFileError(f"it holds {len(tokens)} tokens, more than the slot's context of {n_ctx}")
    outside = next((t for t in tokens if not 0 <= t < n_vocab), None)
    if outside is not None:
        raise SlotFileError(f"it holds token {outside}, outside this model's vocabulary (0..{n_vocab - 1}): "
                            f"it was saved with another model")


def restore(session, path: Path) -> tuple[list[int], int]:
    """Make the file at ``path`` ``session``'s cache: (its tokens, the bytes llama.cpp read). The cache is
    untouched when the file's tokens are refused, emptied when llama.cpp refuses its state."""
    words = read_words(path)
    tokens = unpack(words)
    check_tokens(tokens, session.n_ctx, session.n_vocab)
    read = 0

    def put() -> list[int] | None:
        """llama.cpp reads the file into the emptied sequence; its tokens, unless they changed meanwhile."""
        nonlocal read
        out = (lib().llama_token * max(1, len(words)))()
        count = ctypes.c_size_t(0)
        read = int(lib().llama_state_seq_load_file(session.raw_context, os.fsencode(path), session.seq, out,
                                                   len(out), ctypes.byref(count)))
        return tokens if read and out[:count.value] == words else None

    library.take_errors()
    if not session.load_state(put):
        raise SlotFileError(f"llama.cpp could not read its state into the slot's cache (it was saved with another "
                            f"model or a damaged file, or the cache has no room). {library.take_errors()}".rstrip())
    return tokens, read
