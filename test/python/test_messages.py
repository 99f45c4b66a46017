"""client.messages through Envoy and codeinterp with the code_execution_20250522 tool: the model's
call runs in the sandbox and the client gets the native server_tool_use and
code_execution_tool_result blocks, plainly and as a stream accumulated by the SDK; a client's
mistake is the SDK's BadRequestError."""

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
