"""client.responses through Envoy and codeinterp: the loop's scenarios (test/e2e/loop_test.go)
as the openai Python SDK sees them, plain, with stream=True, and with client.responses.stream."""

from __future__ import annotations

import base64
import struct
import uuid
from typing import Callable

import openai
import pytest
from openai.types.responses import (
    Response,
    ResponseCodeInterpreterToolCall,
    ResponseCompletedEvent,
    ResponseOutputMessage,
)
from openai.types.responses.response_code_interpreter_tool_call import OutputImage, OutputLogs

import fake_model as fm
from helpers import CODE_TOOL, INCLUDE_OUTPUTS, check_upstream, function_tool, logs_of, normalized, output_of


def ask(text: str, **kw) -> dict:
    """A request with the code_interpreter tool whose include asks for the calls' outputs."""
    return {"model": fm.MODEL, "input": text, "tools": [CODE_TOOL], "include": INCLUDE_OUTPUTS, **kw}


def code_call(resp: Response, i: int) -> ResponseCodeInterpreterToolCall:
    assert len(resp.output) > i, f"output items: {resp.output}"
    item = resp.output[i]
    assert isinstance(item, ResponseCodeInterpreterToolCall), f"output item {i} is {type(item).__name__}: {item}"
    return item


def check_native(resp: Response, what: str) -> None:
    """What every answer to a code_interpreter request is: the client's tool echoed, no
    internal function call visible, code_interpreter_call items with the native keys."""
    assert [t.type for t in resp.tools] == ["code_interpreter"], f"{what}: the client's tool echoed: {resp.tools}"
    for i, item in enumerate(resp.output):
        assert not (item.type == "function_call" and item.name == fm.FUNCTION), f"{what}: item {i} is the internal call"
        if item.type != "code_interpreter_call":
            continue
        assert set(item.model_dump(exclude_unset=True)) == {"id", "type", "status", "code", "container_id", "outputs"}, \
            f"{what}: keys of item {i}: {item}"
        assert item.id.startswith("ci_"), f"{what}: id of item {i}: {item.id}"
        assert item.container_id.startswith("cntr_"), f"{what}: container_id of item {i}: {item.container_id}"


# --- Scenarios: each scripts the model, asks, checks, and returns the final Response -----------
# A scenario takes `send(params) -> Response`, which asks plainly or streams (see VARIANTS).


def scenario_compute(model: fm.FakeModel, send: Callable[..., Response]) -> Response:
    model.script(fm.RESPONSES,
                 fm.ok(fm.responses(fm.run_code("call_1", "print(40+2)"), usage=(10, 5))),
                 fm.ok(fm.responses(fm.message("40+2 = 42"), usage=(20, 7))))
    resp = send(ask("compute 40+2"))

    reqs = model.requests(fm.RESPONSES)
    assert len(reqs) == 2, "compute: requests the model got"
    check_upstream(reqs, "Bearer sk-python", "compute")
    first = reqs[0].json()
    assert first["tools"] == [function_tool(first, "responses")], \
        f"compute: the hosted tool became the function tool, in its place: {first['tools']}"
    assert first["input"] == "compute 40+2", "compute: the input as the client sent it"
    assert output_of(reqs[1], "call_1") == "42\n", "compute: the real output fed back to the model"
    follow = reqs[1].json()["input"]
    assert [i.get("type") for i in follow][-2:] == ["function_call", "function_call_output"], \
        f"compute: the follow-up has the model's call and its output: {follow}"

    check_native(resp, "compute")
    assert [o.type for o in resp.output] == ["code_interpreter_call", "message"], "compute: output items"
    ci = code_call(resp, 0)
    assert ci.status == "completed", "compute: status"
    assert ci.code == "print(40+2)", "compute: code"
    assert ci.outputs == [OutputLogs(type="logs", logs="42\n")], "compute: outputs"
    assert isinstance(resp.output[1], ResponseOutputMessage), "compute: the answer is a message"
    assert resp.output_text == "40+2 = 42", "compute: answer text"
    # A plain answer is the last turn's response (its id is what previous_response_id must name
    # upstream); a stream names its response in response.created, before the last turn exists,
    # with the first turn's id, and the server maps a continuation from it to the last turn.
    last, first_turn = fm.responses(fm.message("40+2 = 42"))["id"], fm.responses(fm.run_code("call_1", "print(40+2)"))["id"]
    assert resp.id in (last, first_turn), "compute: the response id is a turn's"
    assert (resp.usage.input_tokens, resp.usage.output_tokens, resp.usage.total_tokens) == (30, 12, 42), \
        "compute: usage summed over the rounds"
    return resp


