"""client.beta.files / client.files of the anthropic SDK on the container file ids a Messages answer
names (cfile_…): Envoy routes them to codeinterp, which serves their metadata and bytes to their
owner and the native 404 to anyone else (issue 24, item 4)."""

from __future__ import annotations

import anthropic
import pytest

import fake_model as fm
from conftest import Stack
from test_messages import MESSAGES, TOOL, answer

REPORT = "city,temp\nParis,21\nOslo,12\n"


def client(stack: Stack, key: str) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=stack.envoy_url, api_key=key, max_retries=0, timeout=60)


def test_download_an_output_file(stack: Stack, model: fm.FakeModel) -> None:
    code = f"open('/mnt/data/report.csv', 'w').write({REPORT!r})\nprint('saved')"
    model.script(MESSAGES,
                 fm.ok(answer({"type": "tool_use", "id": "toolu_pf1", "name": "code_execution",
                               "input": {"code": code}}, usage=(10, 5))),
                 fm.ok(answer({"type": "text", "text": "Saved."}, usage=(20, 3))))
    with client(stack, "sk-ant-files") as c, client(stack, "sk-ant-other") as other:
        msg = c.messages.create(model="claude-e2e", max_tokens=256, tools=[TOOL],
                                messages=[{"role": "user", "content": "Write a report."}])
        result = msg.content[1]
        assert result.type == "code_execution_tool_result", f"the result block: {msg.content}"
        file_id = result.content.content[0].file_id
        assert file_id.startswith("cfile_"), f"the result names the file: {result}"

        meta = c.beta.files.retrieve_metadata(file_id)
        assert (meta.id, meta.filename, meta.size_bytes, meta.mime_type) == \
            (file_id, "report.csv", len(REPORT), "text/csv"), f"the metadata: {meta}"
        assert meta.downloadable, "downloadable"
        assert c.beta.files.download(file_id).read() == REPORT.encode(), "the bytes the code wrote"
        assert c.files.download(file_id).read() == REPORT.encode(), "the GA service reads them too"

        with pytest.raises(anthropic.NotFoundError) as e:
            other.beta.files.retrieve_metadata(file_id)
        assert e.value.body["error"]["type"] == "not_found_error", f"another key: {e.value.body}"
        with pytest.raises(anthropic.NotFoundError):
            other.beta.files.download(file_id)

        deleted = c.beta.files.delete(file_id)
        assert (deleted.id, deleted.type) == (file_id, "file_deleted"), f"deleted: {deleted}"
        with pytest.raises(anthropic.NotFoundError):
            c.beta.files.download(file_id)
    assert not [r for r in model.requests() if "/files/" in r.path], "no Files API call reached the model"
