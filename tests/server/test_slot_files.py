"""llama-server's slot actions (app/server/slot_files.py, app/core/slot_files.py, app/core/llama/seq_file.py):
POST /slots/{id}?action=save writes a slot's cache to llama.cpp's own sequence state file, restore makes
a file another slot's cache (its next request reads only its new tokens, and answers as the slot that
saved it), erase empties a slot; names, slots and servers without --slot-save-path are refused as
llama-server refuses them."""

from __future__ import annotations

import asyncio
import struct
import threading

import httpx
import pytest
from starlette.requests import Request

from app.core.errors import SlotFileError
from app.core.gguf.tiny import TinySpec, write_tiny_model
from app.core.llama.seq_file import TOKEN_NULL, pack, unpack
from app.core.params import DrafterKind
from app.server.errors import ApiError
from app.server.slot_files import filename_problem, slot_action
from tests.server.conftest import serving

GGSQ = 0x67677371    # llama.cpp's LLAMA_STATE_SEQ_MAGIC ('ggsq')
HEADER = struct.Struct("=III")
PROMPT = "the cat is on the mat and the dog is in the house"
MORE = PROMPT + " and the bird is in the tree"
ARCHITECTURES = ("mamba", "lfm2", "gemma4")   # recurrent, hybrid, sliding-window main models


def complete(url: str, prompt: str, slot: int, n_predict: int = 8, **more) -> dict:
    r = httpx.post(url + "/completion", timeout=120, json={"prompt": prompt, "id_slot": slot, "cache_prompt": True,
                                                            "n_predict": n_predict, "temperature": 0, **more})
    assert r.status_code == 200, r.text
    return r.json()


def act(url: str, slot, action: str, filename: str | None = None, **body) -> httpx.Response:
    json = {"filename": filename, **body} if filename is not None else (body or None)
    return httpx.post(f"{url}/slots/{slot}?action={action}", json=json, timeout=120)


@pytest.mark.parametrize("setup", ["shared context", "own contexts", "draft model", *ARCHITECTURES])
def test_a_restored_slot_reads_only_new_tokens_and_answers_as_the_slot_that_saved(tiny_models, tmp_path, setup):
    """Slot 1 reads a prompt and saves its cache; restored into slot 0, a longer prompt there reads only
    its new tokens, and slot 0's answer is slot 1's to the same prompt (read from the cache it kept).
    Erased, slot 1 reads the prompt whole again. Slots on one shared context or with contexts of their
    own, drafting with a draft model, and recurrent (mamba), hybrid (lfm2) or sliding-window (gemma4) main
    models alike."""
    draft = tiny_models.same if setup == "draft model" else None
    main = write_tiny_model(tmp_path / "main.gguf", TinySpec(architecture=setup)) if setup in ARCHITECTURES \
        else tiny_models.main
    folder = tmp_path / "slots"
    folder.mkdir()
    with serving(main, draft, parallel=2, merge=setup != "own contexts", slot_save_path=str(folder)) as s:
        first = complete(s.url, PROMPT, 1)
        whole = first["timings"]["prompt_n"]
        assert first["timings"]["cache_n"] == 0 and whole > 5
        saved = act(s.url, 1, "save", "slot1.bin")
        assert saved.status_code == 200, saved.text
        body = saved.json()
        assert body["id_slot"] == 1 and body["filename"] == "slot1.bin" and body["timings"]["save_ms"] >= 0
        assert body["n_saved"] >= whole and body["n_written"] == (folder / "slot1.bin").stat().st_size

        restored = act(s.url, 0, "restore", "slot1.bin")
        assert restored.status_code == 200, restored.text
        assert restored.json() | {"timings": None} == {"id_slot": 0, "filename": "slot1.bin", "timings": None,
                                                      "n_restored": body["n_saved"], "n_read": body["n_written"]}
        from_file, from_slot = complete(s.url, MORE, 0), complete(s.url, MORE, 1)
        assert from_file["timings"]["cache_n"] >= whole
        assert from_file["timings"]["prompt_n"] == from_slot["timings"]["prompt_n"] < whole
        assert from_file["content"] == from_slot["content"] and from_file["tokens"] == from_slot["tokens"]
        if draft is not None:   # the draft model caught up with the restored tokens, and drafted as well
            assert from_file["timings"]["draft_n_accepted"] == from_slot["timings"]["draft_n_accepted"] > 0

        erased = act(s.url, 1, "erase")
        assert erased.status_code == 200 and erased.json()["id_slot"] == 1 and erased.json()["n_erased"] > whole
        again = complete(s.url, PROMPT, 1)
        assert again["timings"]["cache_n"] == 0 and again["timings"]["prompt_n"] == whole
        assert again["content"] == first["content"]