def scenario_state(model: fm.FakeModel, send: Callable[..., Response]) -> Response:
    model.script(fm.RESPONSES,
                 fm.ok(fm.responses(fm.run_code("call_set", "x = 40"))),
                 fm.ok(fm.responses(fm.run_code("call_use", "print(x+2)"))),
                 fm.ok(fm.responses(fm.message("x+2 is 42."))))
    resp = send(ask("set x, then use it"))

    reqs = model.requests(fm.RESPONSES)
    assert len(reqs) == 3, "state: requests the model got"
    check_upstream(reqs, "Bearer sk-python", "state")
    assert output_of(reqs[1], "call_set") == "[the code ran and produced no output]", "state: the assignment"
    assert output_of(reqs[2], "call_use") == "42\n", "state: x kept between the rounds"
    assert output_of(reqs[2], "call_set") == "[the code ran and produced no output]", "state: round 1 kept in round 2"

    check_native(resp, "state")
    assert [o.type for o in resp.output] == ["code_interpreter_call", "code_interpreter_call", "message"], "state: items"
    first, second = code_call(resp, 0), code_call(resp, 1)
    assert (first.code, first.outputs, first.status) == ("x = 40", [], "completed"), "state: the assignment shows nothing"
    assert (second.code, logs_of(second)) == ("print(x+2)", "42\n"), "state: the second call"
    assert first.container_id == second.container_id, "state: one container for the request"
    assert resp.output_text == "x+2 is 42.", "state: answer"
    return resp


def scenario_exception(model: fm.FakeModel, send: Callable[..., Response]) -> Response:
    model.script(fm.RESPONSES,
                 fm.ok(fm.responses(fm.message("Let me look."), fm.run_code("call_bad", "x = [1, 2, 3]\nprint(x[5])"))),
                 fm.ok(fm.responses(fm.run_code("call_good", "print(x[2])"))),
                 fm.ok(fm.responses(fm.message("The last element is 3."))))
    resp = send(ask("print the last element"))

    reqs = model.requests(fm.RESPONSES)
    assert len(reqs) == 3, "exception: requests the model got"
    fed = output_of(reqs[1], "call_bad")
    assert "Traceback" in fed and "IndexError: list index out of range" in fed, f"exception: the model is told: {fed!r}"
    assert "line 2" in fed, f"exception: the traceback names the line: {fed!r}"
    assert output_of(reqs[2], "call_good") == "3\n", "exception: the state before the error kept"

    check_native(resp, "exception")
    assert [o.type for o in resp.output] == ["message", "code_interpreter_call", "code_interpreter_call", "message"], \
        "exception: every round's items, in order"
    bad = code_call(resp, 1)
    # As with OpenAI's tool, code that raised ran to its end: the call completed, the
    # traceback is in its logs.
    assert bad.status == "completed", "exception: status of the call that raised"
    assert logs_of(bad) == fed, "exception: the client sees what the model saw"
    assert code_call(resp, 2).status == "completed", "exception: the corrected call"
    assert resp.output_text == "Let me look.The last element is 3.", "exception: the text of both messages"
    return resp


SCENARIOS = {"compute": scenario_compute, "state": scenario_state, "exception": scenario_exception}


# --- Ways to ask -------------------------------------------------------------------------------


def send_plain(client, params: dict) -> Response:
    resp = client.responses.create(**params)
    assert isinstance(resp, Response), f"plain: {type(resp)}"
    return resp


def send_create_stream(client, params: dict) -> Response:
    """create(stream=True): the raw event stream, checked as a native one, ends with
    response.completed, whose response is returned."""
    events = list(client.responses.create(stream=True, **params))
    check_events(events, "create(stream=True)")
    assert isinstance(events[-1], ResponseCompletedEvent), f"last event: {events[-1].type}"
    return events[-1].response


def send_stream_helper(client, params: dict) -> Response:
    """client.responses.stream: the SDK's helper accumulates the events (checking their
    consistency) and get_final_response returns the final response."""
    with client.responses.stream(**params) as stream:
        events = list(stream)
        final = stream.get_final_response()
    check_events(events, "responses.stream")
    return final


VARIANTS = {"plain": send_plain, "create-stream": send_create_stream, "stream-helper": send_stream_helper}


