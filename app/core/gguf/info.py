"""Read a GGUF file's metadata without loading its weights, and check draft/main compatibility."""

from __future__ import annotations

import mmap
import os
from collections import Counter
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from app.core.errors import ModelFileError
from app.core.params import DrafterKind
from app.core.gguf.reader import ARRAY, BOOL, INTEGER_TYPES, STRING, Field, GGUFFormatError, GGUFHeader, read_header
from app.core.gguf.relations import BLOCK as _BLOCK, ROUTED_EXPERTS as _ROUTED_EXPERTS, check_relations

GGUF_MAGIC = b"GGUF"
# llama.cpp 0.3.36's src/llama-hparams.h: LLAMA_MAX_LAYERS, LLAMA_MAX_EXPERTS
MAX_LAYERS = 512
MAX_EXPERTS = 1024
_VOCAB_TYPE_NAMES = {
    "llama": "SentencePiece (SPM)", "gpt2": "byte-level BPE", "bert": "WordPiece", "t5": "Unigram (T5)",
    "rwkv": "RWKV", "plamo2": "PLaMo-2", "none": "none",
}


@dataclass(frozen=True)
class GGUFInfo:
    path: str
    file_size: int
    architecture: str
    name: str
    parameter_count: int
    quantization: str
    context_length: int | None
    n_layers: int | None
    n_embd: int | None
    n_head_kv: int | None
    n_head: int | None
    vocab_type: str
    vocab_size: int
    bos_token_id: int | None
    eos_token_id: int | None
    add_bos: bool
    add_eos: bool
    chat_template: str | None
    tokens: tuple[str, ...] = field(default=(), repr=False, compare=False)
    token_types: tuple[int, ...] = field(default=(), repr=False, compare=False)   # gguf.TokenType per token
    tokenizer_pre: str = ""            # the pre-tokenizer a byte-level BPE vocabulary names (qwen2, gemma4, ...)
    key_length: int | None = None      # per-head K/V widths when the model states them (Gemma 3, Qwen3)
    kv_layers: int | None = None       # layers with keys and values (fewer than n_layers in a hybrid, 0 recurrent)
    mtp_layers: int = 0                # MTP (nextn) layers the model carries beside its stack: it can draft for itself
    value_length: int | None = None
    n_embd_out: int | None = None      # an MTP drafter: the width of the main model's hidden states it reads
    n_expert: int = 0                  # a mixture of experts: routed experts in each MoE layer (0: dense)
    n_expert_used: int = 0             # and how many of them each token is routed to
    target_layers: tuple[int, ...] = ()   # an EAGLE-3 or DFlash drafter: the main model's layers it reads
    target_width: int | None = None       # and the width of the main model's hidden states there
    tensor_bytes: tuple[tuple[str, int], ...] = field(default=(), repr=False, compare=False)  # (name, bytes)

    @property
    def vocab_type_name(self) -> str:
        return _VOCAB_TYPE_NAMES.get(self.vocab_type, self.vocab_type)

    @property
    def memory(self) -> str:
        """attention, recurrent or hybrid, by architecture (llama.cpp's llm_arch_is_recurrent/_hybrid)."""
        if self.architecture in RECURRENT_ARCHITECTURES:
            return "recurrent"
        return "hybrid" if self.architecture in HYBRID_ARCHITECTURES else "attention"

    def memory_note(self) -> str:
        """How a rejected draft is undone on this model ("" for attention: its cache drops any suffix)."""
        if self.memory == "attention":
            return ""
        if self.architecture in ROLLBACK_ARCHITECTURES:
            return (f"{self.memory} model: tokens it must take back (a rejected draft) come from llama.cpp's "
                    f"recurrent-state snapshots, or from a saved state")
        return (f"{self.memory} model without llama.cpp's state snapshots: tokens it must take back come from "
                f"a saved state and the kept ones are read again (speculation pays less)")

    @property
    def is_mtp_drafter(self) -> bool:
        """A draft-only MTP drafter (Gemma 4's assistant): it cannot answer, only draft for its main model."""
        return self.architecture in MTP_DRAFTER_ARCHITECTURES

    @property
    def hidden_state_drafter(self) -> str | None:
        """"EAGLE-3", "DFlash" or "DSpark" for a drafter that reads the main model's hidden states
        (its target layers): it cannot answer, only draft for a main model of the width it reads."""
        kind = HIDDEN_STATE_DRAFTERS.get(self.architecture)
        if kind == "DFlash" and any(name.startswith("markov_w1.") for name, _ in self.tensor_bytes):
            return "DSpark"
        if kind == "DFlash" and any(name.startswith("selector_hidden.") for name, _ in self.tensor_bytes):
            return "DFlash2"
        return kind

    @property
    def drafts_as(self) -> DrafterKind | None:
        """How a drafter file drafts when it is a pair's draft: an MTP drafter with MTP, an EAGLE-3 drafter
        with EAGLE-3, a DFlash or DSpark drafter a block at a time (None for a model that answers, and for
        DFlash2, whose selector lattice only llama.cpp's own driver reads)."""
        if self.is_mtp_drafter:
            return DrafterKind.MTP
        return {"EAGLE-3": DrafterKind.EAGLE3, "DFlash": DrafterKind.DFLASH,
                "DSpark": DrafterKind.DFLASH}.get(self.hidden_state_drafter)

    @property
    def is_drafter_file(self) -> bool:
        """A file that only drafts, for the main model it was made for (it reads that model's hidden states)."""
        return self.is_mtp_drafter or self.hidden_state_drafter is not None

    def drafts_for(self) -> str:
        """What main model a hidden-state drafter was made for, as its file says."""
        return (f"a main model {self.target_width} wide with {max(self.target_layers, default=0)} layers or more and "
                f"{self.vocab_size:,} tokens, reading its layers {', '.join(map(str, self.target_layers))}")

    @property
    def expert_weight_fraction(self) -> float:
        """Of the weights a decode step of the main stack can read, the fraction in routed-expert
        tensors (``blk.N.ffn_*_exps.*``: of these a token reads only the ``n_expert_used`` experts it
        is routed to; a shared expert, ``*_shexp``, is read by every token like a dense layer's). The
        token embeddings are left out (a step reads one row of them per token) unless the output
        layer is tied to them, and so are MTP layers beyond the stack. 0.0 for a dense model."""
        if not self.n_expert:
            return 0.0
        tied = not any(name == "output.weight" for name, _ in self.tensor_bytes)
        experts = total = 0
        for name, size in self.tensor_bytes:
            block = _BLOCK.match(name)
            if (name.startswith("token_embd.") and not tied) or \
                    (block and self.n_layers is not None and int(block.group(1)) >= self.n_layers):
                continue
            total += size
            if block and _ROUTED_EXPERTS.search(name):
                experts += size
        return experts / total if total else 0.0

    @property
    def display_name(self) -> str:
        return self.name or Path(self.path).stem

    def kv_bytes_per_token(self) -> int:
        """F16 KV cache bytes for one token of context (K and V, all layers)."""
        layers = self.n_layers if self.kv_layers is None else self.kv_layers
        if not (layers and self.n_embd and self.n_head):
            return 0
        head_dim = self.n_embd // self.n_head
        k, v = self.key_length or head_dim, self.value_length or head_dim
        return 2 * layers * (self.n_head_kv or self.n_head) * (k + v)


