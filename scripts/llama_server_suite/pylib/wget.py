"""The suite's utils.py imports wget to download models; the shim serves local files, so nothing is
downloaded. A model file asked for (test_speculative's draft) is a link to the suite's draft model (or
its main one), which the shim passes on as -md; any other file is an error naming it."""

import os
from pathlib import Path

MODELS = Path.home() / ".cache" / "quickdraft-bench"


def download(url, out=None, bar=None):
    if not url.endswith(".gguf") or out is None:
        raise RuntimeError(f"the llama-server shim downloads nothing (asked for {url})")
    model = (os.environ.get("QUICKDRAFT_SUITE_DRAFT") or os.environ.get("QUICKDRAFT_SUITE_MAIN")
             or str(MODELS / "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"))
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    os.symlink(model, out)
    return out
