"""Programmatic tool calling through Envoy and codeinterp with the `anthropic` Python SDK: a client
tool whose allowed_callers name code_execution_20260120 is an async function in the cell's Python;
the model's cell calls it twice with asyncio.gather, and the answer pauses (the cell's
server_tool_use, one tool_use block per call with its `caller`, stop_reason tool_use, the
container); the client's next request (the results and the container) resumes the cell, which calls
once more and pauses again, no model call in between; the last results end the cell, whose output
(built from the results) goes to the model for the final answer. A pause nothing resumes within
ptc.pause_timeout is abandoned, and its results coming later get the native 400. Every block, message and stream
event codeinterp returns is one the SDK's models take with no unknown field and no required one
missing; streamed (the SDK's stream helper accumulating the events), the messages are the plain
ones."""

from __future__ import annotations

import time
from typing import Any

import anthropic
import pytest

import fake_model as fm
from conftest import PTC_PAUSE_TIMEOUT
from helpers import anthropic_normalized, check_sdk_shape
from test_messages import MESSAGES, MODEL, answer, claude  # noqa: F401 (claude is a fixture)

VERSION = "code_execution_20260120"
TOOLS = [{"type": VERSION, "name": "code_execution"},
         {"name": "roll", "description": "Roll a die for a player.",
          "input_schema": {"type": "object", "properties": {"player": {"type": "string"}}, "required": ["player"]},
          "allowed_callers": [VERSION]}]

# The cell: two calls at once, a third after that pause, the total of the results printed.
CELL = ("import asyncio\n"
        "async def main():\n"
        "    a, b = await asyncio.gather(roll({'player': 'p1'}), roll({'player': 'p2'}))\n"
        "    c = await roll({'player': 'p3'})\n"
        "    return int(a) + int(b) + int(c)\n"
        "print('total', asyncio.run(main()))\n")


def script_ptc(model: fm.FakeModel) -> None:
    model.script(MESSAGES,
                 fm.ok(answer({"type": "text", "text": "Rolling."},
                              {"type": "tool_use", "id": "toolu_c1", "name": "code_execution", "input": {"code": CELL}},
                              usage=(10, 5))),
                 fm.ok(answer({"type": "text", "text": "The total is 12."}, usage=(30, 4))))


def send(claude: anthropic.Anthropic, stream: bool, **kw: Any) -> anthropic.types.Message:  # noqa: F811
    """The message of a request, plain or through the stream helper, every stream event checked
    against the SDK's models."""
    if not stream:
        msg = claude.messages.create(**kw)
    else:
        with claude.messages.stream(**kw) as s:
            for i, event in enumerate(s):
                check_sdk_shape(event, f"event {i} ({event.type})")
            msg = s.get_final_message()
    check_sdk_shape(msg, "message")
    return msg


def results(msg: anthropic.types.Message, *values: str) -> dict:
    """The user message answering msg's tool_use blocks with values, in order."""
    calls = [b for b in msg.content if b.type == "tool_use"]
    assert len(calls) == len(values), f"a result for each call: {msg.content}"
    return {"role": "user", "content": [{"type": "tool_result", "tool_use_id": b.id, "content": v}
                                        for b, v in zip(calls, values)]}