def test_the_file_is_llama_cpps_sequence_state_with_llama_servers_packed_tokens(tiny_models, tmp_path):
    """magic, version, the words' count, then the words: the null token, the packing's version, the tokens'
    count, the tokens, no media. A plain token list (older llama-servers') restores as well, and another
    server (slots with contexts of their own) restores the file; a file that is none, or is missing, is a
    400 that names the file."""
    with serving(tiny_models.main, parallel=2, slot_save_path=str(tmp_path)) as s:
        complete(s.url, PROMPT, 0)
        n_saved = act(s.url, 0, "save", "a.bin").json()["n_saved"]
        data = (tmp_path / "a.bin").read_bytes()
        magic, _version, n_words = HEADER.unpack_from(data)
        assert magic == GGSQ and n_words == n_saved + 4
        words = list(struct.unpack_from(f"={n_words}i", data, HEADER.size))
        assert words[:3] == [TOKEN_NULL, 1, n_saved] and words[-1] == 0

        tokens = words[3:-1]   # rewritten as a plain list, as servers before the packing wrote it
        plain = HEADER.pack(magic, _version, n_saved) + struct.pack(f"={n_saved}i", *tokens) + \
            data[HEADER.size + 4 * n_words:]
        (tmp_path / "plain.bin").write_bytes(plain)
        restored = act(s.url, 1, "restore", "plain.bin")
        assert restored.status_code == 200 and restored.json()["n_restored"] == n_saved
        assert complete(s.url, MORE, 1)["timings"]["cache_n"] >= n_saved - 8

        first = complete(s.url, MORE, 0)
    with serving(tiny_models.main, parallel=2, merge=False, slot_save_path=str(tmp_path)) as s:   # another server
        assert act(s.url, 1, "restore", "a.bin").json()["n_restored"] == n_saved
        again = complete(s.url, MORE, 1)
        assert again["timings"]["cache_n"] >= n_saved - 8 and again["content"] == first["content"]

        (tmp_path / "junk.bin").write_bytes(b"not a state file at all")
        for name, problem in (("junk.bin", "not a llama.cpp sequence state file"), ("none.bin", "no such file")):
            r = act(s.url, 1, "restore", name)
            assert r.status_code == 400 and r.json()["error"]["type"] == "invalid_request_error"
            assert r.json()["error"]["message"].startswith(f"Unable to restore slot: {name}: ")
            assert problem in r.json()["error"]["message"]


def test_names_slots_and_actions_are_checked_as_llama_server_checks_them(tiny_models, tmp_path):
    with serving(tiny_models.main, parallel=2, slot_save_path=str(tmp_path)) as s:
        for name in ("../escape.bin", "a/b.bin", "a\\b.bin", "", "x.", " x", "..", "a:b", "a\x01b"):
            r = act(s.url, 0, "save", name)
            assert r.status_code == 400 and r.json()["error"]["message"].startswith("Invalid filename: "), name
        assert act(s.url, 0, "save", nothing=1).status_code == 400
        assert list(tmp_path.iterdir()) == [] and not (tmp_path.parent / "escape.bin").exists()
        for slot in (2, 99, -1, "x"):
            r = act(s.url, slot, "erase")
            assert r.status_code == 400 and r.json()["error"]["message"].startswith("Invalid slot ID"), slot
        r = act(s.url, 0, "load", "a.bin")
        assert r.status_code == 400 and r.json()["error"]["message"].startswith("Invalid action")


def test_without_a_slot_save_path_every_action_is_a_501(served):
    for action in ("save", "restore", "erase"):
        r = act(served.url, 0, action, "a.bin")
        assert r.status_code == 501 and r.json()["error"]["type"] == "not_supported_error"
        assert "--slot-save-path" in r.json()["error"]["message"]


def test_an_action_on_a_busy_slot_waits_for_its_answer_to_end(tiny_models, tmp_path):
    """As llama-server defers it: the file holds the whole answer's cache, not part of it."""
    with serving(tiny_models.main, parallel=2, slot_save_path=str(tmp_path)) as s:
        answer = threading.Thread(target=complete, args=(s.url, PROMPT, 0, 300), kwargs={"ignore_eos": True})
        answer.start()
        while answer.is_alive() and not httpx.get(s.url + "/slots").json()[0]["is_processing"]:
            pass
        saved = act(s.url, 0, "save", "busy.bin").json()
        answer.join()
        assert saved["n_saved"] == httpx.get(s.url + "/slots").json()[0]["n_cached"] > 250


def test_file_names_are_plain_names_in_the_folder():
    assert filename_problem("slot1.bin") == "" and filename_problem("naïve état.bin") == ""
    for name in ("", "a" * 256, "a/b", "a\\b", "..", ".", "x..y", "x.", " x", "x ", "a\x00", "a\x7f", "a\u2215b",
                 "a\uff0eb", "\ud800", "a|b", "a?b", "a*b", 'a"b', "a<b", "a>b"):
        assert filename_problem(name), name


def test_packed_tokens_are_read_back_and_what_cannot_be_restored_is_said():
    assert unpack(pack([5, 6, 7])) == [5, 6, 7] and unpack([5, 6, 7]) == [5, 6, 7] and unpack([]) == []
    for words, problem in (([TOKEN_NULL, 2, 0, 0], "version 2"), ([TOKEN_NULL, 1, 9, 0], "says it holds 9"),
                           ([TOKEN_NULL, 1, 1, 5, 1, 0], "media"), ([TOKEN_NULL, 1, 0, 0, 7], "after its tokens")):
        with pytest.raises(SlotFileError, match=problem):
            unpack(words)


def test_a_server_that_drafts_with_a_head_does_not_restore():
    """A head reads the main model's hidden state at every position: a file holds none (501)."""
    async def ask():
        body = b'{"filename": "a.bin"}'
        scope = {"type": "http", "method": "POST", "path": "/slots/0", "query_string": b"action=restore",
                 "headers": [(b"content-length", str(len(body)).encode())], "path_params": {"id_slot": "0"}}

        async def receive():
            return {"type": "http.request", "body": body, "more_body": False}
        return await slot_action(Request(scope, receive), "/tmp", DrafterKind.MTP)

    with pytest.raises(ApiError) as refused:
        asyncio.run(ask())
    assert refused.value.status == 501 and "hidden state" in refused.value.message
