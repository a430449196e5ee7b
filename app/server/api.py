"""OpenAI request bodies, checked and turned into generation settings; OpenAI-style errors.

``model`` may name anything, or be left out: the server serves one pair, so, as llama-server does,
it answers every name with that pair (editors and scripts send fixed names such as "gpt-4o-mini"),
and the answer's ``model`` names the pair that answered. Only its type is checked (a string).
"""

from __future__ import annotations

import dataclasses
import json
import re
from dataclasses import dataclass, field
from typing import Any

from app.core.errors import InvalidParameterError
from app.core.params import SamplingParams
from app.server.errors import ApiError
from app.server.fields import logit_bias, logprobs_from, n_predict, refuse_unsupported, samplers, text_biases
from app.server.structured import grammar_from, response_schema

# llama-server's defaults for what a request leaves out (the OpenAI API has no top_k or min_p)
DEFAULT_SAMPLING = SamplingParams(temperature=0.8, top_k=40, top_p=0.95, min_p=0.05, max_tokens=1 << 30)
ROLES = {"system": "system", "developer": "system", "user": "user", "assistant": "assistant", "tool": "tool"}
TOOL_NAME = re.compile(r"[A-Za-z0-9_.\-]{1,64}")    # OpenAI's rule, and dots (gpt-oss's built-in tools)
TOOL_CHOICES = ("auto", "none", "required")
REASONING_EFFORTS = ("none", "minimal", "low", "medium", "high")
# names the chat template is given by the server itself: chat_template_kwargs may not set them
RESERVED_TEMPLATE_NAMES = ("messages", "tools", "add_generation_prompt", "bos_token", "eos_token")
MAX_STOP_STRINGS = 4
MAX_TOOLS = 1024                  # OpenAI allows 128; each tool is checked, protected and rendered per request
RANDOM_SEED = -1                  # llama-server's "seed": -1: a fresh random seed
MAX_TOKENS_LIMIT = 2**31 - 1      # llama-server's n_predict is a 32-bit integer
NO_LIMIT = DEFAULT_SAMPLING.max_tokens   # max_tokens when a request sets none: the context is the limit


@dataclass(frozen=True)
class ToolChoice:
    """A request's tools and how it wants them used."""

    tools: tuple[dict, ...]        # the tool definitions, as the request gave them ({"type": "function", ...})
    mode: str = "auto"             # "auto" | "none" | "required" | "function" (the one named must be called)
    name: str | None = None        # mode "function": the function's name
    parallel: bool = True          # parallel_tool_calls: False keeps only the answer's first call

    @property
    def names(self) -> list[str]:
        return [t["function"]["name"] for t in self.tools]


@dataclass(frozen=True)
class ApiRequest:
    """What one request asks the engine for: chat messages, or a completion prompt (text or ids)."""

    kind: str                                  # "chat" | "completion" | "infill"
    sampling: SamplingParams
    messages: tuple[dict, ...] = ()
    # completion: llama-server's prompt, text parts and token ids in order (a string is one part)
    prompt: tuple[str | int, ...] = ()
    stream: bool = False
    include_usage: bool = False
    timings_per_token: bool = False
    tools: ToolChoice | None = None                               # chat: tools the model may call
    template_variables: dict = field(default_factory=dict)        # chat: further names for the chat template
    infill: Any = None                       # infill: the FIM request's parts (native_api.Infill)
    cache_prompt: bool = True                # False: the prompt is decoded whole, as llama-server's cache_prompt
    bias_texts: tuple[tuple[str, float], ...] = ()   # logit_bias given as texts: each of their tokens is biased
    ignore_eos: bool = False                 # llama-server's: end-of-generation tokens are banned
    grammar: str | None = None               # GBNF the answer follows (grammar, json_schema, response_format)
    response_schema: dict | None = None      # the JSON Schema that grammar came from (None: none, or GBNF given)
    continues_final: bool = False            # chat: the answer goes on from the final assistant message
    generation_prompt: bool = True           # chat: False, the prompt is the messages alone (add_generation_prompt)
    verbose: bool = False                    # an OpenAI answer also carries llama-server's __verbose (its native body)
    id_slot: int = -1                        # the slot that answers it (llama-server's id_slot; -1: any)
    return_progress: bool = False            # a stream also says how much of the prompt is read (prompt_progress)


