"""Files in and out of a code_interpreter container as the openai Python SDK sees them, through
Envoy and codeinterp (test/e2e/files_test.go is the openai-go side): a CSV uploaded with
client.containers.files.create, code run on it by naming the container, a chart and a cleaned file
written by the code, image outputs (with include), container_file_citation annotations on the
answer's text (plain and streamed), both files downloaded byte for byte, and the container's
variables there for the next request."""

from __future__ import annotations

import uuid

import fake_model as fm
from helpers import output_of

RAW = b"city,temp\nOslo,4\nLima,\nRome,18\n"
CLEAN = b"city,temp\nOslo,4\nRome,18\n"

CODE = """
import csv, matplotlib
matplotlib.use('Agg')
import matplotlib.pyplot as plt
rows = [r for r in csv.DictReader(open('/mnt/data/raw.csv')) if r['temp']]
with open('/mnt/data/clean.csv', 'w', newline='') as f:
    w = csv.writer(f, lineterminator='\\n')
    w.writerow(['city', 'temp'])
    w.writerows([r['city'], r['temp']] for r in rows)
fig = plt.figure()
plt.bar([r['city'] for r in rows], [int(r['temp']) for r in rows])
fig.savefig('/mnt/data/chart.png')
print(len(rows))
"""

TEXT = ("Kept 2 rows — see [the chart](sandbox:/mnt/data/chart.png) and "
        "[the cleaned file](sandbox:/mnt/data/clean.csv).")


def _citations(resp) -> list:
    msg = [o for o in resp.output if o.type == "message"][-1]
    return [a for a in msg.content[0].annotations if a.type == "container_file_citation"]


def _check_citations(client, resp, container_id: str) -> None:
    text = resp.output_text
    cites = _citations(resp)
    assert [c.filename for c in cites] == ["chart.png", "clean.csv"], cites
    for c in cites:
        assert c.container_id == container_id, c
        assert c.file_id.startswith("cfile_"), c
        assert text[c.start_index:c.end_index] == f"[{'the chart' if c.filename == 'chart.png' else 'the cleaned file'}](sandbox:/mnt/data/{c.filename})", (text, c)
    clean = client.containers.files.content.retrieve(cites[1].file_id, container_id=container_id).read()
    assert clean == CLEAN, "the cleaned file, byte for byte"
    chart = client.containers.files.content.retrieve(cites[0].file_id, container_id=container_id).read()
    assert chart.startswith(b"\x89PNG\r\n\x1a\n"), chart[:16]
    listed = {f.path: f for f in client.containers.files.list(container_id=container_id)}
    assert listed["/mnt/data/chart.png"].bytes == len(chart), listed
    assert listed["/mnt/data/chart.png"].source == "assistant", listed
    assert listed["/mnt/data/raw.csv"].source == "user", listed


def test_files_in_and_out(make_client, model: fm.FakeModel) -> None:
    key = f"sk-py-files-{uuid.uuid4().hex[:8]}"
    client = make_client(key)
    made = client.containers.create(name="weather")
    up = client.containers.files.create(container_id=made.id, file=("raw.csv", RAW))
    assert up.path == "/mnt/data/raw.csv", up
    tools = [{"type": "code_interpreter", "container": made.id}]

    model.script(fm.RESPONSES,
                 fm.ok(fm.responses(fm.run_code("call_clean", CODE))),
                 fm.ok(fm.responses(fm.message(TEXT))))
    resp = client.responses.create(model=fm.MODEL, input="clean it and chart it", tools=tools,
                                   include=["code_interpreter_call.outputs"])
    call = resp.output[0]
    assert call.type == "code_interpreter_call" and call.container_id == made.id, call
    assert [o.type for o in call.outputs] == ["logs", "image"], call.outputs
    assert call.outputs[1].url.startswith("data:image/png;base64,"), call.outputs[1].url[:40]
    reqs = model.requests(fm.RESPONSES)
    follow_up = reqs[-1].json()
    outputs = [i["output"] for i in follow_up["input"] if i.get("type") == "function_call_output"]
    assert outputs and "/mnt/data/clean.csv" in outputs[-1] and "/mnt/data/chart.png" in outputs[-1], outputs
    _check_citations(client, resp, made.id)

    # The same, streamed: the SDK's accumulator rebuilds the annotations.
    model.script(fm.RESPONSES,
                 fm.ok(fm.responses(fm.run_code("call_clean2", CODE))),
                 fm.ok(fm.responses(fm.message(TEXT))))
    with client.responses.stream(model=fm.MODEL, input="again, streamed", tools=tools,
                                 include=["code_interpreter_call.outputs"]) as stream:
        added = [e for e in stream if e.type == "response.output_text.annotation.added"]
        final = stream.get_final_response()
    assert [e.annotation["filename"] if isinstance(e.annotation, dict) else e.annotation.filename for e in added] == ["chart.png", "clean.csv"], added
    _check_citations(client, final, made.id)

    # Without include the outputs are null, as natively; the next request sees the variables.
    model.script(fm.RESPONSES,
                 fm.ok(fm.responses(fm.run_code("call_rows", "print(len(rows))"))),
                 fm.ok(fm.responses(fm.message("Two."))))
    again = client.responses.create(model=fm.MODEL, input="how many rows?", tools=tools)
    assert again.output[0].outputs is None, again.output[0]
    assert output_of(model.requests(fm.RESPONSES)[-1], "call_rows").startswith("2\n"), "the first request's variables"
