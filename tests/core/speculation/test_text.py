from app.core.speculation.events import Origin
from app.core.speculation.text import TextAssembler


def feed(assembler, chunks):
    out = []
    for i, chunk in enumerate(chunks):
        piece = assembler.push(i, chunk, Origin.MAIN)
        if piece is not None:
            out.append(piece)
    tail = assembler.finish()
    if tail is not None:
        out.append(tail)
    return out


def test_a_character_split_across_tokens_waits_for_its_last_byte():
    euro = "€".encode()  # three bytes
    pieces = feed(TextAssembler(), [b"a", euro[:1], euro[1:2], euro[2:], b"b"])
    assert [p.text for p in pieces] == ["a", "€", "b"]
    assert [p.token_ids for p in pieces] == [(0,), (1, 2, 3), (4,)]


def test_invalid_bytes_become_replacement_characters_at_the_end():
    pieces = feed(TextAssembler(), [b"ok", b"\xe2\x82"])
    assert "".join(p.text for p in pieces) == "ok\ufffd"


def test_stop_string_split_across_tokens_is_cut_and_never_shown():
    a = TextAssembler(["</end>"])
    pieces = feed(a, [b"hello <", b"/en", b"d> more"])
    assert "".join(p.text for p in pieces) == "hello "
    assert a.stopped and a.text == "hello "


def test_a_false_stop_start_is_released():
    a = TextAssembler(["STOP"])
    pieces = feed(a, [b"ST", b"ART"])
    assert "".join(p.text for p in pieces) == "START"
    assert not a.stopped