def parse_chat(body: Any) -> ApiRequest:
    body = json_object(body)
    check_model(body)
    messages = _messages(body.get("messages"))
    continues = _continues_final(body, messages)
    if continues:   # the answer's own start: its parts as llama.cpp joins a continued message's
        last = len(messages) - 1
        messages = messages[:last] + ({**messages[last], "content": _content(
            body["messages"][last]["content"], f"messages[{last}].content", "\n\n")},)
    alone = not continues and body.get("add_generation_prompt") is False
    return ApiRequest("chat", sampling_from(body), messages=messages, tools=_tool_choice(body),
                      template_variables=_template_variables(body), continues_final=continues,
                      generation_prompt=not alone, **delivery_from(body))


def _continues_final(body: dict, messages: tuple[dict, ...]) -> bool:
    """Whether the answer goes on from the final assistant message, as llama-server decides it (its
    assistant prefill; vLLM's ``continue_final_message``): when asked, with ``add_generation_prompt``
    false, or when the conversation ends with an assistant message after one that is not. The message
    continued is text: one holding tool calls cannot be continued. (``add_generation_prompt`` false
    alone leaves the prompt at the messages' end: the answer goes on from the last one, whoever wrote it.)"""
    asked = body.get("continue_final_message")
    if asked not in (None, False, True, "content"):
        raise ApiError(400, "'continue_final_message' must be true, false or \"content\" (an answer's reasoning "
                       "is not continued).", param="continue_final_message")
    generation_prompt = field_value(body, "add_generation_prompt", bool, "true or false")
    ends_with_answer = messages[-1]["role"] == "assistant"
    if asked in (None, False):
        if not ends_with_answer:
            return False
        if len(messages) > 1 and messages[-2]["role"] == "assistant":
            raise ApiError(400, "Cannot have 2 or more assistant messages at the end of the list.", param="messages")
    elif generation_prompt is not False:
        raise ApiError(400, "Cannot set both add_generation_prompt and continue_final_message to true.",
                       param="continue_final_message")
    elif not ends_with_answer:
        raise ApiError(400, "'continue_final_message' needs the last message to be the assistant's.",
                       param="continue_final_message")
    if messages[-1].get("tool_calls"):
        raise ApiError(400, "Cannot continue an assistant message that contains tool calls.", param="messages")
    return True


def refuse_chat_fields(body: dict) -> None:
    """The fields that shape a chat prompt's end, refused on a completion (its prompt is the request's
    own text) rather than ignored."""
    for name, neutral in (("continue_final_message", False), ("add_generation_prompt", True)):
        if body.get(name) not in (None, neutral):
            raise ApiError(400, f"'{name}' shapes a chat prompt's end; a completion's prompt is the request's own "
                           "text.", param=name)


def parse_completion(body: Any) -> ApiRequest:
    body = json_object(body)
    check_model(body)
    refuse_chat_fields(body)
    if several_prompts(body.get("prompt")) is not None:   # one answer's choices would not say which prompt
        raise ApiError(400, "'prompt' holds several prompts: /v1/completions answers one a request (llama-server's "
                       "/completion answers an array of them).", param="prompt")
    prompt = prompt_parts(body.get("prompt"))
    return ApiRequest("completion", sampling_from(body), prompt=prompt, **delivery_from(body))


def json_object(body: Any) -> dict:
    if not isinstance(body, dict):
        raise ApiError(400, "The request body must be a JSON object.")
    return body