def read_gguf_info(path: str | os.PathLike[str]) -> GGUFInfo:
    """Metadata of a GGUF file. Any file that is missing, unreadable, not a GGUF, or damaged in a way
    llama.cpp would refuse raises ModelFileError (a QuickdraftError) with a readable reason; no other
    exception comes out of here, so callers need to catch only QuickdraftError."""
    path = Path(path)
    try:
        stat = _check_file(path)
        resolved = str(path.resolve())
    except (OSError, RuntimeError, ValueError) as exc:   # a symlink loop (Python < 3.13), a NUL in the path
        raise ModelFileError(f"{path.name} cannot be read: {getattr(exc, 'strerror', None) or exc}") from exc
    return _read_cached(resolved, stat.st_size, stat.st_mtime_ns)


def _check_file(path: Path) -> os.stat_result:
    if not path.exists():
        raise ModelFileError(f"Model file not found: {path}")
    if not path.is_file():
        raise ModelFileError(f"Not a file: {path}")
    with path.open("rb") as f:
        magic = f.read(4)
    if magic != GGUF_MAGIC:
        raise ModelFileError(f"{path.name} is not a GGUF model file (it does not start with 'GGUF').")
    return path.stat()


@lru_cache(maxsize=16)
def _read_cached(path: str, size: int, mtime_ns: int) -> GGUFInfo:
    name = Path(path).name
    try:
        with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
            header = read_header(buf)
        info = _info_from_header(header, path, size)
    except GGUFFormatError as exc:
        raise ModelFileError(f"{name} is damaged or not a model llama.cpp can load: {exc}.") from exc
    except (OSError, ValueError) as exc:   # ValueError: mmap of a file emptied since the check
        raise ModelFileError(f"{name} cannot be read: {getattr(exc, 'strerror', None) or exc}") from exc
    if header.data_end > size:
        raise ModelFileError(
            f"{name} is truncated: its tensors need {header.data_end:,} bytes but the file has {size:,}. "
            f"The download was probably interrupted; download it again."
        )
    return info


