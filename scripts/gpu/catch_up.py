"""Print, as JSON, what the draft model takes to read n skipped tokens in one batch on this machine
(the catch-up that scripts/policy_replay.py charges), measured as the replay's recorder measures it.

    python scripts/gpu/catch_up.py DRAFT.gguf GPU_LAYERS > catch-up.json
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from app.core.llama.binding import LlamaModel, LlamaSession  # noqa: E402
from app.core.params import ModelParams  # noqa: E402
from policy_replay import draft_batch_times  # noqa: E402


def main() -> int:
    path, layers = sys.argv[1], sys.argv[2]
    model = LlamaModel(ModelParams(path, n_gpu_layers=layers))
    session = LlamaSession(model, 4096)
    filler = model.tokenize("The quick brown fox jumps over the lazy dog. " * 40, add_special=False)
    print(json.dumps(draft_batch_times(session, filler)))
    session.close()
    model.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