def check_model(body: dict) -> None:
    """Any name is the loaded pair (see the module docstring); a name that is not a string is a 400."""
    field_value(body, "model", str, "a string")


def sampling_from(body: dict) -> SamplingParams:
    """The sampling a body asks for; a field Quickdraft does not run is refused (fields.py)."""
    d = DEFAULT_SAMPLING
    refuse_unsupported(body)
    n = field_value(body, "n", int, "an integer")
    if n is not None and n != 1:   # a chat's n up to 16 is answered as that many requests (app.py's chat)
        raise ApiError(400, "'n' must be 1 here (a chat answers 2 to 16 choices, not streamed).", param="n")
    max_tokens = field_value(body, "max_completion_tokens", int, "an integer")
    max_tokens = n_predict(body, field_value(body, "max_tokens", int, "an integer", max_tokens))
    if max_tokens is not None and max_tokens > MAX_TOKENS_LIMIT:
        raise ApiError(400, f"'max_tokens' must be at most {MAX_TOKENS_LIMIT}; got {max_tokens}.", param="max_tokens")
    seed = field_value(body, "seed", int, "an integer")
    try:
        return SamplingParams(
            temperature=_ranged(body, "temperature", d.temperature, 0.0, 2.0),
            top_p=_ranged(body, "top_p", d.top_p, 0.0, 1.0),
            min_p=_ranged(body, "min_p", d.min_p, 0.0, 1.0),
            top_k=_counted(body, "top_k", d.top_k, minimum=0),
            seed=None if seed == RANDOM_SEED else seed,
            max_tokens=positive(max_tokens, "max_tokens") if max_tokens is not None else NO_LIMIT,
            stop=_stop(body.get("stop")),
            logit_bias=logit_bias(body),
            n_indent=max(0, field_value(body, "n_indent", int, "an integer", 0)),
            max_predict_ms=max(0, field_value(body, "t_max_predict_ms", int, "an integer", 0)),
            samplers=samplers(body),
            logprobs=logprobs_from(body),
            post_sampling_probs=bool(field_value(body, "post_sampling_probs", bool, "true or false", False)),
        )
    except InvalidParameterError as exc:   # a value out of the engine's range is the client's error
        raise ApiError(400, f"'{exc.name}' {exc.problem}.", param=exc.name) from None


def delivery_from(body: dict) -> dict:
    """How the answer goes out (streamed or not, usage, timings), and what of the sampling the engine's
    thread turns into tokens: logit_bias's texts, ignore_eos, the grammar (structured.py)."""
    options = field_value(body, "stream_options", dict, "an object") or {}
    return {
        "grammar": grammar_from(body),
        "response_schema": response_schema(body),
        "bias_texts": text_biases(body),
        "ignore_eos": bool(field_value(body, "ignore_eos", bool, "true or false", False)),
        "stream": bool(field_value(body, "stream", bool, "true or false", False)),
        "include_usage": bool(field_value(options, "include_usage", bool, "true or false", False)),
        "timings_per_token": bool(field_value(body, "timings_per_token", bool, "true or false", False)),
        "verbose": bool(field_value(body, "verbose", bool, "true or false", False)),
        "id_slot": _id_slot(body),
        "return_progress": bool(field_value(body, "return_progress", bool, "true or false", False)),
    }


def _id_slot(body: dict) -> int:
    """llama-server's id_slot: the slot that answers (-1: any); one past the slots is said when it is placed."""
    slot = field_value(body, "id_slot", int, "an integer", -1)
    if slot < -1:
        raise ApiError(400, f"'id_slot' must be -1 (any slot) or a slot's number; got {slot}.", param="id_slot")
    return slot


def _messages(value: Any) -> tuple[dict, ...]:
    if not isinstance(value, list) or not value:
        raise ApiError(400, "'messages' must be a non-empty array of messages.", param="messages")
    return tuple(_message(m, i) for i, m in enumerate(value))


