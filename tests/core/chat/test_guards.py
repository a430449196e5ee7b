"""Chat rendering is bounded, and chat messages are checked before anything renders them."""

from __future__ import annotations

import threading
import time

import pytest

from app.core.chat import prompt as chat
from app.core.chat.deadline import Deadline, DeadlineExceeded
from app.core.chat.prompt import check_messages, render_prompt
from app.core.errors import InvalidMessagesError

NESTED_LOOPS = ("{% for a in range(100000) %}{% for b in range(100000) %}{% for m in messages %}"
                "{{ m.content }}{% endfor %}{% endfor %}{% endfor %}")
SILENT_LOOPS = "{% for a in range(100000) %}{% for b in range(100000) %}{% endfor %}{% endfor %}x"
MESSAGES = [{"role": "user", "content": "hi"}]


@pytest.fixture
def short_limit(monkeypatch):
    monkeypatch.setattr(chat, "RENDER_TIME_LIMIT_S", 0.3)


@pytest.mark.parametrize("template", [NESTED_LOOPS, SILENT_LOOPS])
def test_a_template_that_renders_for_minutes_falls_back_with_a_warning(short_limit, template):
    start = time.perf_counter()
    rendered = render_prompt(MESSAGES, template)
    assert time.perf_counter() - start < 3
    assert not rendered.templated and rendered.text == chat.render_plain(MESSAGES)
    assert "took longer than 0.3 s" in rendered.warning


def test_the_bound_holds_in_a_worker_thread(short_limit):
    results = []
    thread = threading.Thread(target=lambda: results.append(render_prompt(MESSAGES, SILENT_LOOPS)))
    start = time.perf_counter()
    thread.start()
    thread.join(10)
    assert not thread.is_alive() and time.perf_counter() - start < 3
    assert results[0].warning


@pytest.mark.parametrize("template, reason", [
    ("{{ 'x' * 100000000 }}", "a repetition too long"),     # one huge repeat is refused, not allocated
    ("{{ 2 ** 100000000 }}", "a power too large"),
    ("{% for a in range(100000) %}{{ 'y' * 100 }}{% endfor %}", "wrote more than 4,000,000 characters"),
    ("{{ messages.__class__.__mro__ }}", "refused by the sandbox"),
    # one C-level call that builds a huge string: refused from its arguments before it runs (sizes.py);
    # 'x'.center(10**10) ran 27 s and built 10 GB past the time limit
    ("{{ 'x'.center(10000000000) }}", "a center() too long"),
    ("{{ 'x'.ljust(10000000000) }}", "a ljust() too long"),
    ("{{ 'x'.rjust(10000000000) }}", "a rjust() too long"),
    ("{{ 'x'.zfill(10000000000) }}", "a zfill() too long"),
    ("{{ ('\t' * 1000000).expandtabs(1000) }}", "a expandtabs() too long"),
    ("{{ ('x' * 4000000).replace('x', 'yyyy') }}", "a replace() too long"),
    ("{{ '-'.join(['x' * 4000000] * 3) }}", "a join() too long"),
    ("{{ ('x' * 4000000).join(range(3) | map('string')) }}", "a join() too long"),   # a generator, listed
    ("{{ '{:>10000000000}'.format(1) }}", "a format() too long"),
    ("{{ '{:{}}'.format(1, 10000000000) }}", "a format() too long"),
    ("{{ '{x:.10000000000f}'.format_map({'x': 1.0}) }}", "a format() too long"),
    ("{{ '%10000000000d' % 1 }}", "a % format too long"),
    ("{{ '%*d' % (10000000000, 1) }}", "a % format too long"),
    ("{{ 'x' | center(10000000000) }}", "a 'center' filter"),
    ("{{ 'x\nx' | indent(10000000000) }}", "a 'indent' filter"),
    ("{{ ('x' * 4000000) | replace('x', 'yy') }}", "a 'replace' filter"),
    ("{{ '%10000000000d' | format(1) }}", "a 'format' filter"),
    ("{{ (['x' * 4000000] * 3) | join }}", "a 'join' filter"),
    ("{{ range(3) | map('string') | join('x' * 4000000) }}", "a 'join' filter"),
    ("{% set ns = namespace(s='x') %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}",
     "a concatenation too long"),
    ("{% set ns = namespace(s='x') %}{% for i in range(40) %}{% set ns.s = ns.s + ns.s %}{% endfor %}",
     "a concatenation too long"),
    ("{% set ns = namespace(s=[1]) %}{% for i in range(40) %}{% set ns.s = ns.s + ns.s %}{% endfor %}",
     "a concatenation too long"),
])
def test_costly_or_hostile_templates_fall_back_with_a_warning(template, reason):
    rendered = render_prompt(MESSAGES, template)
    assert not rendered.templated and reason in rendered.warning


