"""Errors as the openai Python SDK raises them: a client's mistake answered by codeinterp
(ImmediateResponse through Envoy) and an upstream error in the middle of the loop, both with
OpenAI's error body and the SDK's typed exceptions."""

from __future__ import annotations

import openai
import pytest

import fake_model as fm
from helpers import CHAT_CODE_TOOL, CODE_TOOL, output_of

WEATHER = {"type": "function", "name": fm.FUNCTION, "parameters": {"type": "object", "properties": {}}}


def check_json_error(err: openai.APIStatusError, status: int, what: str) -> None:
    assert err.status_code == status, f"{what}: status"
    assert err.response.headers["content-type"] == "application/json", f"{what}: content-type"
    body = err.response.json()
    assert set(body) == {"error"}, f"{what}: OpenAI's error envelope: {body}"
    assert set(body["error"]) >= {"message", "type", "param", "code"}, f"{what}: the error's fields: {body}"
    assert err.body == body["error"], f"{what}: the SDK's body is the error object"


def test_a_client_function_named_like_the_internal_one(model: fm.FakeModel, client) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        client.responses.create(model=fm.MODEL, input="x", tools=[CODE_TOOL, WEATHER])
    err = info.value
    check_json_error(err, 400, "function named code_interpreter")
    assert (err.type, err.param) == ("invalid_request_error", "tools[1].name"), f"named like ours: {err.body}"
    assert fm.FUNCTION in err.body["message"], f"named like ours: the message names it: {err.body}"
    assert model.requests() == [], "named like ours: nothing reached the model"


def test_a_memory_limit_containers_do_not_have(model: fm.FakeModel, client) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        client.responses.create(model=fm.MODEL, input="x",
                                tools=[{"type": "code_interpreter", "container": {"type": "auto", "memory_limit": "3g"}}])
    err = info.value
    check_json_error(err, 400, "memory_limit 3g")
    assert (err.type, err.code, err.param) == ("invalid_request_error", "invalid_value", "tools"), f"3g: {err.body}"
    assert "Invalid memory_limit '3g'" in err.body["message"], f"3g: {err.body}"
    assert model.requests() == [], "3g: nothing reached the model"


@pytest.mark.parametrize("path,body", [
    ("/responses", b'{"model":"gpt-e2e","tools":[{"type":"code_interpreter","container":{"type":"auto"}}],"input":"x"'),
    ("/chat/completions", b'{"model":"gpt-e2e","messages":[{"role":"user","content":"x"}],"tools":[{"type":"code_interpreter"}],}'),
], ids=["responses", "chat"])
def test_malformed_json(path: str, body: bytes, model: fm.FakeModel, client) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        client.post(path, cast_to=object, content=body, options={"headers": {"Content-Type": "application/json"}})
    err = info.value
    check_json_error(err, 400, f"malformed JSON to {path}")
    assert (err.type, err.code) == ("invalid_request_error", "invalid_json"), f"malformed JSON to {path}: {err.body}"
    assert "We could not parse the JSON body of your request" in err.body["message"], f"malformed JSON: {err.body}"
    assert model.requests() == [], f"malformed JSON to {path}: nothing reached the model"


RATE_LIMITED = fm.api_error(429, "Rate limit reached for requests", "requests", "rate_limit_exceeded", headers={
    "retry-after": "7", "x-ratelimit-remaining-requests": "0", "x-request-id": "req_upstream_429",
})


def check_rate_limited(err: openai.RateLimitError, what: str) -> None:
    check_json_error(err, 429, what)
    assert (err.type, err.code) == ("requests", "rate_limit_exceeded"), f"{what}: the upstream's error: {err.body}"
    assert err.body["message"] == "Rate limit reached for requests", f"{what}: the upstream's message"
    assert err.response.headers.get("retry-after") == "7", f"{what}: retry-after reaches the client"
    assert err.response.headers.get("x-ratelimit-remaining-requests") == "0", f"{what}: the rate-limit headers"
    assert err.request_id == "req_upstream_429", f"{what}: the upstream's request id"


def test_upstream_429_in_round_2_responses(model: fm.FakeModel, client) -> None:
    """The loop's follow-up call is rate limited: the client gets the upstream's 429 with its
    retry headers, as openai.RateLimitError."""
    model.script(fm.RESPONSES, fm.ok(fm.responses(fm.run_code("call_1", "print('ran')"))), RATE_LIMITED)
    with pytest.raises(openai.RateLimitError) as info:
        client.responses.create(model=fm.MODEL, input="compute", tools=[CODE_TOOL])
    check_rate_limited(info.value, "429 in round 2")
    reqs = model.requests(fm.RESPONSES)
    assert len(reqs) == 2, "429 in round 2: requests the model got"
    assert output_of(reqs[1], "call_1") == "ran\n", "429 in round 2: round 1 ran"