def _message(message: Any, index: int) -> dict:
    """A message as templates read it (app/core/chat/messages.py): an assistant message may carry
    ``tool_calls`` (its content then may be null), a tool message its ``tool_call_id``."""
    param = f"messages[{index}]"
    if not isinstance(message, dict):
        raise ApiError(400, f"'{param}' must be an object with 'role' and 'content'.", param=param)
    role = message.get("role")
    if role not in ROLES:
        raise ApiError(400, f"'{param}.role' must be one of {', '.join(ROLES)}; got {role!r}.", param=f"{param}.role")
    calls = message.get("tool_calls") if role == "assistant" else None
    out = {"role": ROLES[role]}
    if calls is not None:
        if not isinstance(calls, list):
            raise ApiError(400, f"'{param}.tool_calls' must be an array of tool calls.", param=f"{param}.tool_calls")
        out["tool_calls"] = [_tool_call(call, f"{param}.tool_calls[{i}]") for i, call in enumerate(calls)]
    content = message.get("content")
    out["content"] = "" if content is None and out.get("tool_calls") else _content(content, f"{param}.content")
    for key in ("tool_call_id", "name", "reasoning_content"):
        value = message.get(key)
        if value is not None and not isinstance(value, str):
            raise ApiError(400, f"'{param}.{key}' must be a string.", param=f"{param}.{key}")
        if value is not None:
            out[key] = value
    return out


def _tool_call(call: Any, param: str) -> dict:
    function = call.get("function") if isinstance(call, dict) else None
    if not isinstance(function, dict) or not isinstance(function.get("name"), str) or not function["name"]:
        raise ApiError(400, f"'{param}' must be {{\"type\": \"function\", \"function\": {{\"name\": ..., "
                       f"\"arguments\": ...}}}}.", param=param)
    arguments = function.get("arguments", "{}")
    if not isinstance(arguments, (str, dict)):
        raise ApiError(400, f"'{param}.function.arguments' must be a string of JSON.", param=f"{param}.function.arguments")
    out = {"type": "function", "function": {"name": function["name"], "arguments": arguments}}
    if call.get("id") is not None:
        if not isinstance(call["id"], str):
            raise ApiError(400, f"'{param}.id' must be a string.", param=f"{param}.id")
        out["id"] = call["id"]
    return out


def _tool_choice(body: dict) -> ToolChoice | None:
    """``tools``, ``tool_choice`` and ``parallel_tool_calls``; None when the request has no tools."""
    tools = field_value(body, "tools", list, "an array of tools") or []
    if len(tools) > MAX_TOOLS:
        raise ApiError(400, f"'tools' may hold at most {MAX_TOOLS} tools; got {len(tools)}.", param="tools")
    parallel = field_value(body, "parallel_tool_calls", bool, "true or false", True)
    choice = body.get("tool_choice")
    checked = tuple(_tool(tool, f"tools[{i}]") for i, tool in enumerate(tools))
    names = [t["function"]["name"] for t in checked]
    twice = _first_repeated(names)
    if twice is not None:
        raise ApiError(400, f"'tools' names the function {twice!r} twice.", param="tools")
    if choice is None:
        return ToolChoice(checked, "auto", None, parallel) if checked else None
    if isinstance(choice, str) and choice in TOOL_CHOICES:
        mode, name = choice, None
    elif isinstance(choice, dict) and isinstance(choice.get("function"), dict) \
            and isinstance(choice["function"].get("name"), str) and choice.get("type", "function") == "function":
        mode, name = "function", choice["function"]["name"]
    else:
        raise ApiError(400, "'tool_choice' must be \"auto\", \"none\", \"required\" or "
                       "{\"type\": \"function\", \"function\": {\"name\": ...}}.", param="tool_choice")
    if mode in ("required", "function") and not checked:
        raise ApiError(400, "'tool_choice' asks for a tool call, but the request has no 'tools'.", param="tool_choice")
    if name is not None and name not in names:
        raise ApiError(400, f"'tool_choice' names the function {name!r}, which is not among the tools "
                       f"({', '.join(names)}).", param="tool_choice")
    return ToolChoice(checked, mode, name, parallel) if checked else None


