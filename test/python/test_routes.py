"""What the SDK sees of the rest of envoy/envoy.yaml: requests without the hosted tool pass
through untouched (streams too), and the analyst route's profile (session header, path
rewrite) applies."""

from __future__ import annotations

import json
import uuid

import fake_model as fm
from helpers import CODE_TOOL, check_upstream, output_of

CLIENT_FUNCTION = {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}


def chunk(choices: list, usage=None) -> dict:
    return {"id": "chatcmpl-pass", "object": "chat.completion.chunk", "created": fm.CREATED, "model": fm.MODEL,
            "choices": choices, "usage": usage}


def delta(d: dict, finish=None) -> list:
    return [{"index": 0, "delta": d, "finish_reason": finish, "logprobs": None}]


def test_a_chat_stream_without_the_tool_passes_through(model: fm.FakeModel, client) -> None:
    events = [
        chunk(delta({"role": "assistant", "content": ""})),
        chunk(delta({"content": "streamed "})),
        chunk(delta({"content": "through"})),
        chunk(delta({}, "stop")),
    ]
    model.script(fm.CHAT, fm.sse(*[(None, e) for e in events], (None, "[DONE]")))
    got = list(client.chat.completions.create(model=fm.MODEL, messages=[{"role": "user", "content": "hi"}],
                                              tools=[CLIENT_FUNCTION], stream=True))

    assert [c.model_dump(mode="json", exclude_unset=True) for c in got] == events, "pass-through: the model's chunks, unchanged"
    reqs = model.requests(fm.CHAT)
    assert len(reqs) == 1, "pass-through: one model call"
    body = reqs[0].json()
    assert body["stream"] is True, "pass-through: the model was asked to stream"
    assert body["tools"] == [CLIENT_FUNCTION], "pass-through: the client's tools, unchanged"


def test_a_responses_request_without_the_tool_passes_through(model: fm.FakeModel, client) -> None:
    answer = fm.responses(fm.function_call("get_weather", "call_w", '{"city":"Paris"}'))
    model.script(fm.RESPONSES, fm.ok(answer))
    weather = {"type": "function", "name": "get_weather", "parameters": {"type": "object"}, "strict": False}
    resp = client.responses.create(model=fm.MODEL, input="weather?", tools=[weather])

    assert resp.model_dump(mode="json", exclude_unset=True)["output"] == answer["output"], \
        "pass-through: the model's output, unchanged"
    assert [t.name for t in resp.tools] == ["get_weather"], "pass-through: the model's echo of the client's tools"
    reqs = model.requests(fm.RESPONSES)
    assert len(reqs) == 1, "pass-through: one model call"
    assert json.loads(reqs[0].body)["tools"] == [weather], "pass-through: the client's tools, unchanged"


def test_the_analyst_route_keeps_a_session_by_header(model: fm.FakeModel, make_client) -> None:
    """/analyst/v1/ picks the analyst profile (grpc_initial_metadata in envoy.yaml), whose
    session header keeps one container across requests; Envoy rewrites the path for the model."""
    session = "py-" + uuid.uuid4().hex
    model.script(fm.RESPONSES,
                 fm.ok(fm.responses(fm.run_code("call_h1", "y = 7"))),
                 fm.ok(fm.responses(fm.message("Set."))),
                 fm.ok(fm.responses(fm.run_code("call_h2", "print(y * 6)"))),
                 fm.ok(fm.responses(fm.message("42."))))
    analyst = make_client(api_key="sk-analyst", base="/analyst/v1", default_headers={"x-session-id": session})
    first = analyst.responses.create(model=fm.MODEL, input="set y", tools=[CODE_TOOL])
    second = analyst.responses.create(model=fm.MODEL, input="use y", tools=[CODE_TOOL])

    reqs = model.requests()
    assert [r.path for r in reqs] == [fm.RESPONSES] * 4, "analyst: the route rewrote the path for the model"
    check_upstream(reqs, "Bearer sk-analyst", "analyst")
    assert output_of(reqs[3], "call_h2") == "42\n", "analyst: y survived in the session"
    assert reqs[3].header("x-session-id") == session, "analyst: the follow-up carried the client's headers"
    assert first.output[0].container_id == second.output[0].container_id, "analyst: one container"
    assert second.output_text == "42.", "analyst: answer"


def test_a_run_over_the_analyst_run_timeout_fails(model: fm.FakeModel, make_client) -> None:
    """The analyst profile's run timeout (2s) interrupts the run like a notebook: the model is
    told, the call's status is failed, what it printed before is kept."""
    model.script(fm.RESPONSES,
                 fm.ok(fm.responses(fm.run_code("call_slow", "import time\nprint('started', flush=True)\ntime.sleep(120)"))),
                 fm.ok(fm.responses(fm.message("It was too slow."))))
    resp = make_client(base="/analyst/v1").responses.create(model=fm.MODEL, input="sleep", tools=[CODE_TOOL],
                                                            include=["code_interpreter_call.outputs"])

    fed = output_of(model.requests(fm.RESPONSES)[1], "call_slow")
    assert fed.startswith("[execution timed out after 2s and was interrupted]\n"), f"run timeout: the model is told: {fed!r}"
    assert "started" in fed and "KeyboardInterrupt" in fed, f"run timeout: the output before, the interrupt: {fed!r}"
    ci = resp.output[0]
    assert (ci.type, ci.status) == ("code_interpreter_call", "failed"), f"run timeout: the call: {ci}"
    assert "".join(o.logs for o in ci.outputs if o.type == "logs") == fed, "run timeout: the client sees what the model saw"
    assert resp.output_text == "It was too slow.", "run timeout: answer"
