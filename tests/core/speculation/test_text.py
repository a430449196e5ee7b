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


def test_n_indent_ends_the_answer_at_a_line_indented_less_keeping_its_spaces():
    """llama-server's n_indent (editors' FIM): a line after the first whose text starts with fewer spaces
    or tabs ends the answer before that text; the first line and blank lines do not count."""
    a = TextAssembler(n_indent=4)
    pieces = feed(a, [b"x = 1\n", b"    y = 2\n", b"\n", b"  ", b"z", b" = 3\n"])
    assert "".join(p.text for p in pieces) == "x = 1\n    y = 2\n\n  "
    assert a.stopped and a.limited
    whole = TextAssembler(n_indent=2)
    assert "".join(p.text for p in feed(whole, [b"a\n", b"  b\n", b"\t\tc"])) == "a\n  b\n\t\tc"
    assert not whole.stopped


def test_a_stop_string_is_not_a_limit_and_end_here_is():
    a = TextAssembler(["END"])
    feed(a, [b"oneEND"])
    assert a.stopped and not a.limited
    b = TextAssembler()
    b.push(0, b"first line\n", Origin.MAIN)
    b.end_here()
    assert b.stopped and b.limited and b.push(1, b"more", Origin.MAIN) is None and b.text == "first line\n"