def _first_repeated(names: list[str]) -> str | None:
    """The first name seen twice, in one pass (names.count per name took 24 s for 20,000 tools)."""
    seen: set[str] = set()
    for name in names:
        if name in seen:
            return name
        seen.add(name)
    return None


def _tool(tool: Any, param: str) -> dict:
    function = tool.get("function") if isinstance(tool, dict) else None
    if not isinstance(function, dict) or tool.get("type", "function") != "function":
        raise ApiError(400, f"'{param}' must be {{\"type\": \"function\", \"function\": {{\"name\": ..., "
                       f"\"description\": ..., \"parameters\": {{...}}}}}}.", param=param)
    name = function.get("name")
    if not isinstance(name, str) or not TOOL_NAME.fullmatch(name):
        raise ApiError(400, f"'{param}.function.name' must be 1 to 64 letters, digits, '_', '-' or '.'; got "
                       f"{name!r:.80}.", param=f"{param}.function.name")
    if function.get("description") is not None and not isinstance(function["description"], str):
        raise ApiError(400, f"'{param}.function.description' must be a string.", param=f"{param}.function.description")
    if function.get("parameters") is not None and not isinstance(function["parameters"], dict):
        raise ApiError(400, f"'{param}.function.parameters' must be a JSON Schema object.",
                       param=f"{param}.function.parameters")
    return {"type": "function", "function": {k: v for k, v in function.items() if v is not None}}


def with_template_defaults(request: ApiRequest, defaults: dict) -> ApiRequest:
    """``request`` with the server's template variables (serve --reasoning, --chat-template-kwargs) where
    it sets none of its own."""
    return dataclasses.replace(request, template_variables={**defaults, **request.template_variables}) \
        if defaults else request


def template_defaults(kwargs_json: str | None, reasoning: str = "auto") -> dict:
    """serve's --chat-template-kwargs (a JSON object) and --reasoning (off: enable_thinking false; on and auto:
    true, as llama-server) as template variables; a ValueError says what is wrong."""
    try:
        variables = json.loads(kwargs_json) if kwargs_json else {}
    except json.JSONDecodeError as exc:
        raise ValueError(f"--chat-template-kwargs is not JSON ({exc})") from None
    if not isinstance(variables, dict):
        raise ValueError("--chat-template-kwargs must be a JSON object")
    reserved = [name for name in RESERVED_TEMPLATE_NAMES if name in variables]
    if reserved:
        raise ValueError(f"--chat-template-kwargs may not set {', '.join(reserved)}: the server sets them")
    # llama-server tells a template that reads enable_thinking to think unless --reasoning off: the
    # templates in llama.cpp's repository that read it close the reasoning block when it is missing
    variables["enable_thinking"] = reasoning != "off"
    return variables


def _template_variables(body: dict) -> dict:
    """What the request tells the chat template: ``chat_template_kwargs`` (any names), and the
    switches ``enable_thinking`` and ``reasoning_effort`` (gpt-oss's templates read it)."""
    variables = dict(field_value(body, "chat_template_kwargs", dict, "an object") or {})
    reserved = [name for name in RESERVED_TEMPLATE_NAMES if name in variables]
    if reserved:
        raise ApiError(400, f"'chat_template_kwargs' may not set {', '.join(reserved)}: the server sets "
                       f"{'it' if len(reserved) == 1 else 'them'}.", param="chat_template_kwargs")
    thinking = field_value(body, "enable_thinking", bool, "true or false")
    if thinking is not None:
        variables["enable_thinking"] = thinking
    if "enable_thinking" in variables and not isinstance(variables["enable_thinking"], bool):
        raise ApiError(400, "'chat_template_kwargs.enable_thinking' must be true or false.",
                       param="chat_template_kwargs")
    effort = field_value(body, "reasoning_effort", str, "a string")
    if effort is not None:
        if effort not in REASONING_EFFORTS:
            raise ApiError(400, f"'reasoning_effort' must be one of {', '.join(REASONING_EFFORTS)}; got {effort!r:.40}.",
                           param="reasoning_effort")
        variables["reasoning_effort"] = effort
    return variables