def run_ptc(model: fm.FakeModel, claude: anthropic.Anthropic, stream: bool) -> list[anthropic.types.Message]:  # noqa: F811
    script_ptc(model)
    what = "stream" if stream else "plain"
    messages: list[Any] = [{"role": "user", "content": "Roll for three players and add up."}]
    kw: dict[str, Any] = dict(model=MODEL, max_tokens=1024, tools=TOOLS)

    first = send(claude, stream, messages=messages, **kw)
    assert [b.type for b in first.content] == ["text", "server_tool_use", "tool_use", "tool_use"], \
        f"{what}: text, the cell, its two calls: {first.content}"
    cell = first.content[1]
    assert (cell.name, cell.input, cell.caller.type) == ("code_execution", {"code": CELL}, "direct"), f"{what}: {cell}"
    for i, (use, player) in enumerate(zip(first.content[2:], ["p1", "p2"])):
        assert (use.name, use.input) == ("roll", {"player": player}), f"{what}: call {i}: {use}"
        assert use.id.startswith("toolu_"), f"{what}: call {i}: {use}"
        assert (use.caller.type, use.caller.tool_id) == (VERSION, cell.id), f"{what}: call {i} is the cell's: {use}"
    assert first.stop_reason == "tool_use", f"{what}: paused"
    assert first.container and first.container.id, f"{what}: the container"
    container = first.container.id

    messages += [first.to_param(), results(first, "3", "4")]
    second = send(claude, stream, messages=messages, container=container, **kw)
    assert [b.type for b in second.content] == ["tool_use"], f"{what}: only the cell's next call: {second.content}"
    use = second.content[0]
    assert (use.name, use.input) == ("roll", {"player": "p3"}), f"{what}: the call after the pause: {use}"
    assert (use.caller.type, use.caller.tool_id) == (VERSION, cell.id), f"{what}: the same cell: {use}"
    assert second.stop_reason == "tool_use", f"{what}: paused again"
    assert (second.usage.input_tokens, second.usage.output_tokens) == (0, 0), f"{what}: no inference: {second.usage}"
    assert second.container and second.container.id == container, f"{what}: the same container"
    assert len(model.requests(MESSAGES)) == 1, f"{what}: no model call for the resume"

    messages += [second.to_param(), results(second, "5")]
    final = send(claude, stream, messages=messages, container=container, **kw)
    assert [b.type for b in final.content] == ["code_execution_tool_result", "text"], \
        f"{what}: the cell's result, the model's text: {final.content}"
    res = final.content[0]
    assert res.tool_use_id == cell.id, f"{what}: the cell's result: {res}"
    assert (res.content.type, res.content.stdout, res.content.return_code) == ("code_execution_result", "total 12\n", 0), \
        f"{what}: the code used the results: {res.content}"
    assert final.content[1].text == "The total is 12.", f"{what}: the model's answer"
    assert final.stop_reason == "end_turn", f"{what}: done"

    reqs = model.requests(MESSAGES)
    assert len(reqs) == 2, f"{what}: two model calls in all"
    tools = reqs[0].json()["tools"]
    assert "roll" not in [t.get("name") for t in tools], f"{what}: a tool callable only from code is not the model's: {tools}"
    assert "roll" in next(t["description"] for t in tools if t.get("name") == "code_execution"), \
        f"{what}: the Python tool's description tells of roll: {tools}"
    sent = reqs[1].json()["messages"]
    assert len(sent) == 3, f"{what}: the prompt, the cell's call, its output: {sent}"
    assert sent[2]["content"][0]["content"] == "total 12\n", f"{what}: the model reads the cell's output: {sent[2]}"
    assert '"roll"' not in reqs[1].body, f"{what}: nothing of the calls made from code reaches the model"
    return [first, second, final]


def test_ptc(model: fm.FakeModel, claude: anthropic.Anthropic) -> None:  # noqa: F811
    first, second, final = run_ptc(model, claude, stream=False)
    # The cell has ended: its results sent again get the native 400.
    messages = [{"role": "user", "content": "Roll for three players and add up."},
                first.to_param(), results(first, "3", "4"), second.to_param(), results(second, "5")]
    with pytest.raises(anthropic.BadRequestError) as e:
        claude.messages.create(model=MODEL, max_tokens=1024, tools=TOOLS, messages=messages, container=first.container.id)
    assert e.value.body["error"]["type"] == "invalid_request_error", f"the native error: {e.value.body}"
    assert f"source tool `{first.content[1].id}` not found for tool use block" in e.value.body["error"]["message"], \
        f"the native message: {e.value.body}"
    assert len(model.requests(MESSAGES)) == 2, "no model call"


def test_ptc_stream(model: fm.FakeModel, claude: anthropic.Anthropic) -> None:  # noqa: F811
    streamed = run_ptc(model, claude, stream=True)
    model.reset()
    plain = run_ptc(model, claude, stream=False)
    for i, (s, p) in enumerate(zip(streamed, plain)):
        assert anthropic_normalized(s) == anthropic_normalized(p), f"message {i + 1}: streamed as plain"


def test_ptc_abandoned(model: fm.FakeModel, claude: anthropic.Anthropic) -> None:  # noqa: F811
    """A pause nothing resumes within ptc.pause_timeout (the stack's, short) is abandoned: the
    results sent after it get the native 400 for a cell that is not there, which the SDK raises
    as BadRequestError, and no model call is made."""
    model.script(MESSAGES, fm.ok(answer({"type": "tool_use", "id": "toolu_c2", "name": "code_execution",
                                          "input": {"code": CELL}}, usage=(10, 5))))
    messages: list[Any] = [{"role": "user", "content": "Roll."}]
    first = send(claude, False, model=MODEL, max_tokens=1024, tools=TOOLS, messages=messages)
    assert first.stop_reason == "tool_use" and first.container, f"paused: {first}"
    cell = first.content[0]
    assert cell.type == "server_tool_use", f"the cell: {first.content}"
    time.sleep(PTC_PAUSE_TIMEOUT + 1)

    messages += [first.to_param(), results(first, "1", "2")]
    with pytest.raises(anthropic.BadRequestError) as e:
        claude.messages.create(model=MODEL, max_tokens=1024, tools=TOOLS, messages=messages, container=first.container.id)
    assert e.value.status_code == 400, f"a 400: {e.value}"
    assert e.value.body["type"] == "error" and e.value.body["error"]["type"] == "invalid_request_error", \
        f"the native error: {e.value.body}"
    use = first.content[1]
    assert e.value.body["error"]["message"] == f"source tool `{cell.id}` not found for tool use block `{use.id}`", \
        f"the native message: {e.value.body}"
    assert len(model.requests(MESSAGES)) == 1, "no model call for the late results"
