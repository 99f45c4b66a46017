"""Checks shared by the suite's tests."""

from __future__ import annotations

import json
import re
from typing import Any

import pydantic

from fake_model import FUNCTION, Request

CODE_TOOL = {"type": "code_interpreter", "container": {"type": "auto"}}
# The include that asks for the outputs of code_interpreter_call items: without it they are
# null, as natively.
INCLUDE_OUTPUTS = ["code_interpreter_call.outputs"]
CHAT_CODE_TOOL = {"type": "code_interpreter"}

_MINTED = re.compile(r"\b(ci|cntr)_[0-9a-f]{16,}\b")


def normalized(v: Any) -> str:
    """v as JSON with the ids the server mints (ci_..., cntr_...) replaced by their kind and rank
    of first appearance, the response's own id dropped (a plain answer is named after the last
    turn, a stream after the first), and the SDK stream helpers' empty `parsed` fields dropped,
    so that two runs of one scenario compare equal exactly when the client got the same thing."""
    if isinstance(v, dict) and v.get("object") == "response":
        v = {k: x for k, x in v.items() if k != "id"}
    text = json.dumps(_without_parsed(v), sort_keys=True, indent=1)
    seen: dict[str, str] = {}
    counts: dict[str, int] = {}

    def rank(m: re.Match) -> str:
        ident = m.group(0)
        if ident not in seen:
            counts[m.group(1)] = counts.get(m.group(1), 0) + 1
            seen[ident] = f"{m.group(1)}_{counts[m.group(1)]}"
        return seen[ident]

    return _MINTED.sub(rank, text)


def _without_parsed(v: Any) -> Any:
    # ParsedResponse / ParsedChatCompletion (what the stream helpers return) add `parsed`
    # (and, for chat tool calls, `parsed_arguments`) set to None when no format was asked for.
    if isinstance(v, dict):
        return {k: _without_parsed(x) for k, x in v.items()
                if not (k in ("parsed", "parsed_arguments") and x is None)}
    if isinstance(v, list):
        return [_without_parsed(x) for x in v]
    return v


def check_upstream(reqs: list[Request], auth: str, what: str) -> None:
    """What every model call of a loop carries: the client's credentials, no x-codeinterp-*
    header, no stream_options (whatever the client asked), the hosted tool rewritten into the
    function tool; every call asks for a whole answer, except that a streaming client's calls
    all stream (the first keeps the client's stream:true), a Chat one asking for usage."""
    assert reqs, f"{what}: the model got no request"
    streams = {bool(r.json().get("stream", False)) for r in reqs}
    assert len(streams) <= 1, f"{what}: some model calls stream, some not"
    for i, r in enumerate(reqs):
        assert r.header("authorization") == auth, f"{what}: credentials of model call {i + 1}"
        leaked = [k for k in r.headers if k.lower().startswith("x-codeinterp-")]
        assert not leaked, f"{what}: model call {i + 1} carries {leaked}"
        body = r.json()
        if body.get("stream") and r.path.endswith("/chat/completions"):
            assert body.get("stream_options") == {"include_usage": True}, \
                f"{what}: model call {i + 1} asks for usage: {body.get('stream_options')}"
        else:
            assert "stream_options" not in body, f"{what}: model call {i + 1} has stream_options"
        tools = body.get("tools", [])
        assert all(t.get("type") != "code_interpreter" for t in tools), \
            f"{what}: model call {i + 1} still has the hosted tool: {tools}"


def function_tool(body: dict, surface: str) -> dict:
    """The internal function tool in a request the model got, checked for its shape."""
    tools = [t for t in body["tools"] if t.get("type") == "function"]
    names = [t["name"] if surface == "responses" else t["function"]["name"] for t in tools]
    assert FUNCTION in names, f"{surface}: the model sees the function tool {FUNCTION}: {body['tools']}"
    tool = tools[names.index(FUNCTION)]
    params = tool["parameters"] if surface == "responses" else tool["function"]["parameters"]
    assert params["type"] == "object" and "code" in params["properties"], \
        f"{surface}: the function takes code: {params}"
    assert params.get("required") == ["code"], f"{surface}: code is required: {params}"
    return tool


def output_of(r: Request, call_id: str) -> str:
    """The output of call call_id in a request the model got: function_call_output
    (Responses) or the tool message (Chat)."""
    body = r.json()
    for item in body.get("input", []) if isinstance(body.get("input"), list) else []:
        if item.get("type") == "function_call_output" and item.get("call_id") == call_id:
            return item["output"]
    for msg in body.get("messages", []):
        if msg.get("role") == "tool" and msg.get("tool_call_id") == call_id:
            return msg["content"]
    raise AssertionError(f"the model's request has no output for call {call_id}: {r.body}")


def logs_of(item: Any) -> str:
    """The logs outputs of a code_interpreter_call item, concatenated."""
    return "".join(o.logs for o in item.outputs or [] if o.type == "logs")


# The ids an Anthropic answer carries that differ between two runs of one scenario: the message's,
# the tool calls codeinterp mints for calls made from code, the container's.
_ANTHROPIC_MINTED = re.compile(r"\b(msg|toolu|srvtoolu|container|cntr)_[0-9A-Za-z]{8,}\b")


def anthropic_normalized(msg: Any) -> str:
    """An Anthropic message (an SDK model) as JSON with the ids it mints replaced by their kind and
    rank of first appearance and the container's expires_at dropped, so that two runs of one
    scenario compare equal exactly when the client got the same thing."""
    v = msg.model_dump(mode="json") if hasattr(msg, "model_dump") else msg
    if isinstance(v.get("container"), dict):
        v["container"] = {k: x for k, x in v["container"].items() if k != "expires_at"}
    text = json.dumps(v, sort_keys=True, indent=1)
    seen: dict[str, str] = {}
    counts: dict[str, int] = {}

    def rank(m: re.Match) -> str:
        ident = m.group(0)
        if ident not in seen:
            counts[m.group(1)] = counts.get(m.group(1), 0) + 1
            seen[ident] = f"{m.group(1)}_{counts[m.group(1)]}"
        return seen[ident]

    return _ANTHROPIC_MINTED.sub(rank, text)


# Fields Anthropic's API documents that the `anthropic` SDK's models lack, which codeinterp returns as
# natively: usage.server_tool_use.code_execution_requests (the docs' example shows it; the SDK's
# ServerToolUsage, like anthropic-sdk-go's, has only web_search_requests and web_fetch_requests).
NATIVE_EXTRA = {"ServerToolUsage": {"code_execution_requests"}}


def check_sdk_shape(v: Any, where: str) -> None:
    """v, a model the `anthropic` SDK decoded (a message, a block, a stream event), has no field the
    SDK does not know but those of NATIVE_EXTRA, and every field it requires, at every depth."""
    if isinstance(v, (list, tuple)):
        for i, e in enumerate(v):
            check_sdk_shape(e, f"{where}[{i}]")
        return
    if isinstance(v, dict):
        for k, e in v.items():
            check_sdk_shape(e, f"{where}[{k!r}]")
        return
    if not isinstance(v, pydantic.BaseModel):
        return
    extra = set(v.model_extra or {}) - NATIVE_EXTRA.get(type(v).__name__, set())
    assert not extra, f"{where}: fields the SDK's {type(v).__name__} does not know: {extra}: {v}"
    for name, field in type(v).model_fields.items():
        if field.is_required():
            assert name in v.model_fields_set, f"{where}: the required field {name} is missing: {v}"
        check_sdk_shape(getattr(v, name), f"{where}.{name}")
