"""The hosted shell tool (issue 30) through Envoy and codeinterp, as the openai Python SDK sees it:
plain, with stream=True, and with client.responses.stream, whose final response must equal the
plain answer."""

from __future__ import annotations

import json
import re
from typing import Callable

import pytest
from openai.types.responses import (
    Response,
    ResponseCodeInterpreterToolCall,
    ResponseFunctionShellToolCall,
    ResponseFunctionShellToolCallOutput,
)

import fake_model as fm
from helpers import CODE_TOOL, INCLUDE_OUTPUTS, normalized, output_of
from test_responses import VARIANTS

SHELL_TOOL = {"type": "shell", "environment": {"type": "container_auto"}}

_SHELL_IDS = re.compile(r"\b(sh|sho)_([0-9a-f]{16,})\b")


def shell_normalized(resp: Response) -> str:
    """normalized, with the shell items' ids (sh_X and its sho_X) ranked too."""
    seen: dict[str, int] = {}

    def rank(m: re.Match) -> str:
        seen.setdefault(m.group(2), len(seen) + 1)
        return f"{m.group(1)}_{seen[m.group(2)]}"

    return _SHELL_IDS.sub(rank, normalized(resp.model_dump(mode="json")))


def run_shell(call_id: str, *commands: str, **action) -> dict:
    return fm.function_call("shell", call_id, json.dumps({"commands": list(commands), **action}))


def shell_items(resp: Response, i: int) -> tuple[ResponseFunctionShellToolCall, ResponseFunctionShellToolCallOutput]:
    call, out = resp.output[i], resp.output[i + 1]
    assert isinstance(call, ResponseFunctionShellToolCall), f"item {i} is {type(call).__name__}: {call}"
    assert isinstance(out, ResponseFunctionShellToolCallOutput), f"item {i + 1} is {type(out).__name__}: {out}"
    assert call.id.startswith("sh_") and out.id == "sho_" + call.id[3:], f"ids {call.id} {out.id}"
    assert out.call_id == call.call_id, "the output names its call"
    assert call.environment is not None and call.environment.type == "container_reference", f"environment: {call.environment}"
    assert call.environment.container_id.startswith("cntr_"), f"container: {call.environment}"
    return call, out


def scenario_shell_then_code(model: fm.FakeModel, send: Callable[..., Response]) -> Response:
    model.script(fm.RESPONSES,
                 fm.ok(fm.responses(run_shell("call_sh", "echo py-shell > /mnt/data/py.txt", "cat /mnt/data/py.txt"), usage=(10, 5))),
                 fm.ok(fm.responses(fm.run_code("call_ci", "print(open('/mnt/data/py.txt').read().strip())"), usage=(20, 7))),
                 fm.ok(fm.responses(fm.message("done"), usage=(30, 9))))
    resp = send({"model": fm.MODEL, "input": "shell then python", "tools": [CODE_TOOL, SHELL_TOOL], "include": INCLUDE_OUTPUTS})

    reqs = model.requests(fm.RESPONSES)
    assert len(reqs) == 3, "shell then code: requests the model got"
    assert [t["name"] for t in reqs[0].json()["tools"]] == ["code_interpreter", "shell"], "both tools become functions"
    assert output_of(reqs[1], "call_sh").startswith("[command 1: exit code 0]\n[command 2: exit code 0]\npy-shell\n"), \
        "shell then code: what the model reads of the commands"
    assert output_of(reqs[2], "call_ci") == "py-shell\n", "python reads the file the shell wrote"

    assert [o.type for o in resp.output] == ["shell_call", "shell_call_output", "code_interpreter_call", "message"], "output items"
    call, out = shell_items(resp, 0)
    assert call.status == "completed" and out.status == "completed", "statuses"
    assert call.action.commands == ["echo py-shell > /mnt/data/py.txt", "cat /mnt/data/py.txt"], "commands"
    assert [(o.stdout, o.stderr, o.outcome.type) for o in out.output] == [("", "", "exit"), ("py-shell\n", "", "exit")], "outputs"
    ci = resp.output[2]
    assert isinstance(ci, ResponseCodeInterpreterToolCall)
    assert ci.container_id == call.environment.container_id, "one container for both tools"
    assert [t.type for t in resp.tools] == ["code_interpreter", "shell"], "the client's tools echoed"
    return resp


