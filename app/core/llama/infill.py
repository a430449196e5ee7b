"""llama.cpp's infill sampler (``llama_sampler_init_infill``), which editors' fill-in-the-middle requests
name in llama-server's ``samplers`` (llama.vim: top_k, top_p, infill): it merges candidates whose text
begins another's, keeps the likely ones, and ends the text when an end-of-generation token outweighs
them. Run by llama.cpp itself on the candidates the chain has left, so the distribution is llama-server's.
"""

from __future__ import annotations

import ctypes

import numpy as np

from app.core.llama.grammar import TOKEN_DATA
from app.core.llama.library import lib


class InfillFilter:
    """The infill sampler over ``model``'s vocabulary (a loaded LlamaModel). Call it with the candidate
    ids and the logits they are read from: (the ids it keeps, None), or (ids, the one token it ends
    with) when a single token is left."""

    def __init__(self, model):
        self.model = model   # kept: the sampler reads its vocabulary
        self._sampler = lib().llama_sampler_init_infill(model.vocab)

    def __call__(self, ids: np.ndarray, logits: np.ndarray) -> tuple[np.ndarray, int | None]:
        data = np.zeros(len(ids), dtype=TOKEN_DATA)
        data["id"] = ids
        data["logit"] = logits[ids]
        llama_cpp = lib()
        array = llama_cpp.llama_token_data_array(data.ctypes.data_as(llama_cpp.llama_token_data_p), len(data), -1, False)
        llama_cpp.llama_sampler_apply(self._sampler, ctypes.byref(array))
        kept = data["id"][:array.size].astype(np.int64)
        # llama.cpp's end: with no text candidate left it puts the end-of-text token in the first place,
        # logit 1, alone; a single survivor is as certain
        return (kept, None) if len(kept) > 1 else (kept, int(kept[0]))

    def close(self) -> None:
        if self._sampler:
            lib().llama_sampler_free(self._sampler)
            self._sampler = None

    def __del__(self):  # pragma: no cover - safety net
        try:
            self.close()
        except Exception:
            pass