def test_upstream_429_in_round_2_chat(model: fm.FakeModel, client) -> None:
    model.script(fm.CHAT, fm.ok(fm.chat("", fm.chat_run_code("call_1", "print('ran')"))), RATE_LIMITED)
    with pytest.raises(openai.RateLimitError) as info:
        client.chat.completions.create(model=fm.MODEL, messages=[{"role": "user", "content": "compute"}],
                                       tools=[CHAT_CODE_TOOL])
    check_rate_limited(info.value, "429 in round 2 (chat)")
    assert len(model.requests(fm.CHAT)) == 2, "429 in round 2 (chat): requests the model got"


def test_upstream_429_in_round_1(model: fm.FakeModel, client) -> None:
    """The model's first answer is a 429: it passes through Envoy as the client's answer."""
    model.script(fm.RESPONSES, RATE_LIMITED)
    with pytest.raises(openai.RateLimitError) as info:
        client.responses.create(model=fm.MODEL, input="compute", tools=[CODE_TOOL])
    check_rate_limited(info.value, "429 in round 1")
    assert len(model.requests(fm.RESPONSES)) == 1, "429 in round 1: requests the model got"


def test_the_sdk_retries_a_rate_limited_loop(model: fm.FakeModel, make_client) -> None:
    """With retries on, the SDK honours the 429 (retry-after-ms) and sends the request again;
    the second loop runs from the start and succeeds."""
    retry_soon = fm.api_error(429, "Rate limit reached for requests", "requests", "rate_limit_exceeded",
                              headers={"retry-after-ms": "10"})
    model.script(fm.RESPONSES,
                 fm.ok(fm.responses(fm.run_code("call_1", "print('first try')"))), retry_soon,
                 fm.ok(fm.responses(fm.run_code("call_2", "print('second try')"))),
                 fm.ok(fm.responses(fm.message("Done on the second try."))))
    resp = make_client(max_retries=1).responses.create(model=fm.MODEL, input="compute", tools=[CODE_TOOL])
    assert resp.output_text == "Done on the second try.", "retry: the answer of the second attempt"
    reqs = model.requests(fm.RESPONSES)
    assert len(reqs) == 4, "retry: two loops of two model calls"
    assert reqs[2].header("x-stainless-retry-count") == "1", "retry: the SDK's second attempt"
    assert [o.type for o in resp.output] == ["code_interpreter_call", "message"], "retry: only the second loop's items"


def test_upstream_error_mid_stream_responses(model: fm.FakeModel, client) -> None:
    """A client that streams gets an upstream error in the middle of the loop as the native
    response.failed event; the stream helper has then no final response."""
    model.script(fm.RESPONSES, fm.ok(fm.responses(fm.run_code("call_1", "print('ran')"))), RATE_LIMITED)
    with client.responses.stream(model=fm.MODEL, input="compute", tools=[CODE_TOOL]) as stream:
        events = list(stream)
        with pytest.raises(RuntimeError, match="response.completed"):
            stream.get_final_response()
    types = [e.type for e in events]
    assert types[:2] == ["response.created", "response.in_progress"], f"mid-stream error: the events {types}"
    assert types[-1] == "response.failed", f"mid-stream error: the events {types}"
    # The stream showed round 1's code call as it ran, before the failure.
    assert "response.code_interpreter_call.completed" in types, f"mid-stream error: the events {types}"
    failed = events[-1].response
    assert failed.status == "failed", "mid-stream error: status"
    assert failed.error.message == "Rate limit reached for requests", "mid-stream error: the upstream's message"
    assert [t.type for t in failed.tools] == ["code_interpreter"], "mid-stream error: the client's tool echoed"


def test_upstream_error_mid_stream_chat(model: fm.FakeModel, client) -> None:
    """A Chat stream reports it as an error chunk, which the SDK raises as openai.APIError."""
    model.script(fm.CHAT, fm.ok(fm.chat("", fm.chat_run_code("call_1", "print('ran')"))), RATE_LIMITED)
    with pytest.raises(openai.APIError) as info:
        with client.chat.completions.stream(model=fm.MODEL, messages=[{"role": "user", "content": "compute"}],
                                            extra_body={"tools": [CHAT_CODE_TOOL]}) as stream:
            list(stream)
    err = info.value
    assert not isinstance(err, openai.APIStatusError), f"mid-stream error (chat): raised from the stream: {type(err)}"
    assert err.message == "Rate limit reached for requests", f"mid-stream error (chat): {err.body}"
    assert len(model.requests(fm.CHAT)) == 2, "mid-stream error (chat): requests the model got"
