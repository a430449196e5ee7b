"""Message text to HTML for a QTextBrowser: Markdown through Qt's own parser, fenced code blocks
highlighted with Pygments and given a copy link, or token pieces coloured by their origin.

Model and user text never load anything: raw HTML in Markdown is shown as text, an image becomes a
link labelled with its alt text, and the documents involved refuse every resource (a model that
writes ``![x](/dev/zero)`` must not make the window read a file)."""

from __future__ import annotations

import html
import re
from dataclasses import dataclass, field
from functools import lru_cache

from pygments import highlight
from pygments.formatters import HtmlFormatter
from pygments.lexers import TextLexer, get_lexer_by_name, guess_lexer
from pygments.util import ClassNotFound
from PySide6.QtGui import QImage, QTextCharFormat, QTextCursor, QTextDocument, QTextFormat

from app.gui.widgets import theme

FENCE = re.compile(r"^[ \t]{0,3}(`{3,}|~{3,})[ \t]*([\w+#.-]*)[^\n]*$", re.MULTILINE)
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")
_BODY = re.compile(r"<body[^>]*>(.*)</body>", re.DOTALL)
_FORMATTER = HtmlFormatter(noclasses=True, nowrap=True, style="friendly")
COPY_CODE = "copy-code:"
_COPY_CODE_LINK = re.compile(re.escape(COPY_CODE) + r"(\d{1,6})")
MARKDOWN = QTextDocument.MarkdownFeature.MarkdownDialectGitHub | QTextDocument.MarkdownFeature.MarkdownNoHTML


@dataclass(frozen=True)
class Block:
    kind: str          # "text" or "code"
    content: str
    language: str = ""
    start: int = field(default=0, compare=False)   # where ``content`` begins in the text split


def clean(text: str) -> str:
    """Control characters (random models emit them) become a visible replacement mark."""
    return _CONTROL.sub("\ufffd", text)


def split_blocks(text: str) -> list[Block]:
    """Prose and fenced code blocks in order; an unclosed fence (still streaming) runs to the end."""
    blocks: list[Block] = []
    pos = 0
    while True:
        opening = FENCE.search(text, pos)
        if opening is None:
            break
        if opening.start() > pos:
            blocks.append(Block("text", text[pos:opening.start()], start=pos))
        fence, language = opening.group(1), opening.group(2)
        body_start = opening.end() + 1
        closing = re.compile(rf"^[ \t]{{0,3}}{re.escape(fence[0])}{{{len(fence)},}}[ \t]*$", re.MULTILINE)
        end = closing.search(text, body_start)
        code = text[body_start:end.start() if end else len(text)]
        blocks.append(Block("code", code.rstrip("\n"), language.lower(), start=body_start))
        if end is None:
            return blocks
        pos = end.end() + 1
    if pos < len(text):
        blocks.append(Block("text", text[pos:], start=pos))
    return blocks


def code_blocks(text: str) -> list[str]:
    return [b.content for b in split_blocks(text) if b.kind == "code"]


def copy_code_index(link: str) -> int | None:
    """The code block a copy link names; None for any other link (a model can write links too)."""
    match = _COPY_CODE_LINK.fullmatch(link)
    return int(match.group(1)) if match else None


def inert_resource(kind: int) -> QImage | str:
    """What a document showing model or user text gets for any resource it asks for. Not None:
    Qt then reads a local file itself (QTextDocument::loadResource, QTextImageHandler)."""
    if kind == QTextDocument.ResourceType.ImageResource.value:
        blank = QImage(1, 1, QImage.Format.Format_ARGB32)
        blank.fill(0)
        return blank
    return ""


class InertDocument(QTextDocument):
    """A document that loads no resource: no file, no URL, no Qt resource."""

    def loadResource(self, kind: int, _name) -> QImage | str:
        return inert_resource(kind)


def render_markdown(text: str) -> str:
    parts = []
    code_index = 0
    for block in split_blocks(clean(text)):
        if block.kind == "code":
            parts.append(_code_html(block, code_index))
            code_index += 1
        elif block.content.strip():
            parts.append(_prose_html(hard_breaks(block.content)))
    return "".join(parts)


def hard_breaks(markdown: str) -> str:
    """Each single line break made a hard one (two trailing spaces), as chat apps show answers:
    Markdown alone joins a model's "one per line" lines into one paragraph. Blank lines still part
    paragraphs, and a break at the end of a block (a list item, a heading) is no break at all."""
    lines = markdown.split("\n")
    return "\n".join(line + "  " if line.strip() and following.strip() else line
                     for line, following in zip(lines, [*lines[1:], ""]))


def render_plain(text: str) -> str:
    """A user's message as typed: no Markdown, every line break and space kept."""
    escaped = html.escape(clean(text)).replace("\n", "<br/>")
    return f'<p style="white-space:pre-wrap;">{escaped}</p>'