def scenario_shell_replay(model: fm.FakeModel, send: Callable[..., Response]) -> Response:
    model.script(fm.RESPONSES,
                 fm.ok(fm.responses(run_shell("call_2", "echo again", timeout_ms=5000), usage=(10, 5))),
                 fm.ok(fm.responses(fm.message("again"), usage=(20, 7))))
    resp = send({
        "model": fm.MODEL,
        "tools": [SHELL_TOOL],
        "tool_choice": {"type": "shell"},
        "input": [
            {"role": "user", "content": "list"},
            {"type": "shell_call", "call_id": "call_1", "action": {"commands": ["ls"]}},
            {"type": "shell_call_output", "call_id": "call_1",
             "output": [{"stdout": "a.txt\n", "stderr": "", "outcome": {"type": "exit", "exit_code": 0}}]},
            {"role": "user", "content": "again"},
        ],
    })
    reqs = model.requests(fm.RESPONSES)
    assert len(reqs) == 2, "replay: requests the model got"
    first = reqs[0].json()
    assert [i.get("type") for i in first["input"]][1:3] == ["function_call", "function_call_output"], "replay: a function call pair"
    assert first["input"][2]["output"] == "[command 1: exit code 0]\na.txt\n", "replay: the output as the model read it"
    assert first["tool_choice"] == {"type": "function", "name": "shell"}, "tool_choice shell names the function"
    assert resp.tool_choice.type == "shell", "the client's tool_choice echoed"
    call, out = shell_items(resp, 0)
    assert call.action.timeout_ms == 5000, "timeout_ms echoed"
    assert out.output[0].stdout == "again\n", "the new command ran"
    return resp


SCENARIOS = {"shell-then-code": scenario_shell_then_code, "shell-replay": scenario_shell_replay}


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_shell(scenario: str, model: fm.FakeModel, client, subtests) -> None:
    got = {}
    for variant, send in VARIANTS.items():
        with subtests.test(variant=variant):
            model.reset()
            resp = SCENARIOS[scenario](model, lambda params: send(client, params))
            assert model.pending() == 0, f"{scenario} ({variant}): every scripted answer was used"
            got[variant] = shell_normalized(resp)
    assert set(got) == set(VARIANTS), f"{scenario}: a variant failed (its subtest says why)"
    assert got["create-stream"] == got["plain"], f"{scenario}: create(stream=True) vs plain"
    assert got["stream-helper"] == got["plain"], f"{scenario}: responses.stream's final response vs plain"


def test_shell_events_in_the_native_order(model: fm.FakeModel, client) -> None:
    """The events of a shell call, as the SDK parses them, in the order of OpenAI's recorded
    traffic (docs/surfaces.md)."""
    model.script(fm.RESPONSES,
                 fm.ok(fm.responses(run_shell("call_1", "echo one"))),
                 fm.ok(fm.responses(fm.message("ok"))))
    events = list(client.responses.create(stream=True, model=fm.MODEL, input="events", tools=[SHELL_TOOL]))
    got = [(e.type, getattr(e, "output_index", None)) for e in events
           if "shell" in e.type or e.type.startswith("response.output_item")]
    assert got[:9] == [
        ("response.output_item.added", 0),
        ("response.shell_call_command.added", 0),
        ("response.shell_call_command.delta", 0),
        ("response.shell_call_command.done", 0),
        ("response.output_item.done", 0),
        ("response.output_item.added", 1),
        ("response.shell_call_output_content.delta", 1),
        ("response.shell_call_output_content.done", 1),
        ("response.output_item.done", 1),
    ], f"shell events: {got}"
    done = next(e for e in events if e.type == "response.shell_call_output_content.done")
    assert [(o.stdout, o.outcome.type) for o in done.output] == [("one\n", "exit")], f"output done: {done}"
