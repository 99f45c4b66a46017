"""client.messages through Envoy and codeinterp with the code_execution_20250522 tool: the model's
call runs in the sandbox and the client gets the native server_tool_use and
code_execution_tool_result blocks, plainly and as a stream accumulated by the SDK; a client's
mistake is the SDK's BadRequestError. With code_execution_20250825 the model's bash and text editor
calls run in the same container and the client gets their native result blocks."""

from __future__ import annotations

from typing import Iterator

import anthropic
import pytest

import fake_model as fm
from conftest import Stack

MESSAGES = "/v1/messages"
MODEL = "claude-e2e"
TOOL = {"type": "code_execution_20250522", "name": "code_execution"}


def answer(*content: dict, usage: tuple[int, int]) -> dict:
    stop = "tool_use" if any(b["type"] == "tool_use" for b in content) else "end_turn"
    return {
        "id": "msg_" + fm._id(content), "type": "message", "role": "assistant", "model": MODEL,
        "content": list(content), "stop_reason": stop, "stop_sequence": None,
        "usage": {"input_tokens": usage[0], "output_tokens": usage[1]},
    }


@pytest.fixture
def claude(stack: Stack) -> Iterator[anthropic.Anthropic]:
    c = anthropic.Anthropic(base_url=stack.envoy_url, api_key="sk-ant-python", max_retries=0, timeout=60)
    yield c
    c.close()


def script_compute(model: fm.FakeModel) -> None:
    model.script(MESSAGES,
                 fm.ok(answer({"type": "text", "text": "Let me run it."},
                              {"type": "tool_use", "id": "toolu_py1", "name": "code_execution",
                               "input": {"code": "print(40 + 2)"}}, usage=(10, 5))),
                 fm.ok(answer({"type": "text", "text": "It is 42."}, usage=(20, 3))))


def check_compute(model: fm.FakeModel, msg: anthropic.types.Message, what: str) -> None:
    reqs = model.requests(MESSAGES)
    assert len(reqs) == 2, f"{what}: the first request and one follow-up"
    assert reqs[0].json()["tools"][0]["name"] == "code_execution", f"{what}: the model sees code_execution"
    result = reqs[1].json()["messages"][-1]["content"][0]
    assert result["type"] == "tool_result" and result["tool_use_id"] == "toolu_py1", f"{what}: the tool_result: {result}"
    assert result["content"] == "42\n", f"{what}: the real stdout fed back to the model"
    # The SDK sends its api_key as a bearer token.
    assert reqs[1].header("authorization") == "Bearer sk-ant-python", f"{what}: the follow-up carries the caller's credential"
    assert reqs[1].header("anthropic-version"), f"{what}: and anthropic-version"

    assert [b.type for b in msg.content] == ["text", "server_tool_use", "code_execution_tool_result", "text"], \
        f"{what}: the blocks: {msg.content}"
    use, res = msg.content[1], msg.content[2]
    assert (use.id, use.name, use.input) == ("srvtoolu_py1", "code_execution", {"code": "print(40 + 2)"}), f"{what}: {use}"
    assert res.tool_use_id == "srvtoolu_py1", f"{what}: the result's call"
    assert (res.content.stdout, res.content.stderr, res.content.return_code) == ("42\n", "", 0), f"{what}: {res.content}"
    assert msg.content[3].text == "It is 42.", f"{what}: the final text"
    assert (msg.usage.input_tokens, msg.usage.output_tokens) == (30, 8), f"{what}: usage summed"
    assert msg.stop_reason == "end_turn", f"{what}: stop_reason"


def test_messages_compute(model: fm.FakeModel, claude: anthropic.Anthropic) -> None:
    script_compute(model)
    msg = claude.messages.create(model=MODEL, max_tokens=1024, tools=[TOOL],
                                 messages=[{"role": "user", "content": "What is 40 + 2?"}])
    check_compute(model, msg, "plain")


def test_messages_compute_stream(model: fm.FakeModel, claude: anthropic.Anthropic) -> None:
    script_compute(model)
    with claude.messages.stream(model=MODEL, max_tokens=1024, tools=[TOOL],
                                messages=[{"role": "user", "content": "What is 40 + 2?"}]) as stream:
        msg = stream.get_final_message()
    check_compute(model, msg, "stream")


def test_messages_client_mistake(model: fm.FakeModel, claude: anthropic.Anthropic) -> None:
    clash = {"name": "code_execution", "input_schema": {"type": "object"}}
    with pytest.raises(anthropic.BadRequestError) as e:
        claude.messages.create(model=MODEL, max_tokens=1024, tools=[TOOL, clash],
                               messages=[{"role": "user", "content": "hi"}])
    assert e.value.status_code == 400, "a client tool named like the internal one: 400"
    assert e.value.body["type"] == "error", f"Anthropic's error shape: {e.value.body}"
    assert e.value.body["error"]["type"] == "invalid_request_error", f"its type: {e.value.body}"
    assert model.requests(MESSAGES) == [], "the model is not asked"


