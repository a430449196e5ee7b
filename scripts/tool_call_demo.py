#!/usr/bin/env python3
"""A tool-calling round trip against a running server, with the official ``openai`` client.

    quickdraft serve -m qwen2.5-coder-1.5b-instruct-q4_k_m.gguf -md qwen2.5-coder-0.5b-instruct-q4_k_m.gguf
    python scripts/tool_call_demo.py --url http://127.0.0.1:8080

Asks "What is the weather in Paris?" with a ``get_weather`` tool, whole and streamed, prints what
came back (finish_reason, the calls, their arguments), then sends the next turn with the tool's
result, as an agent does (the tools offered again, "auto"), and prints the answer. A small model
may call the tool once more there; then the turn is asked again with ``"tool_choice": "none"``
(answer from what you have). Exits 1 when a check fails: finish_reason "tool_calls" and a call to
get_weather with Paris in its arguments (whole and streamed), an answer with text after the result.
"""

from __future__ import annotations

import argparse
import json
import sys

WEATHER_TOOL = {"type": "function", "function": {
    "name": "get_weather",
    "description": "Get the current weather in a city.",
    "parameters": {"type": "object",
                   "properties": {"location": {"type": "string", "description": "The city, e.g. Paris"},
                                  "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
                   "required": ["location"]}}}
QUESTION = [{"role": "user", "content": "What is the weather in Paris?"}]
RESULT = {"location": "Paris", "temperature": 24, "unit": "celsius", "conditions": "sunny"}


def main() -> int:
    args = parse_args()
    import openai

    client = openai.OpenAI(base_url=args.url.rstrip("/") + "/v1", api_key=args.api_key or "unused",
                           max_retries=0, timeout=args.timeout)
    model = args.model or client.models.list().data[0].id
    common = {"model": model, "tools": [WEATHER_TOOL], "temperature": 0, "max_tokens": args.max_tokens}
    failures: list[str] = []

    print(f"== {model}: whole answer")
    whole = client.chat.completions.create(messages=QUESTION, **common)
    choice = whole.choices[0]
    calls = [(c.id, c.function.name, c.function.arguments) for c in choice.message.tool_calls or []]
    show(choice.finish_reason, choice.message.content, calls, choice.message.model_extra.get("reasoning_content"))
    failures += check("whole", choice.finish_reason, calls)

    print("== streamed")
    chunks = list(client.chat.completions.create(messages=QUESTION, stream=True, **common))
    streamed_calls: dict[int, list] = {}
    content, finish = "", None
    for chunk in chunks:
        if not chunk.choices:
            continue
        delta = chunk.choices[0].delta
        content += delta.content or ""
        finish = chunk.choices[0].finish_reason or finish
        for call in delta.tool_calls or []:
            entry = streamed_calls.setdefault(call.index, [None, "", ""])
            if call.id:
                entry[0] = call.id
            if call.function and call.function.name:
                entry[1] += call.function.name
            if call.function and call.function.arguments:
                entry[2] += call.function.arguments
    deltas = sum(len(c.choices[0].delta.tool_calls or []) for c in chunks if c.choices)
    print(f"   {len(chunks)} chunks, {deltas} tool-call deltas")
    show(finish, content or None, [tuple(v) for _, v in sorted(streamed_calls.items())], None)
    failures += check("streamed", finish, [tuple(v) for v in streamed_calls.values()])

    if calls:
        print("== the next turn, with the tool's result")
        assistant = {"role": "assistant", "content": choice.message.content,
                     "tool_calls": [{"id": i, "type": "function", "function": {"name": n, "arguments": a}}
                                    for i, n, a in calls]}
        results = [{"role": "tool", "tool_call_id": i, "content": json.dumps(RESULT)} for i, _, _ in calls]
        conversation = QUESTION + [assistant] + results
        answer = follow_up(client, conversation, common)
        if answer.message.tool_calls:
            print("== the model called again; the same turn with \"tool_choice\": \"none\"")
            answer = follow_up(client, conversation, common | {"tool_choice": "none"})
        if not (answer.message.content or "").strip():
            failures.append("the answer after the tool's result has no text")
    for failure in failures:
        print(f"FAILED: {failure}")
    print("OK" if not failures else f"{len(failures)} check(s) failed")
    return 1 if failures else 0


def follow_up(client, conversation: list, common: dict):
    answer = client.chat.completions.create(messages=conversation, **common).choices[0]
    show(answer.finish_reason, answer.message.content,
         [(c.id, c.function.name, c.function.arguments) for c in answer.message.tool_calls or []], None)
    return answer


def show(finish: str | None, content: str | None, calls: list, reasoning: str | None) -> None:
    print(f"   finish_reason: {finish}")
    if reasoning:
        print(f"   reasoning_content: {reasoning!r}")
    print(f"   content: {content!r}")
    for call_id, name, arguments in calls:
        print(f"   tool call {call_id}: {name}({arguments})")


def check(way: str, finish: str | None, calls: list) -> list[str]:
    failures = []
    if finish != "tool_calls":
        failures.append(f"{way}: finish_reason is {finish!r}, not 'tool_calls'")
    weather = [arguments for _, name, arguments in calls if name == "get_weather"]
    if not weather:
        failures.append(f"{way}: no call to get_weather")
    elif not any("paris" in arguments.lower() and _is_object(arguments) for arguments in weather):
        failures.append(f"{way}: get_weather's arguments {weather} do not name Paris as a JSON object")
    return failures


def _is_object(text: str) -> bool:
    try:
        return isinstance(json.loads(text), dict)
    except ValueError:
        return False


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", default="http://127.0.0.1:8080", help="the server (default %(default)s)")
    parser.add_argument("--model", help="the model name to send (default: the server's first)")
    parser.add_argument("--api-key", help="the server's API key, if it has one")
    parser.add_argument("--max-tokens", type=int, default=256, help="per answer (default %(default)s)")
    parser.add_argument("--timeout", type=float, default=600, help="seconds per request (default %(default)s)")
    return parser.parse_args()


if __name__ == "__main__":
    sys.exit(main())