def check_events(events: list, what: str) -> None:
    """A native Responses event stream: sequence numbers from 0, created and in_progress
    first, completed last, and per code_interpreter_call item the native event order with code
    deltas adding up to the code; per message the text deltas adding up to its text."""
    types = [e.type for e in events]
    assert [e.sequence_number for e in events] == list(range(len(events))), f"{what}: sequence numbers: {types}"
    assert types[:2] == ["response.created", "response.in_progress"], f"{what}: first events: {types}"
    assert types[-1] == "response.completed", f"{what}: last event: {types}"
    final = events[-1].response
    per_item: dict[int, list[str]] = {}
    deltas: dict[int, str] = {}
    for e in events[2:-1]:
        seq = per_item.setdefault(e.output_index, [])
        if not (seq and seq[-1] == e.type and e.type.endswith(".delta")):
            seq.append(e.type)
        if e.type in ("response.code_interpreter_call_code.delta", "response.output_text.delta"):
            deltas[e.output_index] = deltas.get(e.output_index, "") + e.delta
    assert sorted(per_item) == list(range(len(final.output))), f"{what}: items with events: {types}"
    for i, item in enumerate(final.output):
        if item.type == "code_interpreter_call":
            assert per_item[i] == [
                "response.output_item.added", "response.code_interpreter_call.in_progress",
                "response.code_interpreter_call_code.delta", "response.code_interpreter_call_code.done",
                "response.code_interpreter_call.interpreting", "response.code_interpreter_call.completed",
                "response.output_item.done",
            ], f"{what}: events of code_interpreter_call {i}"
            assert deltas[i] == item.code, f"{what}: code deltas of item {i}"
        elif item.type == "message":
            annotations = list(item.content[0].annotations or [])
            assert per_item[i] == [
                "response.output_item.added", "response.content_part.added", "response.output_text.delta",
                *["response.output_text.annotation.added"] * len(annotations),
                "response.output_text.done", "response.content_part.done", "response.output_item.done",
            ], f"{what}: events of message {i}"
            streamed = [e for e in events if e.type == "response.output_text.annotation.added" and e.output_index == i]
            assert [e.annotation_index for e in streamed] == list(range(len(annotations))), f"{what}: annotation indices of message {i}"
            assert [_as_dict(e.annotation) for e in streamed] == [_as_dict(a) for a in annotations], \
                f"{what}: the annotation.added events of message {i} are its annotations"
            assert deltas[i] == "".join(c.text for c in item.content), f"{what}: text deltas of message {i}"


def _as_dict(v) -> dict:
    return v if isinstance(v, dict) else v.model_dump(mode="json", exclude_unset=True)


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_responses(scenario: str, model: fm.FakeModel, client, subtests) -> None:
    """The scenario asked each way (a subtest each), then the streams' reconstruction compared
    with the plain answer (but for the ids the server mints, which differ consistently)."""
    got = {}
    for variant, send in VARIANTS.items():
        with subtests.test(variant=variant):
            model.reset()
            resp = SCENARIOS[scenario](model, lambda params: send(client, params))
            assert model.pending() == 0, f"{scenario} ({variant}): every scripted answer was used"
            got[variant] = normalized(resp.model_dump(mode="json"))
    assert set(got) == set(VARIANTS), f"{scenario}: a variant failed (its subtest says why)"
    assert got["create-stream"] == got["plain"], f"{scenario}: create(stream=True) vs plain"
    assert got["stream-helper"] == got["plain"], f"{scenario}: responses.stream's final response vs plain"


def test_state_across_requests_by_session_and_container_id(model: fm.FakeModel, client) -> None:
    """A request naming a session (metadata.session_id) keeps its container; a later request
    naming that container (tools=[{"type": "code_interpreter", "container": id}]) finds its
    variables. An ephemeral container is gone after its request: naming it is a 404."""
    session = "py-" + uuid.uuid4().hex
    model.script(fm.RESPONSES,
                 fm.ok(fm.responses(fm.run_code("call_a", "x = 40"))),
                 fm.ok(fm.responses(fm.message("Set."))),
                 fm.ok(fm.responses(fm.run_code("call_b", "print(x+2)"))),
                 fm.ok(fm.responses(fm.message("42."))),
                 fm.ok(fm.responses(fm.run_code("call_e", "y = 1"))),
                 fm.ok(fm.responses(fm.message("Done."))))
    first = client.responses.create(**ask("set x", metadata={"session_id": session}))
    container = code_call(first, 0).container_id
    second = client.responses.create(model=fm.MODEL, input="use x",
                                     tools=[{"type": "code_interpreter", "container": container}])

    reqs = model.requests(fm.RESPONSES)
    assert len(reqs) == 4, "container: requests the model got"
    assert output_of(reqs[3], "call_b") == "42\n", "container: x survived in the named container"
    assert code_call(second, 0).container_id == container, "container: the second request ran there"
    assert second.tools[0].container == container, "container: the named container echoed"
    check_native(second, "container")

    # An auto container of a caller with a key lives on too, as natively; an id never issued
    # to the caller is a 404.
    auto = code_call(client.responses.create(**ask("no session")), 0).container_id
    never = "cntr_" + uuid.uuid4().hex
    with pytest.raises(openai.NotFoundError) as info:
        client.responses.create(model=fm.MODEL, input="use it",
                                tools=[{"type": "code_interpreter", "container": never}])
    err = info.value
    assert (err.status_code, err.code) == (404, "container_not_found"), f"unknown: {err.body}"
    assert err.body["message"] == f"Container '{never}' not found.", f"unknown: {err.body}"
    assert len(model.requests(fm.RESPONSES)) == 6, "unknown: the refused request never reached the model"
    assert auto != container, "auto: a request without a session has a container of its own"


