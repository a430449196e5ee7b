"""llama-cpp-python's own high-level loop, for ``quickdraft bench --llama-baseline``: what our Python
loop costs, measured against the binding's. Here because app/core/llama is the only package that
imports llama_cpp."""

from __future__ import annotations

import time

from app.core.llama.binding import default_threads
from app.core.llama.library import lib


def make_llama_baseline(model_path: str, n_ctx: int, n_threads: int | None, n_gpu_layers: int):
    """llama-cpp-python's own high-level ``Llama`` greedy loop, timed like our engine (tokens after
    the first, per second), to show what our Python loop costs."""
    llama_cpp = lib()
    llm = llama_cpp.Llama(model_path=model_path, n_ctx=n_ctx, n_threads=n_threads or default_threads(),
                n_threads_batch=n_threads or default_threads(), n_gpu_layers=n_gpu_layers, verbose=False)

    def run(tokens: list[int], n_predict: int) -> float:
        llm.reset()
        count, t_first = 0, 0.0
        for token in llm.generate(tokens, top_k=1, top_p=1.0, min_p=0.0, temp=0.0, repeat_penalty=1.0, reset=True):
            count += 1
            if count == 1:
                t_first = time.perf_counter()
            if count >= n_predict or llama_cpp.llama_vocab_is_eog(llm._model.vocab, token):
                break
        elapsed = time.perf_counter() - t_first
        return (count - 1) / elapsed if count > 1 and elapsed > 0 else 0.0

    return run