def test_string_building_within_the_bound_renders_as_python_would():
    template = ("{{ 'ab'.center(6, '*') }}|{{ '%-4s|%03d' % ('x', 7) }}|{{ '{:>5}'.format('r') }}|"
                "{{ 'a-b'.replace('-', '+') }}|{{ ', '.join(['1', '2']) }}|{{ ['p', 'q'] | join('/') }}|"
                "{{ messages | map(attribute='role') | join }}|{{ 'k' ~ 1 }}|{{ 'x' | center(3) }}|"
                "{{ 'a\nb' | indent(2) }}|{{ '%s!' | format('hi') }}|{{ 'aXa' | replace('X', 'y') }}")
    rendered = render_prompt(MESSAGES, template)
    assert rendered.warning is None
    assert rendered.text == "**ab**|x   |007|    r|a+b|1, 2|p/q|user|k1| x |a\n  b|hi!|aya"


def test_an_ordinary_template_renders_without_warning():
    rendered = render_prompt(MESSAGES, "{% for m in messages %}[{{ m.role }}]{{ m.content }}{% endfor %}")
    assert rendered.templated and rendered.text == "[user]hi" and rendered.warning is None


def test_a_deadline_that_was_not_reached_leaves_nothing_behind():
    with Deadline(0.05):
        pass
    time.sleep(0.1)                 # a late timer must not raise here
    with pytest.raises(DeadlineExceeded):
        with Deadline(0.05):
            while True:
                pass


@pytest.mark.parametrize("messages, message", [
    ({"role": "user"}, "non-empty list"),
    ([], "non-empty list"),
    ("hello", "non-empty list"),
    ([{"role": "user"}], "Message 1 is not"),
    ([{"role": "user", "content": 5}], "Message 1 is not"),
    (["hi"], "Message 1 is not"),
    ([{"role": "user", "content": "ok"}, {"role": None, "content": "x"}], "Message 2 is not"),
    ([{"role": "user", "content": "a\ud800b"}], "content of message 1 is not valid text: character 2"),
    ([{"role": "user", "content": "caf\udce9"}], "lone surrogate"),
])
def test_malformed_messages_are_one_clear_error(messages, message):
    with pytest.raises(InvalidMessagesError, match=message):
        check_messages(messages)


# a ChatML template that reads a variable llama.cpp's own Jinja engine sets and ours does not
UNRENDERABLE_CHATML = ("{{ functions | nosuchfilter }}{% for m in messages %}<|im_start|>{{ m.role }}\n"
                       "{{ m.content }}<|im_end|>\n{% endfor %}<|im_start|>assistant\n")


def test_a_template_our_jinja_cannot_render_is_rendered_by_llama_cpp_in_the_format_it_shows():
    rendered = render_prompt(MESSAGES, UNRENDERABLE_CHATML)
    assert rendered.templated
    assert rendered.text == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    assert "could not be rendered" in rendered.warning and "llama.cpp's built-in format" in rendered.warning
    assert "nosuchfilter" in rendered.failure


def test_a_template_neither_can_render_falls_back_to_plain_text_with_a_warning():
    rendered = render_prompt(MESSAGES, "{{ functions | nosuchfilter }}[{{ messages[0].content }}]")
    assert not rendered.templated and rendered.text == chat.render_plain(MESSAGES)
    assert "a plain transcript was used instead" in rendered.warning



@pytest.mark.parametrize("expression", ["'a' + functions", "functions + 'a'", "'a' + none", "none + 'a'"])
def test_nothing_added_to_text_is_empty_text_as_in_llama_cpps_jinja(expression):
    rendered = render_prompt(MESSAGES, "{{ " + expression + " }}")
    assert rendered.templated and rendered.text == "a" and rendered.warning is None


def test_nothing_added_to_a_number_is_still_an_error():
    assert not render_prompt(MESSAGES, "{{ 1 + functions }}").templated