def test_arguments_that_are_not_code_fail_the_call(model: fm.FakeModel, client) -> None:
    """A call whose arguments are not {"code": ...}: nothing runs, the model is told, the
    call's status is failed."""
    model.script(fm.RESPONSES,
                 fm.ok(fm.responses(fm.function_call(fm.FUNCTION, "call_raw", "print('not JSON')"))),
                 fm.ok(fm.responses(fm.message("I will answer without code."))))
    resp = client.responses.create(**ask("run it"))

    reqs = model.requests(fm.RESPONSES)
    assert len(reqs) == 2, "invalid arguments: requests the model got"
    fed = output_of(reqs[1], "call_raw")
    assert fed.startswith("[invalid tool arguments"), f"invalid arguments: the model is told: {fed!r}"
    ci = code_call(resp, 0)
    assert ci.status == "failed", "invalid arguments: status"
    assert logs_of(ci) == fed, "invalid arguments: the client sees why"
    assert resp.output_text == "I will answer without code.", "invalid arguments: answer"


def test_a_plot_is_an_image_output(model: fm.FakeModel, client) -> None:
    """A matplotlib figure comes back as the SDK's OutputImage, a PNG data URL; the model is
    told an image was shown."""
    code = "import matplotlib.pyplot as plt\nplt.plot([1, 2, 3], [1, 4, 9])\nplt.title('squares');"
    model.script(fm.RESPONSES,
                 fm.ok(fm.responses(fm.run_code("call_plot", code))),
                 fm.ok(fm.responses(fm.message("Here is the plot."))))
    resp = client.responses.create(**ask("plot squares"))

    reqs = model.requests(fm.RESPONSES)
    assert output_of(reqs[1], "call_plot") == "[1 image was shown to the user]", "plot: what the model is told"
    ci = code_call(resp, 0)
    assert len(ci.outputs) == 1 and isinstance(ci.outputs[0], OutputImage), f"plot: outputs {ci.outputs}"
    prefix = "data:image/png;base64,"
    assert ci.outputs[0].url.startswith(prefix), f"plot: a PNG data URL: {ci.outputs[0].url[:40]}"
    png = base64.b64decode(ci.outputs[0].url[len(prefix):], validate=True)
    assert png[:8] == b"\x89PNG\r\n\x1a\n", "plot: the data is a PNG"
    width, height = struct.unpack(">II", png[16:24])  # the IHDR chunk
    assert width > 0 and height > 0, f"plot: image size {width}x{height}"


def test_outputs_are_null_without_include(model: fm.FakeModel, client) -> None:
    """Without include the items' outputs are null (plain and streamed), as natively; the
    model still reads them."""
    for variant, send in VARIANTS.items():
        model.reset()
        model.script(fm.RESPONSES,
                     fm.ok(fm.responses(fm.run_code("call_n", "print(6*7)"))),
                     fm.ok(fm.responses(fm.message("42"))))
        resp = send(client, {"model": fm.MODEL, "input": "compute", "tools": [CODE_TOOL]})
        assert output_of(model.requests(fm.RESPONSES)[1], "call_n") == "42\n", f"{variant}: the model reads the output"
        ci = code_call(resp, 0)
        assert ci.outputs is None, f"{variant}: outputs without include: {ci.outputs}"


