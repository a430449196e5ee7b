"""llama-server's command line, answered by ``quickdraft serve``: what llama.cpp's server test suite
(tools/server/tests in the vendored sources) starts as LLAMA_SERVER_BIN_PATH.

The suite names tiny Hugging Face models (stories260K and the like) that this machine cannot
download; every model it asks for is served as the Qwen2.5-Coder pair instead
($QUICKDRAFT_SUITE_MAIN, $QUICKDRAFT_SUITE_DRAFT: by default the 1.5B main and the 0.5B draft in
~/.cache/quickdraft-bench). Options Quickdraft has are passed on (port, host, api key, context,
threads, aliases, tags, CORS origins, slots, the slots endpoint, the slot save folder, the web UI);
the others are llama-server features the run names in its log, so a test that depends on one fails
for that reason, visibly, not silently.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

REPO = Path(os.environ.get("QUICKDRAFT_SUITE_REPO", Path(__file__).resolve().parents[2]))
MODELS = Path.home() / ".cache" / "quickdraft-bench"
MAIN = os.environ.get("QUICKDRAFT_SUITE_MAIN", str(MODELS / "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"))
DRAFT = os.environ.get("QUICKDRAFT_SUITE_DRAFT", str(MODELS / "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"))

# llama-server options with a value that Quickdraft's serve takes under its own name
PASSED = {"--port": "--port", "--host": "--host", "--api-key": "--api-key", "--ctx-size": "--ctx",
          "--threads": "--threads", "--alias": "--alias", "--cors-origins": "--cors-origins",
          "--parallel": "--parallel", "-np": "--parallel", "--tags": "--tags", "-a": "--alias",
          "--reasoning": "--reasoning", "-rea": "--reasoning", "--chat-template-kwargs": "--chat-template-kwargs",
          "--chat-template-file": "--chat-template-file", "--model-draft": "-md", "-md": "-md",
          "--chat-template": "--chat-template", "--temp": "--temp", "--seed": "--seed", "--n-predict": "--n-predict",
          "--top-k": "--top-k", "--top-p": "--top-p", "--min-p": "--min-p", "--batch-size": "--batch-size",
          "-b": "--batch-size", "--slot-save-path": "--slot-save-path"}
# files named relative to where the suite runs: made absolute, since serve runs in the repository
PATHS = {"--chat-template-file", "--model-draft", "-md", "--slot-save-path"}
# llama-server switches that Quickdraft's serve takes under its own name
SWITCHES = {"--slots": "--slots", "--no-slots": "--no-slots", "--ui": "--ui", "--no-ui": "--no-ui",
            "--webui": "--ui", "--no-webui": "--no-ui", "--metrics": "--metrics",
            "--cont-batching": "--cont-batching", "-cb": "--cont-batching",
            "--no-cont-batching": "--no-cont-batching", "-nocb": "--no-cont-batching", "--verbose": "--verbose",
            "--kv-unified": "--kv-unified", "-kvu": "--kv-unified", "--no-kv-unified": "--no-kv-unified",
            "-no-kvu": "--no-kv-unified"}
# llama-server options with a value that only choose a model or tune llama-server's own machinery
DROPPED_WITH_VALUE = {"--hf-repo", "--hf-file", "--model", "--model-url",
                      "--ubatch-size", "--n-gpu-layers",
                      "-ctk", "-ctv", "-fa", "--pooling", "--reasoning-format",
                      "--spec-type", "--spec-draft-n-max",
                      "--spec-draft-n-min", "--models-dir", "--models-max", "--models-preset",
                      "--grp-attn-n", "--grp-attn-w", "--lora", "--mmproj-url",
                      "--media-path", "--sleep-idle-seconds", "--cache-ram", "--tools", "--tools-runtime",
                      "--mcp-servers-config", "--mcp-servers-json", "--spec-synth-len", "--spec-synth-rates"}


def translate(argv: list[str], unknown: set[str] = frozenset()) -> tuple[list[str], list[str]]:
    """Quickdraft serve's arguments for llama-server's ``argv``, and the options left out (``unknown``:
    options of PASSED that the checkout under test does not have yet, left out with their value)."""
    out = ["serve", "-m", MAIN, "--ctx", "2048"] + (["-md", DRAFT] if DRAFT else [])
    left_out: list[str] = []
    i = 0
    while i < len(argv):
        flag = argv[i]
        if flag in PASSED and flag not in unknown and i + 1 < len(argv):
            out += [PASSED[flag], os.path.abspath(argv[i + 1]) if flag in PATHS else argv[i + 1]]
            i += 2
        elif flag in SWITCHES and flag not in unknown:
            out.append(SWITCHES[flag])
            i += 1
        elif flag in DROPPED_WITH_VALUE or flag in unknown:
            left_out.append(f"{flag} {argv[i + 1] if i + 1 < len(argv) else ''}")
            i += 2
        else:
            left_out.append(flag)
            i += 1
    if "--metrics" not in argv:   # llama-server's /metrics is off unless asked for; Quickdraft's is on
        out.append("--no-metrics")
    return out, left_out


def main() -> None:
    unknown = {f for f in os.environ.get("QUICKDRAFT_SUITE_UNKNOWN", "").split(",") if f}
    args, left_out = translate(sys.argv[1:], unknown)
    print(f"llama-server shim: quickdraft {' '.join(args)}; not passed on: {', '.join(left_out) or 'nothing'}",
          file=sys.stderr, flush=True)
    os.chdir(REPO)
    python = os.environ.get("QUICKDRAFT_SUITE_PYTHON", sys.executable)
    os.execv(python, [python, "-m", "app.cli", *args])


if __name__ == "__main__":
    main()
