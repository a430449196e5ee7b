"""Relations between a model's counts that llama.cpp asserts: a file that breaks one aborted the
process (SIGABRT) in Engine.load, `generate` and the window, after `info`, `import` and `models list`
had accepted it. read_gguf_info refuses such a file first; a fuzzer looks for the next relation with
llama.cpp itself as the judge."""

from __future__ import annotations

import os
import select
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from app.core.errors import ModelFileError
from app.core.gguf.info import read_gguf_info
from app.core.gguf.tiny import TinySpec
from tests.core.gguf.craft import tiny_with

ROOT = Path(__file__).resolve().parents[3]
# Loads each model path it reads on stdin with the engine and decodes a token; answers one line each.
# A file that makes llama.cpp assert kills it (SIGABRT): what the caller looks for.
LOADER = """
import sys
from app.core.engine import Engine
from app.core.errors import QuickdraftError
from app.core.frontdoor import GenerationRequest
from app.core.params import DrafterKind, ModelParams, SamplingParams
for path in sys.stdin:
    try:
        engine = Engine.load(ModelParams(path.strip(), n_ctx=64, n_threads=1))
        list(engine.generate(GenerationRequest([{"role": "user", "content": "hi"}], sampling=SamplingParams(max_tokens=1),
                                               drafter=DrafterKind.NONE)))
        engine.close()
        print("ANSWER loaded", flush=True)
    except QuickdraftError as exc:
        print("ANSWER refused", type(exc).__name__, str(exc).replace(chr(10), " "), flush=True)
    except Exception as exc:   # the test's own fault (an engine API it no longer matches), not the file's
        print("ANSWER broken", type(exc).__name__, str(exc).replace(chr(10), " "), flush=True)
"""
ANSWER = "ANSWER "   # what ggml prints as it aborts (a backtrace) goes to stdout too
CHILD_ENV = {**os.environ, "GGML_NO_BACKTRACE": "1"}   # and no gdb attaching to each crash

# (architecture, spec changes, metadata keys) of files each breaking one relation; the probe's was the first
CRAFTED = {
    "MTP layers past the layers": ("llama", {}, {"llama.block_count": 2, "llama.nextn_predict_layers": 400}),
    "no layers": ("llama", {}, {"llama.block_count": 0}),
    "experts used past the experts": ("qwen3moe", {}, {"qwen3moe.expert_used_count": 5}),
    "experts used, one layer past": ("qwen3moe", {}, {"qwen3moe.expert_used_count": [2, 5]}),
    "a layer with experts using none": ("qwen3moe", {}, {"qwen3moe.expert_used_count": [1, 0]}),   # the fuzzer's
    "experts used without experts": ("llama", {}, {"llama.expert_used_count": 2}),
    "as many groups as experts": ("qwen3moe", {}, {"qwen3moe.expert_group_count": 4}),
    "groups that do not divide": ("qwen3moe", {}, {"qwen3moe.expert_group_count": 3}),
    "groups with none used": ("qwen3moe", {}, {"qwen3moe.expert_group_count": 2}),
    "KV heads that do not divide": ("llama", {"n_head": 4, "n_head_kv": 3}, {}),
    "more KV heads than heads": ("llama", {"n_head": 4, "n_head_kv": 8}, {}),
    "a layer with keys and no KV heads": ("llama", {"n_head": 2, "n_head_kv": 1}, {"llama.attention.head_count_kv": [1, 0]}),
    "more KV heads than its weights": ("llama", {"n_head": 2, "n_head_kv": 1}, {"llama.attention.head_count_kv": [1, 2]}),
    "rotary narrower than the head": ("qwen3moe", {}, {"qwen3moe.rope.dimension_count": 4}),
    "an unknown rope scaling": ("llama", {}, {"llama.rope.scaling.type": "bogus"}),
    # found by the fuzzer below: llama.cpp loads these; the first decode of the first never ends, of the others aborts
    "no rotary dimensions": ("qwen35", {}, {"qwen35.rope.dimension_count": 0}),
    "odd rotary dimensions": ("qwen35", {}, {"qwen35.rope.dimension_count": 3}),
    "rotary dimensions wider than the head": ("qwen35", {}, {"qwen35.rope.dimension_count": 32}),
}
HUNG_S = 120   # a tiny model loads and decodes in well under a second: an answer this late is a hang


def _write(directory: Path, name: str, arch: str, spec: dict, keys: dict) -> Path:
    return tiny_with(directory / f"{name.replace(' ', '_').replace(',', '')}.gguf",
                     TinySpec(architecture=arch, **spec), keys)