def test_a_continuation_reuses_the_container(model: fm.FakeModel, client) -> None:
    """A request continuing from an answer (previous_response_id) with an auto container runs
    in that answer's container, and a request naming the answer's container_id too."""
    model.script(fm.RESPONSES,
                 fm.ok(fm.responses(fm.run_code("call_1", "kept = 'yes'"))),
                 fm.ok(fm.responses(fm.message("Kept."))),
                 fm.ok(fm.responses(fm.run_code("call_2", "print(kept)"))),
                 fm.ok(fm.responses(fm.message("yes"))),
                 fm.ok(fm.responses(fm.run_code("call_3", "print(kept * 2)"))),
                 fm.ok(fm.responses(fm.message("yesyes"))))
    first = client.responses.create(**ask("keep it"))
    second = client.responses.create(**ask("what is kept?", previous_response_id=first.id))
    container = code_call(first, 0).container_id
    third = client.responses.create(model=fm.MODEL, input="twice", include=INCLUDE_OUTPUTS,
                                    tools=[{"type": "code_interpreter", "container": container}])
    reqs = model.requests(fm.RESPONSES)
    assert output_of(reqs[3], "call_2") == "yes\n", "previous_response_id: the earlier answer's container"
    assert output_of(reqs[5], "call_3") == "yesyes\n", "container id: the same container"
    assert code_call(second, 0).container_id == container == code_call(third, 0).container_id, "one container"


FILES_CODE = ("import pandas as pd\n"
              "pd.DataFrame({'x': [1, 2], 'y': [3, 4]}).to_csv('/mnt/data/clean.csv', index=False)\nprint('saved')")
FILES_ANSWER = "Voilà, données ✓: [Download the CSV](sandbox:/mnt/data/clean.csv)."


def test_the_files_written_are_cited(model: fm.FakeModel, client) -> None:
    """The message after a call that wrote a file cites it: a container_file_citation spanning
    the link, in Python str indices; the stream helper rebuilds the same annotations."""
    got = {}
    for variant, send in VARIANTS.items():
        model.reset()
        model.script(fm.RESPONSES,
                     fm.ok(fm.responses(fm.run_code("call_f", FILES_CODE))),
                     fm.ok(fm.responses(fm.message(FILES_ANSWER))))
        resp = send(client, ask("clean it"))
        fed = output_of(model.requests(fm.RESPONSES)[1], "call_f")
        assert fed == "saved\n[files written: /mnt/data/clean.csv (12 bytes)]", f"{variant}: the model is told: {fed!r}"
        ci = code_call(resp, 0)
        text = resp.output[1].content[0]
        assert len(text.annotations) == 1, f"{variant}: annotations {text.annotations}"
        a = text.annotations[0]
        assert a.type == "container_file_citation", f"{variant}: {a}"
        assert (a.container_id, a.filename) == (ci.container_id, "clean.csv"), f"{variant}: {a}"
        assert a.file_id.startswith("cfile_"), f"{variant}: {a}"
        assert FILES_ANSWER[a.start_index:a.end_index] == "[Download the CSV](sandbox:/mnt/data/clean.csv)", \
            f"{variant}: the span {a.start_index}..{a.end_index}"
        got[variant] = (a.start_index, a.end_index, a.filename)
    assert len(set(got.values())) == 1, f"every variant cites alike: {got}"


def test_a_streamed_first_answer(model: fm.FakeModel, client) -> None:
    """A streaming client's own model call streams, and the model's answer — its code call's
    arguments in pieces — is read as it arrives: both ways of streaming rebuild the plain answer,
    and the first model call asked for a stream."""
    first = fm.responses(fm.run_code("call_1", "x = 6 * 7\nprint(x)"), usage=(10, 5))
    then = fm.responses(fm.message("It is 42."), usage=(20, 7))
    model.script(fm.RESPONSES, fm.ok(first), fm.ok(then))
    plain = send_plain(client, ask("six times seven"))
    assert logs_of(code_call(plain, 0)) == "42\n", f"plain: {plain.output}"
    for variant, send in {"create-stream": send_create_stream, "stream-helper": send_stream_helper}.items():
        model.reset()
        model.script(fm.RESPONSES, fm.responses_stream(first), fm.ok(then))
        resp = send(client, ask("six times seven"))
        reqs = model.requests(fm.RESPONSES)
        assert len(reqs) == 2, f"{variant}: the first call and one follow-up"
        assert reqs[0].json().get("stream") is True, f"{variant}: the first call asks for a stream"
        assert normalized(resp.model_dump(mode="json")) == normalized(plain.model_dump(mode="json")), \
            f"{variant}: the streamed answer rebuilds the plain one"