def _info_from_header(header: GGUFHeader, path: str, size: int) -> GGUFInfo:
    meta = _Metadata(header.fields)
    arch = meta.string("general.architecture")
    if not arch:
        raise GGUFFormatError("it names no architecture (general.architecture)")
    vocab_type = meta.string("tokenizer.ggml.model") or "none"
    tokens = meta.strings("tokenizer.ggml.tokens")
    add_bos = meta.flag("tokenizer.ggml.add_bos_token")
    # MTP (nextn) layers are counted in block_count but are not part of the model's stack
    blocks = _at_most(meta.integer(f"{arch}.block_count"), MAX_LAYERS, "layers", "block_count")
    mtp_layers = _at_most(meta.integer(f"{arch}.nextn_predict_layers"), MAX_LAYERS, "MTP layers",
                          "nextn_predict_layers") or 0
    n_expert = _at_most(meta.integer(f"{arch}.expert_count"), MAX_EXPERTS, "experts", "expert_count") or 0
    check_relations(arch, meta, blocks, mtp_layers, {t.name: t.shape for t in header.tensors})
    n_layers = blocks - mtp_layers if blocks is not None else None
    head_count_kv = meta.integers(f"{arch}.attention.head_count_kv")
    return GGUFInfo(
        path=path,
        file_size=size,
        architecture=arch,
        name=meta.string("general.name") or "",
        parameter_count=sum(t.n_elements for t in header.tensors),
        quantization=_quantization(header, meta.integer("general.file_type")),
        context_length=meta.integer(f"{arch}.context_length"),
        n_layers=n_layers,
        n_embd=meta.integer(f"{arch}.embedding_length"),
        n_head=meta.integer(f"{arch}.attention.head_count"),
        n_head_kv=max(head_count_kv, default=0) or None,   # per-layer counts (0: no attention): the most
        kv_layers=_kv_layers(arch, n_layers, head_count_kv, meta.integer(f"{arch}.full_attention_interval")),
        mtp_layers=mtp_layers,
        vocab_type=vocab_type,
        vocab_size=len(tokens),
        bos_token_id=meta.integer("tokenizer.ggml.bos_token_id"),
        eos_token_id=meta.integer("tokenizer.ggml.eos_token_id"),
        # llama.cpp's default when the key is missing: SentencePiece adds BOS, the others do not
        add_bos=add_bos if add_bos is not None else vocab_type == "llama",
        add_eos=bool(meta.flag("tokenizer.ggml.add_eos_token")),
        chat_template=meta.string("tokenizer.chat_template"),
        tokens=tuple(tokens),
        token_types=tuple(meta.integers("tokenizer.ggml.token_type")),
        tokenizer_pre=meta.string("tokenizer.ggml.pre") or "",
        key_length=meta.integer(f"{arch}.attention.key_length"),
        value_length=meta.integer(f"{arch}.attention.value_length"),
        n_embd_out=meta.integer(f"{arch}.embedding_length_out"),
        n_expert=n_expert,
        n_expert_used=_at_most(meta.integer(f"{arch}.expert_used_count"), n_expert or MAX_EXPERTS,
                               "experts used per token", "expert_used_count") or 0,
        target_layers=tuple(meta.integers(f"{arch}.target_layers")),
        # EAGLE-3 states the main model's width; DFlash drafts at it
        target_width=meta.integer(f"{arch}.target_hidden_size") or (meta.integer(f"{arch}.embedding_length")
                                                                    if arch in HIDDEN_STATE_DRAFTERS else None),
        tensor_bytes=tuple((t.name, t.n_bytes) for t in header.tensors),
    )


def _at_most(count: int | None, limit: int, what: str, key: str) -> int | None:
    """A count the file declares, refused past what llama.cpp loads: before anything is sized by it
    (a file declaring 2^31 layers once had a list of 2^31 entries built for it)."""
    if count is not None and count > limit:
        raise GGUFFormatError(f"it declares {count:,} {what} ({key}); llama.cpp loads at most {limit:,}")
    return count


