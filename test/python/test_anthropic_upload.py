"""client.beta.files.upload of the anthropic SDK with codeinterp owning the uploads
(anthropic_files.own_uploads, Envoy from `envoyconf -anthropic-uploads`), then a Messages request
whose container_upload block hands the CSV to the container, read by pandas (issue 29, "Files
in"). The stack of this module is its own: the session's runs the shipped envoy.yaml, where
uploads are the model's."""

from __future__ import annotations

import json
import os
import subprocess
import threading
from pathlib import Path
from typing import Iterator

import anthropic
import pytest

import fake_model as fm
from conftest import BUILD_TIMEOUT, READY_TIMEOUT, ROOT, STOP_TIMEOUT, Stack, _tail
from test_messages import MESSAGES, TOOL, answer

SALES = "region,amount\nnorth,120\nsouth,80\nnorth,30\n"


@pytest.fixture(scope="module")
def uploads_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """A stack whose server keeps Anthropic's uploads and whose Envoy routes them to it."""
    tmp = tmp_path_factory.mktemp("uploads-stack")
    go = os.environ.get("GO", "go")
    binary = ROOT / "bin" / "e2e-stack"
    bootstrap = tmp / "envoy-uploads.json"
    for cmd in ([go, "build", "-o", str(binary), "./test/e2e/cmd/stack"],
                [go, "run", "./cmd/envoyconf", "-anthropic-uploads", "-out", str(bootstrap)]):
        done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=BUILD_TIMEOUT)
        if done.returncode != 0:
            pytest.fail(f"{' '.join(cmd)}: exit {done.returncode}\n{done.stdout}{done.stderr}", pytrace=False)
    log = tmp / "stack.log"
    with open(log, "wb") as stderr:
        proc = subprocess.Popen([str(binary), "-anthropic-uploads", "-envoy-config", str(bootstrap)], cwd=ROOT,
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr)
    line: list[bytes] = []
    reader = threading.Thread(target=lambda: line.append(proc.stdout.readline()), daemon=True)
    reader.start()
    reader.join(READY_TIMEOUT)
    if not line or not line[0]:
        proc.kill()
        proc.wait()
        pytest.fail(f"the uploads stack did not start:\n{_tail(log)}", pytrace=False)
    try:
        yield Stack(**json.loads(line[0]))
    finally:
        proc.stdin.close()
        rc = proc.wait(STOP_TIMEOUT)
        proc.stdout.close()
        if rc != 0:
            pytest.fail(f"the uploads stack stopped with exit {rc}:\n{_tail(log)}", pytrace=False)


def client(stack: Stack, key: str) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=stack.envoy_url, api_key=key, max_retries=0, timeout=60)


def test_upload_and_read_in_the_container(uploads_stack: Stack, tmp_path: Path) -> None:
    model = fm.FakeModel(uploads_stack.control_url)
    model.reset()
    code = ("import pandas as pd\ndf = pd.read_csv('/mnt/data/sales.csv')\n"
            "print(df.groupby('region')['amount'].sum().to_dict())")
    model.script(MESSAGES,
                 fm.ok(answer({"type": "tool_use", "id": "toolu_pu1", "name": "code_execution",
                               "input": {"code": code}}, usage=(10, 5))),
                 fm.ok(answer({"type": "text", "text": "north 150, south 80."}, usage=(20, 3))))
    csv = tmp_path / "sales.csv"
    csv.write_text(SALES)
    with client(uploads_stack, "sk-ant-up") as c, client(uploads_stack, "sk-ant-other") as other:
        meta = c.beta.files.upload(file=csv)
        assert meta.id.startswith("file_"), f"a native id: {meta}"
        assert (meta.filename, meta.size_bytes, meta.mime_type, meta.downloadable) == \
            ("sales.csv", len(SALES), "text/csv", False), f"the metadata: {meta}"
        assert c.beta.files.retrieve_metadata(meta.id).filename == "sales.csv", "retrieve_metadata"
        assert [f.id for f in c.beta.files.list()] == [meta.id], "the list"

        msg = c.messages.create(model="claude-e2e", max_tokens=256, tools=[TOOL], messages=[{
            "role": "user", "content": [{"type": "text", "text": "Total per region?"},
                                        {"type": "container_upload", "file_id": meta.id}]}])
        result = msg.content[1]
        assert result.type == "code_execution_tool_result", f"the result block: {msg.content}"
        assert result.content.stdout == "{'north': 150, 'south': 80}\n", f"pandas read the upload: {result}"
        assert msg.content[2].text == "north 150, south 80.", "the final text"

        with pytest.raises(anthropic.BadRequestError) as e:
            other.messages.create(model="claude-e2e", max_tokens=256, tools=[TOOL], messages=[{
                "role": "user", "content": [{"type": "container_upload", "file_id": meta.id}]}])
        assert meta.id in e.value.body["error"]["message"], f"another key: {e.value.body}"
        with pytest.raises(anthropic.NotFoundError):
            other.beta.files.retrieve_metadata(meta.id)

        assert c.beta.files.delete(meta.id).type == "file_deleted", "delete"
    sent = [r for r in model.requests() if r.path == MESSAGES]
    assert len(sent) == 2, "one code round and the final answer; the other key's request never reached the model"
    assert all('"container_upload"' not in r.body for r in sent), "the model never sees the block"
    assert not [r for r in model.requests() if "/files" in r.path], "no Files API call reached the model"
    assert model.pending() == 0, "every scripted answer was used"