@pytest.fixture(scope="module")
def crafted(tmp_path_factory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("crafted")
    return {name: _write(d, name, *case) for name, case in CRAFTED.items()}


@pytest.mark.parametrize("name", CRAFTED)
def test_a_file_that_breaks_a_relation_llama_cpp_asserts_is_refused_by_the_reader(crafted, name):
    with pytest.raises(ModelFileError, match="not a model llama.cpp can load"):
        read_gguf_info(crafted[name])


def test_no_crafted_file_aborts_the_engine_it_is_refused_with_a_reason(crafted):
    """Each one, loaded by the engine in a process of its own: a refusal that says why, never an abort."""
    paths = "".join(f"{crafted[name]}\n" for name in CRAFTED)
    done = subprocess.run([sys.executable, "-c", LOADER], input=paths, capture_output=True, text=True,
                          cwd=ROOT, timeout=300, env=CHILD_ENV)
    answers = [line.removeprefix(ANSWER) for line in done.stdout.splitlines() if line.startswith(ANSWER)]
    assert done.returncode == 0, f"aborted (rc {done.returncode}) at {list(CRAFTED)[len(answers)]!r}"
    assert len(answers) == len(CRAFTED) and all(a.startswith("refused ModelFileError") for a in answers), answers


# --- the fuzzer: metadata an adversary may choose, with llama.cpp as the judge ---------------------------

class Loader:
    """The LOADER in a process of its own, restarted after a file kills it or hangs it."""

    def __init__(self):
        self.process = None

    def load(self, path: Path) -> str:
        if self.process is None or self.process.poll() is not None:
            self.process = subprocess.Popen([sys.executable, "-c", LOADER], stdin=subprocess.PIPE, env=CHILD_ENV,
                                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, cwd=ROOT)
        self.process.stdin.write(f"{path}\n")
        self.process.stdin.flush()
        hung_at = time.monotonic() + HUNG_S
        while select.select([self.process.stdout], [], [], max(hung_at - time.monotonic(), 0))[0]:
            line = self.process.stdout.readline()
            if not line:
                return f"aborted (rc {self.process.wait()})"
            if line.startswith(ANSWER):
                return line.removeprefix(ANSWER).strip()
        self.process.kill()
        return f"hung (no answer in {HUNG_S} s)"

    def close(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.stdin.close()
            self.process.wait(30)


@pytest.fixture(scope="module")
def loader():
    process = Loader()
    yield process
    process.close()


_COUNT = st.sampled_from([0, 1, 2, 3, 4, 5, 8, 16, 400])
_KEYS = {
    "block_count": _COUNT, "nextn_predict_layers": _COUNT, "expert_count": _COUNT,
    "expert_used_count": _COUNT | st.lists(_COUNT, min_size=2, max_size=2),
    "expert_group_count": _COUNT, "expert_group_used_count": _COUNT,
    "attention.head_count": _COUNT, "attention.head_count_kv": _COUNT | st.lists(_COUNT, min_size=2, max_size=2),
    "attention.key_length": _COUNT, "attention.value_length": _COUNT, "rope.dimension_count": _COUNT,
    "rope.scaling.type": st.sampled_from(["none", "linear", "yarn", "longrope", "bogus", ""]),
}
# each accepted file costs a load by llama.cpp: the suite tries 100; QUICKDRAFT_FUZZ_EXAMPLES=5000 for a long hunt
MAX_EXAMPLES = int(os.environ.get("QUICKDRAFT_FUZZ_EXAMPLES", "100"))


@st.composite
def _models(draw):
    arch = draw(st.sampled_from(["llama", "qwen3moe", "qwen35"]))
    keys = draw(st.dictionaries(st.sampled_from(sorted(_KEYS)), st.none(), max_size=3))
    spec = {"n_head": draw(st.sampled_from([2, 4])), "n_head_kv": draw(st.sampled_from([1, 2, 3, 4]))}
    return arch, spec, {f"{arch}.{key}": draw(_KEYS[key]) for key in keys}


# the suite's examples are the same on every run (derandomize): a test that fails, fails every time; a long
# hunt draws new ones
@settings(max_examples=MAX_EXAMPLES, deadline=None, database=None, suppress_health_check=list(HealthCheck),
          derandomize="QUICKDRAFT_FUZZ_EXAMPLES" not in os.environ)
@given(model=_models())
def test_metadata_the_reader_accepts_never_aborts_llama_cpp(tmp_path_factory, loader, model):
    arch, spec, keys = model
    path = _write(tmp_path_factory.mktemp("fuzz"), "model", arch, spec, keys)
    try:
        read_gguf_info(path)
    except ModelFileError:
        event("refused by the reader")
        return   # refused before llama.cpp saw it
    answer = loader.load(path)
    event(f"accepted, then {answer.split(' ')[0]} by the engine")
    assert not answer.startswith(("aborted", "hung", "broken")), f"{answer}: {arch} {spec} {keys}"