def _content(content: Any, param: str, delimiter: str = "\n") -> str:
    """A message's text; text parts joined as llama.cpp joins them for a template that reads text (a
    line break between two; the continued final message's, a blank line: common_chat_msg::render_content)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list) and all(isinstance(p, dict) and p.get("type") == "text"
                                         and isinstance(p.get("text"), str) for p in content):
        return delimiter.join(p["text"] for p in content)
    raise ApiError(400, f"'{param}' must be a string or an array of text parts.", param=param)


def several_prompts(value: Any) -> list | None:
    """The prompts of a request that asks several (llama-server's rule: an array with more than one
    element and no token id at its top level: strings, token arrays, prompt objects), or None."""
    if isinstance(value, list) and len(value) > 1 and not any(_is_id(p) for p in value):
        return value
    return None


def prompt_parts(value: Any) -> tuple[str | int, ...]:
    """One prompt as llama-server takes it: a string, token ids, text and ids mixed in one array, or an
    object holding one as ``prompt_string`` (a batch of one prompt is that prompt); its parts in order."""
    if isinstance(value, list) and len(value) == 1 and isinstance(value[0], (str, list, dict)):
        value = value[0]  # a batch of one prompt
    if isinstance(value, dict) and "prompt_string" in value:
        if value.get("multimodal_data"):
            raise ApiError(400, "'prompt' carries multimodal_data, but this model reads text only (no multimodal "
                           "projector is loaded).", param="prompt")
        value = value["prompt_string"]
    if isinstance(value, str):
        if not value:
            raise ApiError(400, "'prompt' is empty.", param="prompt")
        return (value,)
    if isinstance(value, list) and value and all(_is_part(p) for p in value):
        return tuple(value)
    raise ApiError(400, "'prompt' must be a string, an array of token ids, an array mixing strings and token ids, "
                   "an object with 'prompt_string', or an array of such prompts.", param="prompt")


def _is_part(value: Any) -> bool:
    return isinstance(value, str) or _is_id(value)


def _is_id(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _stop(value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        return (value,)
    if isinstance(value, list) and len(value) <= MAX_STOP_STRINGS and all(isinstance(s, str) for s in value):
        return tuple(value)
    raise ApiError(400, f"'stop' must be a string or an array of at most {MAX_STOP_STRINGS} strings.", param="stop")


def field_value(body: dict, name: str, kind: type, described: str, default: Any = None) -> Any:
    """``body[name]`` if it has the right JSON type (null counts as absent), else a 400."""
    value = body.get(name)
    if value is None:
        return default
    wrong_bool = isinstance(value, bool) and kind is not bool
    if wrong_bool or not isinstance(value, kind):
        raise ApiError(400, f"'{name}' must be {described}; got {type(value).__name__} {value!r:.40}.", param=name)
    return value


def _ranged(body: dict, name: str, default: float, low: float, high: float) -> float:
    value = field_value(body, name, (int, float), "a number", default)
    if not low <= value <= high:
        raise ApiError(400, f"'{name}' must be between {low:g} and {high:g}; got {value}.", param=name)
    return float(value)


def _counted(body: dict, name: str, default: int, minimum: int) -> int:
    value = field_value(body, name, int, "an integer", default)
    if value < minimum:
        raise ApiError(400, f"'{name}' must be at least {minimum}; got {value}.", param=name)
    return value


def positive(value: int, name: str) -> int:
    if value < 1:
        raise ApiError(400, f"'{name}' must be at least 1; got {value}.", param=name)
    return value