class _Metadata:
    """Typed access to the metadata: a key of the wrong type is a damaged file, not a crash."""

    def __init__(self, fields: dict[str, Field]):
        self.fields = fields

    def string(self, key: str) -> str | None:
        return self._get(key, "a string", lambda f: f.type == STRING)

    def strings(self, key: str) -> list[str]:
        return self._get(key, "an array of strings", lambda f: f.type == ARRAY and f.item_type == STRING) or []

    def flag(self, key: str) -> bool | None:
        return self._get(key, "a bool", lambda f: f.type == BOOL)

    def integers(self, key: str) -> list[int]:
        """An integer key as a list: a per-layer array as it is, one value as a list of one."""
        entry = self.fields.get(key)
        if entry is not None and entry.type == ARRAY and entry.item_type in INTEGER_TYPES:
            return [int(v) for v in entry.value]
        value = self.integer(key)
        return [] if value is None else [value]

    def integer(self, key: str) -> int | None:
        """An integer key; for per-layer arrays (head counts of some models) the first layer's."""
        entry = self.fields.get(key)
        if entry is None:
            return None
        if entry.type in INTEGER_TYPES:
            value = entry.value
        elif entry.type == ARRAY and entry.item_type in INTEGER_TYPES:
            value = entry.value[0].item() if len(entry.value) else None
        else:
            raise GGUFFormatError(f"the metadata key '{key}' should be an integer but is {entry.describe_type()}")
        if value is not None and value < 0:
            raise GGUFFormatError(f"the metadata key '{key}' is negative ({value})")
        return value

    def _get(self, key: str, wanted: str, is_wanted):
        entry = self.fields.get(key)
        if entry is None:
            return None
        if not is_wanted(entry):
            raise GGUFFormatError(f"the metadata key '{key}' should be {wanted} but is {entry.describe_type()}")
        return entry.value


def _kv_layers(arch: str, n_layers: int | None, head_count_kv: list[int], interval: int | None) -> int | None:
    """How many layers keep keys and values: all of them in an attention model, none in a recurrent one;
    in a hybrid, those a per-layer head count names (lfm2) or every ``interval``-th (qwen35)."""
    if arch in RECURRENT_ARCHITECTURES:
        return 0
    if n_layers is None:
        return None
    if len(head_count_kv) > 1:
        return sum(1 for n in head_count_kv[:n_layers] if n > 0)
    if arch in HYBRID_ARCHITECTURES and interval:
        return n_layers // interval
    return n_layers


def _quantization(header: GGUFHeader, file_type: int | None) -> str:
    from gguf import LlamaFileType

    if file_type is not None:
        try:
            return LlamaFileType(file_type).name.removeprefix("MOSTLY_").removeprefix("ALL_")
        except ValueError:
            pass
    weights = Counter(t.type_name for t in header.tensors if t.name.endswith(".weight"))
    return weights.most_common(1)[0][0] if weights else "unknown"


# llama.cpp 0.3.36's src/llama-arch.cpp: llm_arch_is_recurrent, llm_arch_is_hybrid and
# llm_arch_supports_rs_rollback (the architectures whose recurrent state keeps n_rs_seq snapshots)
RECURRENT_ARCHITECTURES = frozenset({"mamba", "mamba2", "rwkv6", "rwkv6qwen2", "rwkv7", "arwkv7"})
HYBRID_ARCHITECTURES = frozenset({
    "jamba", "falcon-h1", "plamo2", "granitehybrid", "lfm2", "lfm2moe", "nemotron_h", "nemotron_h_moe",
    "qwen3next", "kimi-linear", "bailingmoe3", "kimi-k3", "glm5-next", "qwen35", "qwen35moe", "qwen4exp",
    "deepseek4", "minimax-01"})
# MTP drafter architectures (llama.cpp 0.3.36: LLM_ARCH_GEMMA4_ASSISTANT) and the main architecture each drafts for
MTP_DRAFTER_ARCHITECTURES = {"gemma4-assistant": "gemma4"}
# drafters that read the main model's hidden states at their target layers (llama.cpp 0.3.36: LLM_ARCH_EAGLE3,
# LLM_ARCH_DFLASH; DSpark is a DFlash file with a Markov head)
HIDDEN_STATE_DRAFTERS = {"eagle3": "EAGLE-3", "dflash": "DFlash"}
# The main architectures whose llama.cpp graph gives the final hidden state (res->t_h_nextn, llama.cpp
# 0.3.36's src/models/): a drafter target layer equal to the main model's layer count reads it. Any other
# main leaves llama.cpp's buffer for it unwritten, so a drafter reading it would read stale memory.
FINAL_STATE_ARCHITECTURES = frozenset({
    "deepseek2", "deepseek32", "deepseek4", "qwen3next", "qwen35", "qwen35moe", "step35", "gpt-oss", "glm5-next",
    "glm-dsa", "glm4moe", "bailingmoe3", "cohere2moe", "nemotron_h", "nemotron_h_moe", "hy_v3", "mimo2", "gemma4"})
ROLLBACK_ARCHITECTURES = frozenset({
    "kimi-k3", "qwen35", "qwen35moe", "qwen4exp", "deepseek4", "glm5-next", "nemotron_h", "nemotron_h_moe",
    "lfm2", "lfm2moe", "bailingmoe3"})