def render_runs(runs: list[tuple[str, str]] | list[list[str]]) -> str:
    """Each run of text on the colour of where its tokens came from. Fenced code is shown as in the
    Markdown view (a code block, highlighted, with its copy link; no fences), each token on its origin's
    colour: the fences showed raw and the highlighting was lost."""
    text = clean("".join(t for t, _ in runs))
    pieces, at = [], 0
    for run_text, origin in runs:
        pieces.append((at, at + len(run_text), origin))
        at += len(run_text)
    parts, code_index = [], 0
    for block in split_blocks(text):
        end = block.start + len(block.content.rstrip("\n"))
        cut = [(max(a, block.start), min(b, end), origin) for a, b, origin in pieces if a < end and b > block.start]
        if block.kind == "code":
            inner = _coloured_code(block, [(a - block.start, b - block.start, origin) for a, b, origin in cut])
            parts.append(_code_table(block.language, code_index, inner))
            code_index += 1
        elif end > block.start:
            spans = "".join(_origin_span(text[a:b], origin) for a, b, origin in cut)
            parts.append(f'<p style="white-space:pre-wrap;">{spans}</p>')
    return "".join(parts)


def _origin_span(text: str, origin: str, style: str = "") -> str:
    colour = {"draft": theme.DRAFT_BG, "suffix": theme.SUFFIX_BG}.get(origin, theme.MAIN_BG)
    escaped = html.escape(text).replace("\n", "<br/>")
    return f'<span style="background-color:{colour};{style}">{escaped}</span>'


def _coloured_code(block: Block, pieces: list[tuple[int, int, str]]) -> str:
    """A code block's tokens, each part of a token on its origin's colour and in its highlighting's
    colour (``pieces``: (start, end, origin) within the block)."""
    spans, at = [], 0
    for kind, value in _code_tokens(block):
        style = _token_css(kind)
        for a, b, origin in pieces:
            low, high = max(a, at), min(b, at + len(value))
            if low < high:
                spans.append(_origin_span(block.content[low:high], origin, style).replace("<br/>", "\n"))
        at += len(value)
    return "".join(spans)


@lru_cache(maxsize=512)
def _code_tokens(block: Block) -> tuple:
    """(Pygments token type, text) for the block's code, which they spell out whole; while an answer
    streams only its last block changes, so the others are lexed once."""
    tokens = tuple(_lexer(block, stripnl=False, ensurenl=False).get_tokens(block.content))
    if "".join(value for _, value in tokens) != block.content:   # a lexer that rewrote the text: no highlighting
        return ((None, block.content),)
    return tokens


def _token_css(kind) -> str:
    """The highlighting's colour and weight for a Pygments token type, as the Markdown view's code has them."""
    if kind is None:
        return ""
    style = _FORMATTER.style.style_for_token(kind)
    return ((f"color:#{style['color']};" if style["color"] else "") + ("font-weight:bold;" if style["bold"] else "")
            + ("font-style:italic;" if style["italic"] else ""))


# While an answer streams only its last block changes: earlier blocks come from these caches.
@lru_cache(maxsize=512)
def _prose_html(markdown: str) -> str:
    doc = InertDocument()
    doc.setMarkdown(markdown, MARKDOWN)
    _images_to_links(doc)
    match = _BODY.search(doc.toHtml())
    return match.group(1) if match else html.escape(markdown)


def _images_to_links(doc: QTextDocument) -> None:
    """Each image becomes a link (never followed) labelled with its alt text, or its address."""
    images = [fragment for fragment in _fragments(doc) if fragment.charFormat().isImageFormat()]
    for fragment in reversed(images):  # from the end, so earlier positions stay valid
        image = fragment.charFormat().toImageFormat()
        alt = clean(str(image.property(QTextFormat.Property.ImageAltText) or ""))
        link = QTextCharFormat()
        link.setAnchor(True)
        link.setAnchorHref(image.name())
        cursor = QTextCursor(doc)
        cursor.setPosition(fragment.position())
        cursor.setPosition(fragment.position() + fragment.length(), QTextCursor.MoveMode.KeepAnchor)
        cursor.insertText(alt if alt.strip() else clean(image.name()) or "image", link)


def _fragments(doc: QTextDocument):
    block = doc.begin()
    while block.isValid():
        it = block.begin()
        while not it.atEnd():
            yield it.fragment()
            it += 1
        block = block.next()


@lru_cache(maxsize=512)
def _code_html(block: Block, index: int) -> str:
    return _code_table(block.language, index, highlight(block.content, _lexer(block), _FORMATTER))


def _code_table(language: str, index: int, highlighted: str) -> str:
    """A code block: its language and copy link over the code (HTML already escaped and coloured)."""
    label = html.escape(language or "code")
    return (
        f'<table width="100%" border="0" cellspacing="0" cellpadding="6" bgcolor="{theme.CODE_BG}" '
        f'style="margin-top:6px;margin-bottom:6px;">'
        f'<tr><td style="color:{theme.MUTED};font-size:small;">{label}</td>'
        f'<td align="right" style="font-size:small;"><a href="{COPY_CODE}{index}" '
        f'style="color:{theme.ACCENT};text-decoration:none;">Copy code</a></td></tr>'
        f'<tr><td colspan="2"><pre style="font-family:{theme.MONO};margin:0;white-space:pre-wrap;">{highlighted}</pre></td></tr></table>'
    )


def _lexer(block: Block, **options):
    try:
        return (get_lexer_by_name(block.language, **options) if block.language
                else guess_lexer(block.content, **options))
    except ClassNotFound:
        return TextLexer(**options)
