"""client.chat.completions through Envoy and codeinterp: the loop's Chat scenarios, plain,
with stream=True accumulated by the SDK's ChatCompletionStreamState, and with
client.chat.completions.stream.

The SDK has no Chat tool type for code_interpreter: create() sends tools as given, and the
stream helper (which accepts strict function tools only) gets it through extra_body."""

from __future__ import annotations

from typing import Callable

import pytest
from openai.lib.streaming.chat import ChatCompletionStreamState
from openai.types.chat import ChatCompletion, ChatCompletionChunk

import fake_model as fm
from helpers import CHAT_CODE_TOOL, check_upstream, function_tool, normalized, output_of


def ask(text: str) -> dict:
    return {"model": fm.MODEL, "messages": [{"role": "user", "content": text}]}


def scenario_compute(model: fm.FakeModel, send: Callable[[dict], ChatCompletion]) -> ChatCompletion:
    model.script(fm.CHAT,
                 fm.ok(fm.chat("", fm.chat_run_code("call_1", "print(40+2)"), usage=(10, 5))),
                 fm.ok(fm.chat("40+2 = 42", usage=(20, 7))))
    resp = send(ask("compute 40+2"))

    reqs = model.requests(fm.CHAT)
    assert len(reqs) == 2, "compute chat: requests the model got"
    check_upstream(reqs, "Bearer sk-python", "compute chat")
    first = reqs[0].json()
    assert first["tools"] == [function_tool(first, "chat")], f"compute chat: the function tool in its place: {first['tools']}"
    assert first["messages"] == [{"role": "user", "content": "compute 40+2"}], "compute chat: the messages as sent"
    follow = reqs[1].json()["messages"]
    assert [m["role"] for m in follow] == ["user", "assistant", "tool"], f"compute chat: the follow-up's messages: {follow}"
    assert follow[1]["tool_calls"][0]["id"] == "call_1", "compute chat: the model's call in the follow-up"
    assert output_of(reqs[1], "call_1") == "42\n", "compute chat: the real output fed back to the model"

    assert len(resp.choices) == 1, "compute chat: choices"
    choice = resp.choices[0]
    assert choice.message.content == "40+2 = 42", "compute chat: answer"
    assert not choice.message.tool_calls, "compute chat: no internal call visible"
    assert choice.finish_reason == "stop", "compute chat: finish_reason"
    assert (resp.usage.prompt_tokens, resp.usage.completion_tokens, resp.usage.total_tokens) == (30, 12, 42), \
        "compute chat: usage summed over the rounds"
    return resp


def scenario_state(model: fm.FakeModel, send: Callable[[dict], ChatCompletion]) -> ChatCompletion:
    model.script(fm.CHAT,
                 fm.ok(fm.chat("", fm.chat_run_code("call_set", "x = 40"))),
                 fm.ok(fm.chat("Now x+2.", fm.chat_run_code("call_use", "print(x+2)"))),
                 fm.ok(fm.chat("x+2 is 42.")))
    resp = send(ask("set x, then use it"))

    reqs = model.requests(fm.CHAT)
    assert len(reqs) == 3, "state chat: requests the model got"
    check_upstream(reqs, "Bearer sk-python", "state chat")
    assert output_of(reqs[1], "call_set") == "[the code ran and produced no output]", "state chat: the assignment"
    assert output_of(reqs[2], "call_use") == "42\n", "state chat: x kept between the rounds"
    assistants = [m for m in reqs[2].json()["messages"] if m["role"] == "assistant"]
    assert [m.get("content") for m in assistants][1] == "Now x+2.", "state chat: the assistant's text kept in the follow-up"
    assert resp.choices[0].message.content == "x+2 is 42.", "state chat: answer"
    assert resp.choices[0].finish_reason == "stop", "state chat: finish_reason"
    return resp


