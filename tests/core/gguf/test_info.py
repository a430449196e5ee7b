import pytest

from app.core.errors import ModelFileError
from app.core.gguf.info import read_gguf_info
from app.core.gguf.pair_check import OTHER_VOCABULARY_NOTE, check_pair, vocabulary_differences
from app.core.gguf.tiny import TinySpec, vocabulary, write_tiny_model


def test_metadata_of_a_tiny_model(tiny_models):
    info = read_gguf_info(tiny_models.main)
    tokens, _, _ = vocabulary()
    assert info.architecture == "llama"
    assert info.vocab_type == "llama" and info.vocab_size == len(tokens)
    assert info.tokens[:4] == ("<unk>", "<s>", "</s>", "<0x00>")
    assert (info.bos_token_id, info.eos_token_id, info.add_bos, info.add_eos) == (1, 2, True, False)
    assert info.n_layers == 2 and info.n_embd == 64 and info.context_length == 2048
    assert info.quantization == "F32"
    assert info.chat_template and "im_start" in info.chat_template
    assert info.parameter_count > 100_000
    assert info.file_size == tiny_models.main.stat().st_size


def test_pairs(tiny_models):
    main = read_gguf_info(tiny_models.main)
    assert check_pair(main, read_gguf_info(tiny_models.other)).compatible
    other = check_pair(main, read_gguf_info(tiny_models.other_vocab))   # drafts through text
    assert other.compatible and other.other_vocabulary and other.message().startswith(OTHER_VOCABULARY_NOTE)
    assert "token 3" not in other.vocabulary_differences[0] and "token 5" in other.vocabulary_differences[0]
    bad = check_pair(main, read_gguf_info(tiny_models.incompatible))
    assert not bad.compatible and "MTP drafter for gemma4 models" in bad.message()
    bigger = check_pair(main, read_gguf_info(tiny_models.bigger))
    assert bigger.compatible and "not smaller" in bigger.warnings[0]


def test_pair_rules_follow_llama_cpp(tmp_path, tiny_models):
    """Which drafts share the main model's vocabulary is llama.cpp's rule; the others draft through text."""
    import dataclasses

    main = read_gguf_info(tiny_models.main)
    other_type = dataclasses.replace(main, vocab_type="gpt2")
    assert "tokenizer types" in vocabulary_differences(main, other_type)[0]
    other_eos = dataclasses.replace(main, eos_token_id=7)
    assert "end-of-sequence" in vocabulary_differences(main, other_eos)[0]
    # up to 128 extra tokens at the end are allowed, more are not
    grown = dataclasses.replace(main, tokens=main.tokens + ("x",) * 128, vocab_size=main.vocab_size + 128)
    assert vocabulary_differences(main, grown) == [] and not check_pair(main, grown).other_vocabulary
    too_big = dataclasses.replace(main, tokens=main.tokens + ("x",) * 129, vocab_size=main.vocab_size + 129)
    assert "differ by 129" in vocabulary_differences(main, too_big)[0]
    # ids below 5 may differ (special tokens), from 5 on they may not
    early = dataclasses.replace(main, tokens=("a", "b", "c", "d", "e") + main.tokens[5:])
    assert vocabulary_differences(main, early) == []
    for other in (other_type, other_eos, too_big):
        pair = check_pair(main, other)
        assert pair.compatible and pair.other_vocabulary and OTHER_VOCABULARY_NOTE in pair.warnings
    # without a tokenizer its tokens cannot become text
    untokenized = check_pair(main, dataclasses.replace(main, vocab_type="none"))
    assert not untokenized.compatible and "no tokenizer" in untokenized.message()


def test_bad_files(tmp_path, tiny_models):
    with pytest.raises(ModelFileError, match="not found"):
        read_gguf_info(tmp_path / "missing.gguf")
    (tmp_path / "text.gguf").write_text("hello")
    with pytest.raises(ModelFileError, match="not a GGUF"):
        read_gguf_info(tmp_path / "text.gguf")
    data = tiny_models.main.read_bytes()
    for n in (8, 100, 3000, len(data) - 1):
        (tmp_path / f"cut{n}.gguf").write_bytes(data[:n])
        with pytest.raises(ModelFileError, match="truncated|damaged"):
            read_gguf_info(tmp_path / f"cut{n}.gguf")


def test_unknown_architecture_is_read_but_named(tmp_path):
    info = read_gguf_info(write_tiny_model(tmp_path / "x.gguf", TinySpec(architecture="notanarch")))
    assert info.architecture == "notanarch"


def test_the_share_of_weights_in_routed_experts(tmp_path, tiny_models):
    """What a mixture of experts states of its experts, and the fraction of the weights a step can
    read that are routed experts (ffn_*_exps): the token embeddings are not such weights unless the
    output layer is tied to them, nor are MTP layers beyond the stack."""
    import dataclasses

    spec = TinySpec(architecture="qwen3moe", n_expert=64, n_expert_used=4)
    info = read_gguf_info(write_tiny_model(tmp_path / "moe.gguf", spec))
    assert (info.n_expert, info.n_expert_used) == (64, 4)
    experts = spec.n_layer * 3 * spec.n_expert * (spec.n_ff // spec.n_expert_used) * spec.n_embd * 4   # F32
    sizes = dict(info.tensor_bytes)
    assert sum(size for name, size in sizes.items() if "_exps." in name) == experts
    read = sum(sizes.values()) - sizes["token_embd.weight"]
    assert info.expert_weight_fraction == pytest.approx(experts / read) and 0.9 < info.expert_weight_fraction < 1
    tied = dataclasses.replace(info, tensor_bytes=tuple(t for t in info.tensor_bytes if t[0] != "output.weight"))
    tied_read = read - sizes["output.weight"] + sizes["token_embd.weight"]   # the output layer reads the embeddings
    assert tied.expert_weight_fraction == pytest.approx(experts / tied_read)
    mtp_layer = (f"blk.{spec.n_layer}.ffn_up_exps.weight", 10**9)            # beyond the stack: not read by a step
    with_mtp = dataclasses.replace(info, tensor_bytes=info.tensor_bytes + (mtp_layer,))
    assert with_mtp.expert_weight_fraction == pytest.approx(info.expert_weight_fraction)
    dense = read_gguf_info(tiny_models.main)
    assert (dense.n_expert, dense.n_expert_used, dense.expert_weight_fraction) == (0, 0, 0.0)


@pytest.mark.parametrize("key, count, words", [
    ("llama.block_count", 2**31, "layers"),
    ("llama.block_count", 513, "layers"),
    ("llama.expert_count", 10**6, "experts"),
])
def test_a_count_past_what_llama_cpp_loads_is_refused_before_anything_is_built_for_it(tmp_path, key, count, words):
    """A file declaring 2^31 layers once made `models list` grow to 22 GB (a list per declared layer)."""
    import resource

    from app.core.errors import ModelFileError
    from app.core.gguf import reader as g
    from app.core.llama.placement import footprint
    from tests.core.gguf.craft import Crafted

    path = Crafted().set(key, g.UINT32, count).write(tmp_path / "absurd.gguf")
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    resource.setrlimit(resource.RLIMIT_AS, (4 * 2**30, hard))   # the fault report's 4 GB address limit
    try:
        with pytest.raises(ModelFileError, match=words):
            footprint(read_gguf_info(path), 4096)
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