TOOLS_20250825 = {"type": "code_execution_20250825", "name": "code_execution"}


def script_tools(model: fm.FakeModel) -> None:
    model.script(MESSAGES,
                 fm.ok(answer({"type": "tool_use", "id": "toolu_pb1", "name": "bash_code_execution",
                               "input": {"command": "echo 'héllo' > py.txt; echo ok; exit 4"}},
                              {"type": "tool_use", "id": "toolu_pv1", "name": "text_editor_code_execution",
                               "input": {"command": "view", "path": "py.txt"}}, usage=(10, 5))),
                 fm.ok(answer({"type": "text", "text": "Done."}, usage=(20, 3))))


def check_tools(model: fm.FakeModel, msg: anthropic.types.Message, what: str) -> None:
    reqs = model.requests(MESSAGES)
    assert len(reqs) == 2, f"{what}: the first request and one follow-up"
    assert [t["name"] for t in reqs[0].json()["tools"]] == ["bash_code_execution", "text_editor_code_execution"], \
        f"{what}: the model sees bash and the text editor"
    results = reqs[1].json()["messages"][-1]["content"]
    assert results[0]["content"] == "ok\n[return code 4]", f"{what}: bash for the model: {results[0]}"
    assert results[1]["content"] == "     1\théllo", f"{what}: the view for the model: {results[1]}"

    assert [b.type for b in msg.content] == ["server_tool_use", "bash_code_execution_tool_result",
                                             "server_tool_use", "text_editor_code_execution_tool_result", "text"], \
        f"{what}: the blocks: {msg.content}"
    bash, view = msg.content[1].content, msg.content[3].content
    assert (bash.type, bash.stdout, bash.stderr, bash.return_code) == ("bash_code_execution_result", "ok\n", "", 4), f"{what}: {bash}"
    assert (view.type, view.content, view.num_lines, view.total_lines) == \
        ("text_editor_code_execution_view_result", "héllo\n", 1, 1), f"{what}: {view}"
    assert msg.container and msg.container.id, f"{what}: the container is named"


def test_messages_bash_and_editor(model: fm.FakeModel, claude: anthropic.Anthropic) -> None:
    script_tools(model)
    msg = claude.messages.create(model=MODEL, max_tokens=1024, tools=[TOOLS_20250825],
                                 messages=[{"role": "user", "content": "Write a file."}])
    check_tools(model, msg, "plain")


def test_messages_bash_and_editor_stream(model: fm.FakeModel, claude: anthropic.Anthropic) -> None:
    script_tools(model)
    with claude.messages.stream(model=MODEL, max_tokens=1024, tools=[TOOLS_20250825],
                                messages=[{"role": "user", "content": "Write a file."}]) as stream:
        msg = stream.get_final_message()
    check_tools(model, msg, "stream")


