"""client.messages through Envoy and codeinterp with the REPL-state version code_execution_20260521:
the model is offered Python beside bash and the text editor; what a cell defines lives on for the next
request that names the container; the SDK's models take every content block codeinterp returns without
an unknown field or a missing required one, plainly and as a stream accumulated by the SDK."""

from __future__ import annotations

from typing import Any

import anthropic
import pydantic

import fake_model as fm
from test_messages import MESSAGES, MODEL, answer, claude  # noqa: F401 (claude is a fixture)

TOOLS = [{"type": "code_execution_20260521", "name": "code_execution"},
         {"name": "weather", "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}}]


def check_shape(v: Any, where: str) -> None:
    """v, a model the SDK decoded, has no field the SDK does not know and every field it requires."""
    if isinstance(v, list):
        for i, e in enumerate(v):
            check_shape(e, f"{where}[{i}]")
        return
    if not isinstance(v, pydantic.BaseModel):
        return
    assert not v.model_extra, f"{where}: fields the SDK does not know: {v.model_extra}"
    for name, field in type(v).model_fields.items():
        if field.is_required():
            assert name in v.model_fields_set, f"{where}: the required field {name} is missing: {v}"
        check_shape(getattr(v, name), f"{where}.{name}")


def script_state(model: fm.FakeModel) -> None:
    model.script(MESSAGES,
                 fm.ok(answer({"type": "tool_use", "id": "toolu_rp1", "name": "code_execution",
                               "input": {"code": "import statistics\nvalues = [3, 5, 10]"}},
                              {"type": "tool_use", "id": "toolu_rb1", "name": "bash_code_execution",
                               "input": {"command": "echo bash too"}}, usage=(10, 5))),
                 fm.ok(answer({"type": "text", "text": "Defined."}, usage=(20, 3))),
                 fm.ok(answer({"type": "tool_use", "id": "toolu_rp2", "name": "code_execution",
                               "input": {"code": "print(statistics.mean(values))"}}, usage=(30, 5))),
                 fm.ok(answer({"type": "text", "text": "The mean is 6."},
                              {"type": "tool_use", "id": "toolu_rw1", "name": "weather", "input": {"city": "Oslo"}},
                              usage=(40, 5))))


def run_state(model: fm.FakeModel, claude: anthropic.Anthropic, stream: bool) -> None:  # noqa: F811
    script_state(model)
    messages: list[Any] = [{"role": "user", "content": "Define the values."}]
    first = claude.messages.create(model=MODEL, max_tokens=1024, tools=TOOLS, messages=messages)
    check_shape(first.content, "first.content")
    assert [b.type for b in first.content] == ["server_tool_use", "code_execution_tool_result",
                                               "server_tool_use", "bash_code_execution_tool_result", "text"], first.content
    assert first.content[0].caller.type == "direct", first.content[0]
    assert first.content[3].content.stdout == "bash too\n", first.content[3]
    assert first.container and first.container.id, "the container is named"

    messages += [{"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in first.content]},
                 {"role": "user", "content": "Their mean?"}]
    kw = dict(model=MODEL, max_tokens=1024, tools=TOOLS, messages=messages, container=first.container.id)
    if stream:
        with claude.messages.stream(**kw) as s:
            second = s.get_final_message()
    else:
        second = claude.messages.create(**kw)
    check_shape(second.content, "second.content")
    assert [b.type for b in second.content] == ["server_tool_use", "code_execution_tool_result", "text", "tool_use"], second.content
    assert second.content[1].content.stdout == "6\n", f"the first request's variables and import lived on: {second.content[1]}"
    assert second.content[3].caller.type == "direct", f"the client's tool_use names its caller: {second.content[3]}"
    assert second.stop_reason == "tool_use"
    assert second.container and second.container.id == first.container.id, "the same container"

    reqs = model.requests(MESSAGES)
    assert len(reqs) == 4, "two requests of two rounds"
    tools = reqs[0].json()["tools"]
    assert [t["name"] for t in tools] == ["code_execution", "bash_code_execution", "text_editor_code_execution", "weather"], tools
    assert "Each cell may run for at most" in tools[0]["description"], "the per-cell time limit is told"


def test_repl_state(model: fm.FakeModel, claude: anthropic.Anthropic) -> None:  # noqa: F811
    run_state(model, claude, stream=False)


def test_repl_state_stream(model: fm.FakeModel, claude: anthropic.Anthropic) -> None:  # noqa: F811
    run_state(model, claude, stream=True)
