"""The scripted fake model of test/e2e/fakemodel, driven over its control API.

Answers are built here in the shapes of the OpenAI API (as test/e2e/fakemodel/openai.go builds
them for the Go suite) and queued per path; a Responses answer echoes the request's tools,
tool_choice, metadata and parallel_tool_calls, as a real model's answer does, so a test sees
whether the client gets its own code_interpreter tool back.
"""

from __future__ import annotations

import base64
import hashlib
import json
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any, Optional

MODEL = "gpt-e2e"
RESPONSES = "/v1/responses"
CHAT = "/v1/chat/completions"
FUNCTION = "code_interpreter"  # the function the model sees (the shipped default function_name)
CREATED = 1700000000

# What a Responses answer echoes of its request.
ECHO = ["tools", "tool_choice", "metadata", "parallel_tool_calls"]


def _id(*parts: Any) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:16]


# --- Responses API output items and answers --------------------------------------------------


def function_call(name: str, call_id: str, arguments: str) -> dict:
    return {
        "type": "function_call",
        "id": "fc_" + call_id,
        "call_id": call_id,
        "name": name,
        "arguments": arguments,
        "status": "completed",
    }


def code_args(code: str) -> str:
    return json.dumps({"code": code})


def run_code(call_id: str, code: str) -> dict:
    """A call of the internal function with code, as the model makes it."""
    return function_call(FUNCTION, call_id, code_args(code))


def message(text: str) -> dict:
    return {
        "type": "message",
        "id": "msg_" + _id(text),
        "status": "completed",
        "role": "assistant",
        "content": [{"type": "output_text", "text": text, "annotations": [], "logprobs": []}],
    }


def responses(*items: dict, usage: tuple[int, int] = (1, 1)) -> dict:
    """A completed Responses answer (its id derived from its items)."""
    inp, out = usage
    return {
        "id": "resp_" + _id(items),
        "object": "response",
        "created_at": CREATED,
        "status": "completed",
        "model": MODEL,
        "output": list(items),
        "error": None,
        "incomplete_details": None,
        "instructions": None,
        "metadata": {},
        "parallel_tool_calls": True,
        "temperature": 1,
        "top_p": 1,
        "tool_choice": "auto",
        "tools": [],
        "text": {"format": {"type": "text"}},
        "usage": {
            "input_tokens": inp,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": out,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": inp + out,
        },
    }