def text_stream(text_pieces: list[str], usage: tuple[int, int]) -> dict:
    """A Messages event stream of one text answer in the given pieces."""
    events: list[tuple[str, dict]] = [
        ("message_start", {"type": "message_start", "message": {
            "id": "msg_py_streamed", "type": "message", "role": "assistant", "model": MODEL, "content": [],
            "stop_reason": None, "stop_sequence": None, "usage": {"input_tokens": usage[0], "output_tokens": 1}}}),
        ("ping", {"type": "ping"}),
        ("content_block_start", {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
    ]
    events += [("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": p}})
               for p in text_pieces]
    events += [
        ("content_block_stop", {"type": "content_block_stop", "index": 0}),
        ("message_delta", {"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                           "usage": {"output_tokens": usage[1]}}),
        ("message_stop", {"type": "message_stop"}),
    ]
    return fm.sse(*events)


def test_messages_streamed_follow_up(model: fm.FakeModel, claude: anthropic.Anthropic) -> None:
    """A streaming client's follow-up asks the model for a stream; the stream helper's final
    message has the streamed text after the run, and text deltas reach it one by one."""
    model.script(MESSAGES,
                 fm.ok(answer({"type": "tool_use", "id": "toolu_ps1", "name": "bash_code_execution",
                               "input": {"command": "cd /tmp && export GREETING=hi && echo $GREETING"}}, usage=(10, 5))),
                 text_stream(["The shell ", "said hi."], usage=(20, 4)))
    texts: list[str] = []
    with claude.messages.stream(model=MODEL, max_tokens=1024, tools=[TOOLS_20250825],
                                messages=[{"role": "user", "content": "Greet."}]) as stream:
        for event in stream:
            if event.type == "content_block_delta" and event.delta.type == "text_delta":
                texts.append(event.delta.text)
        msg = stream.get_final_message()
    reqs = model.requests(MESSAGES)
    assert len(reqs) == 2, "the first request and one follow-up"
    assert reqs[1].json()["stream"] is True, "the follow-up asks the model for a stream"
    assert texts == ["The shell ", "said hi."], f"the model's deltas reach the client as they were: {texts}"
    assert [b.type for b in msg.content] == ["server_tool_use", "bash_code_execution_tool_result", "text"], msg.content
    assert msg.content[1].content.stdout == "hi\n", msg.content[1]
    assert msg.content[2].text == "The shell said hi.", msg.content[2]
    assert (msg.usage.input_tokens, msg.usage.output_tokens) == (30, 9), msg.usage
    assert msg.stop_reason == "end_turn"


def test_messages_bash_session(model: fm.FakeModel, claude: anthropic.Anthropic) -> None:
    """bash keeps its shell session between rounds: cd, an exported variable and a function
    carry over; a failing command's return code and stderr come apart."""
    model.script(MESSAGES,
                 fm.ok(answer({"type": "tool_use", "id": "toolu_pss1", "name": "bash_code_execution",
                               "input": {"command": "mkdir -p py && cd py && export WHO=python && hi() { echo \"hi $1\"; }"}},
                              usage=(10, 5))),
                 fm.ok(answer({"type": "tool_use", "id": "toolu_pss2", "name": "bash_code_execution",
                               "input": {"command": "pwd; echo $WHO; hi there; cat missing.txt"}}, usage=(20, 5))),
                 fm.ok(answer({"type": "text", "text": "Done."}, usage=(30, 3))))
    msg = claude.messages.create(model=MODEL, max_tokens=1024, tools=[TOOLS_20250825],
                                 messages=[{"role": "user", "content": "Use a shell."}])
    res = msg.content[3].content
    assert (res.stdout, res.return_code) == ("/mnt/data/py\npython\nhi there\n", 1), res
    assert "missing.txt" in res.stderr, res
    assert model.requests(MESSAGES)[2].json()["messages"][-1]["content"][0]["is_error"] is True, "the model reads a failure"


def test_messages_first_answer_streams(model: fm.FakeModel, claude: anthropic.Anthropic) -> None:
    """A streaming client's own model call streams, and the model's first answer — its text, then
    its code call's input in pieces — reaches the stream helper as it arrives: its final message is
    the plain one's."""
    events: list[tuple[str, dict]] = [
        ("message_start", {"type": "message_start", "message": {
            "id": "msg_py_first", "type": "message", "role": "assistant", "model": MODEL, "content": [],
            "stop_reason": None, "stop_sequence": None, "usage": {"input_tokens": 10, "output_tokens": 1}}}),
        ("content_block_start", {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
        ("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Let me "}}),
        ("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "run it."}}),
        ("content_block_stop", {"type": "content_block_stop", "index": 0}),
        ("content_block_start", {"type": "content_block_start", "index": 1, "content_block": {
            "type": "tool_use", "id": "toolu_py1", "name": "code_execution", "input": {}}}),
        ("content_block_delta", {"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": '{"code": "pri'}}),
        ("content_block_delta", {"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": 'nt(40 + 2)"}'}}),
        ("content_block_stop", {"type": "content_block_stop", "index": 1}),
        ("message_delta", {"type": "message_delta", "delta": {"stop_reason": "tool_use", "stop_sequence": None}, "usage": {"output_tokens": 5}}),
        ("message_stop", {"type": "message_stop"}),
    ]
    model.script(MESSAGES, fm.sse(*events), fm.ok(answer({"type": "text", "text": "It is 42."}, usage=(20, 3))))
    texts: list[str] = []
    with claude.messages.stream(model=MODEL, max_tokens=1024, tools=[TOOL],
                                messages=[{"role": "user", "content": "What is 40 + 2?"}]) as stream:
        for event in stream:
            if event.type == "content_block_delta" and event.delta.type == "text_delta":
                texts.append(event.delta.text)
        msg = stream.get_final_message()
    assert model.requests(MESSAGES)[0].json()["stream"] is True, "the first call asks the model for a stream"
    assert texts[:2] == ["Let me ", "run it."], f"the first answer's deltas reach the client as they were: {texts}"
    check_compute(model, msg, "first answer streamed")
    assert msg.id == "msg_py_first", "named after the first answer"