def scenario_exception(model: fm.FakeModel, send: Callable[[dict], ChatCompletion]) -> ChatCompletion:
    model.script(fm.CHAT,
                 fm.ok(fm.chat("", fm.chat_run_code("call_bad", "1/0"))),
                 fm.ok(fm.chat("Let me fix that.", fm.chat_run_code("call_good", "print(1/2)"))),
                 fm.ok(fm.chat("Half is 0.5.")))
    resp = send(ask("halve one"))

    reqs = model.requests(fm.CHAT)
    assert len(reqs) == 3, "exception chat: requests the model got"
    fed = output_of(reqs[1], "call_bad")
    assert "Traceback" in fed and "ZeroDivisionError: division by zero" in fed, f"exception chat: the model is told: {fed!r}"
    assert output_of(reqs[2], "call_good") == "0.5\n", "exception chat: the corrected run"
    assert resp.choices[0].message.content == "Half is 0.5.", "exception chat: answer"
    return resp


SCENARIOS = {"compute": scenario_compute, "state": scenario_state, "exception": scenario_exception}


def send_plain(client, params: dict) -> ChatCompletion:
    resp = client.chat.completions.create(tools=[CHAT_CODE_TOOL], **params)
    assert isinstance(resp, ChatCompletion), f"plain: {type(resp)}"
    return resp


def send_create_stream(client, params: dict) -> ChatCompletion:
    """create(stream=True) with the usage chunk, accumulated with ChatCompletionStreamState."""
    state = ChatCompletionStreamState()
    chunks: list[ChatCompletionChunk] = []
    for chunk in client.chat.completions.create(tools=[CHAT_CODE_TOOL], stream=True,
                                                stream_options={"include_usage": True}, **params):
        chunks.append(chunk)
        state.handle_chunk(chunk)
    check_chunks(chunks, "create(stream=True)")
    return state.get_final_completion()


def send_stream_helper(client, params: dict) -> ChatCompletion:
    """client.chat.completions.stream: its events, and get_final_completion."""
    with client.chat.completions.stream(extra_body={"tools": [CHAT_CODE_TOOL]},
                                        stream_options={"include_usage": True}, **params) as stream:
        events = list(stream)
        final = stream.get_final_completion()
    chunks = [e.chunk for e in events if e.type == "chunk"]
    check_chunks(chunks, "chat.completions.stream")
    text = "".join(e.delta for e in events if e.type == "content.delta")
    done = [e.content for e in events if e.type == "content.done"]
    assert done == [text], f"chat.completions.stream: content.done is the deltas: {done} vs {text!r}"
    assert text == final.choices[0].message.content, "chat.completions.stream: the deltas are the final content"
    return final


VARIANTS = {"plain": send_plain, "create-stream": send_create_stream, "stream-helper": send_stream_helper}


def check_chunks(chunks: list[ChatCompletionChunk], what: str) -> None:
    """chat.completion.chunks of one id, the role first, the usage chunk (no choices) last."""
    assert chunks, f"{what}: chunks"
    assert {c.id for c in chunks} == {chunks[0].id}, f"{what}: one id"
    assert all(c.object == "chat.completion.chunk" for c in chunks), f"{what}: object"
    assert chunks[0].choices[0].delta.role == "assistant", f"{what}: the role first"
    assert not chunks[-1].choices and chunks[-1].usage.total_tokens > 0, f"{what}: the usage chunk last"
    calls = [tc for c in chunks for ch in c.choices for tc in ch.delta.tool_calls or []]
    assert not calls, f"{what}: no internal call streamed: {calls}"


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_chat(scenario: str, model: fm.FakeModel, client, subtests) -> None:
    """The scenario asked each way (a subtest each), then the streams' reconstruction compared
    with the plain completion (but for the ids the server mints, which differ consistently)."""
    got = {}
    for variant, send in VARIANTS.items():
        with subtests.test(variant=variant):
            model.reset()
            resp = SCENARIOS[scenario](model, lambda params: send(client, params))
            assert model.pending() == 0, f"{scenario} ({variant}): every scripted answer was used"
            got[variant] = normalized(resp.model_dump(mode="json"))
    assert set(got) == set(VARIANTS), f"{scenario}: a variant failed (its subtest says why)"
    assert got["create-stream"] == got["plain"], f"{scenario}: ChatCompletionStreamState vs plain"
    assert got["stream-helper"] == got["plain"], f"{scenario}: chat.completions.stream's final completion vs plain"