def responses_stream(answer: dict, pieces: int = 3) -> dict:
    """answer as the event stream a Responses model sends, live: each function call's arguments
    in `pieces` deltas, each message's text in one."""
    events: list[tuple[str, dict]] = []

    def add(typ: str, **fields: Any) -> None:
        events.append((typ, {"type": typ, "sequence_number": len(events), **fields}))

    shell = {**answer, "status": "in_progress", "output": [], "usage": None}
    add("response.created", response=shell)
    add("response.in_progress", response=shell)
    for i, item in enumerate(answer["output"]):
        if item["type"] == "function_call":
            args = item["arguments"]
            add("response.output_item.added", output_index=i, item={**item, "status": "in_progress", "arguments": ""})
            step = max(1, -(-len(args) // pieces))
            for at in range(0, len(args), step):
                add("response.function_call_arguments.delta", output_index=i, item_id=item["id"], delta=args[at:at + step])
            add("response.function_call_arguments.done", output_index=i, item_id=item["id"], arguments=args)
        elif item["type"] == "message":
            text = item["content"][0]["text"]
            part = {"item_id": item["id"], "output_index": i, "content_index": 0}
            add("response.output_item.added", output_index=i, item={**item, "status": "in_progress", "content": []})
            add("response.content_part.added", **part, part={"type": "output_text", "text": "", "annotations": []})
            add("response.output_text.delta", **part, delta=text, logprobs=[])
            add("response.output_text.done", **part, text=text, logprobs=[])
            add("response.content_part.done", **part, part=item["content"][0])
        add("response.output_item.done", output_index=i, item=item)
    add("response.completed", response=answer)
    return sse(*events)


# --- Chat Completions answers -----------------------------------------------------------------


def tool_call(call_id: str, name: str, arguments: str) -> dict:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def chat_run_code(call_id: str, code: str) -> dict:
    return tool_call(call_id, FUNCTION, code_args(code))


def chat(text: str = "", *calls: dict, usage: tuple[int, int] = (1, 1)) -> dict:
    """A Chat Completions answer: the assistant says text (none if empty) and makes the calls."""
    msg: dict[str, Any] = {"role": "assistant", "content": text or None, "refusal": None}
    if calls:
        msg["tool_calls"] = list(calls)
    inp, out = usage
    return {
        "id": "chatcmpl-" + _id(text, calls),
        "object": "chat.completion",
        "created": CREATED,
        "model": MODEL,
        "choices": [
            {"index": 0, "message": msg, "finish_reason": "tool_calls" if calls else "stop", "logprobs": None}
        ],
        "usage": {
            "prompt_tokens": inp,
            "completion_tokens": out,
            "total_tokens": inp + out,
            "prompt_tokens_details": {"cached_tokens": 0},
            "completion_tokens_details": {"reasoning_tokens": 0},
        },
    }


# --- Control answers --------------------------------------------------------------------------


def ok(body: dict, echo: Optional[list[str]] = None) -> dict:
    """A 200 JSON answer; a Responses answer echoes ECHO unless told otherwise."""
    a: dict[str, Any] = {"json": body}
    if echo is None and body.get("object") == "response":
        echo = ECHO
    if echo:
        a["echo"] = echo
    return a


def api_error(status: int, message: str, type_: str, code: Optional[str] = None, headers: Optional[dict] = None) -> dict:
    """An answer with OpenAI's error envelope."""
    a: dict[str, Any] = {
        "status": status,
        "json": {"error": {"message": message, "type": type_, "param": None, "code": code}},
    }
    if headers:
        a["headers"] = headers
    return a


def sse(*events: tuple[Optional[str], Any]) -> dict:
    """A text/event-stream answer of (event name or None, data) pairs; data is JSON-encoded
    unless it is a string."""
    return {
        "events": [
            {"name": name, "data": data if isinstance(data, str) else json.dumps(data)} if name else
            {"data": data if isinstance(data, str) else json.dumps(data)}
            for name, data in events
        ]
    }


# --- The control client -----------------------------------------------------------------------


@dataclass
class Request:
    """A request the fake model received."""

    method: str
    path: str
    query: str
    headers: dict[str, list[str]]
    body: str

    def header(self, name: str) -> Optional[str]:
        for k, v in self.headers.items():
            if k.lower() == name.lower():
                return v[0]
        return None

    def json(self) -> Any:
        return json.loads(self.body)


class FakeModel:
    """A client of the fake model's control API (test/e2e/fakemodel/control.go)."""

    def __init__(self, control_url: str) -> None:
        self.url = control_url

    def _call(self, method: str, path: str, body: Optional[dict] = None) -> dict:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, method=method,
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=30) as resp:
                return json.load(resp)
        except urllib.error.HTTPError as e:
            raise AssertionError(f"fake model control {method} {path}: {e.code} {e.read().decode()}") from e

    def script(self, path: str, *answers: dict) -> None:
        """Queue answers for requests to path, served in order."""
        self._call("POST", "/enqueue", {"path": path, "answers": list(answers)})

    def requests(self, path: Optional[str] = None) -> list[Request]:
        """The requests received since the last reset (to path, if given), in arrival order."""
        reqs = [Request(**r) for r in self._call("GET", "/requests")["requests"]]
        return [r for r in reqs if path is None or r.path == path]

    def pending(self) -> int:
        """How many queued answers were not served."""
        return self._call("GET", "/pending")["pending"]

    def add_file(self, file_id: str, filename: str, key: str, content: bytes, purpose: str = "user_data") -> None:
        """Serve a file of the Files API (GET /v1/files/{id} and its content) to key only."""
        self._call("POST", "/files", {"id": file_id, "filename": filename, "key": key, "purpose": purpose,
                                      "content": base64.b64encode(content).decode()})

    def add_key(self, key: str) -> None:
        """Make key one GET /v1/models takes; once a key is added (until the next reset), the
        keys not added are refused with a 401 invalid_api_key."""
        self._call("POST", "/keys", {"key": key})

    def reset(self) -> None:
        """Drop the queued answers, forget the keys added and the requests received so far."""
        self._call("POST", "/reset", {})
