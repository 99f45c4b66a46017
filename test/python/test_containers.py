"""client.containers through Envoy and codeinterp: the Containers API (test/e2e/containers_test.go)
as the openai Python SDK sends it: multipart uploads, file_id as a JSON body, downloads byte for
byte, the code finding the uploaded files, and another API key seeing nothing."""

from __future__ import annotations

import os
import uuid

import openai
import pytest

import fake_model as fm
from helpers import output_of


def _key(what: str) -> str:
    return f"sk-{what}-{uuid.uuid4().hex[:8]}"


def test_containers_and_files(make_client, model: fm.FakeModel) -> None:
    key = _key("py-cntr")
    client = make_client(key)
    model.add_file("file-py-notes-" + key, "notes.txt", key, b"from the Files API\n")
    model.add_file("file-py-seed-" + key, "seed.json", key, b'{"seed": 7}')

    made = client.containers.create(name="analysis", file_ids=["file-py-seed-" + key],
                                    expires_after={"anchor": "last_active_at", "minutes": 5}, memory_limit="4g")
    assert made.id.startswith("cntr_"), made
    assert (made.name, made.status, made.memory_limit) == ("analysis", "running", "4g"), made
    assert made.expires_after.minutes == 5, made
    assert client.containers.retrieve(made.id).id == made.id
    assert made.id in [c.id for c in client.containers.list()], "listed"

    blob = os.urandom((1 << 20) + 77)
    up = client.containers.files.create(container_id=made.id, file=("blob.bin", blob))
    assert up.id.startswith("cfile_"), up
    assert (up.path, up.bytes, up.source, up.container_id) == ("/mnt/data/blob.bin", len(blob), "user", made.id), up
    csv = client.containers.files.create(container_id=made.id, file=("data.csv", b"a,b\n1,2\n3,4\n"))

    # file_id without a file: the Python SDK sends JSON {"file_id": ...}.
    by_id = client.containers.files.create(container_id=made.id, file_id="file-py-notes-" + key)
    assert by_id.path == "/mnt/data/notes.txt", by_id
    files_reqs = model.requests("/v1/files/file-py-notes-" + key)
    assert files_reqs and files_reqs[-1].header("Authorization") == f"Bearer {key}", "the Files API is read with the caller's key"

    listed = {f.path: f.id for f in client.containers.files.list(container_id=made.id)}
    assert {"/mnt/data/seed.json", "/mnt/data/blob.bin", "/mnt/data/data.csv", "/mnt/data/notes.txt"} <= set(listed), listed
    assert client.containers.files.retrieve(up.id, container_id=made.id).path == up.path

    assert client.containers.files.content.retrieve(up.id, container_id=made.id).read() == blob, "byte for byte"
    assert client.containers.files.content.retrieve(by_id.id, container_id=made.id).read() == b"from the Files API\n"
    assert client.containers.files.content.retrieve(listed["/mnt/data/seed.json"], container_id=made.id).read() == b'{"seed": 7}'

    # The code runs in the container the API made and finds the files by their names.
    model.script(fm.RESPONSES,
                 fm.ok(fm.responses(fm.run_code("call_read", "print(open('/mnt/data/data.csv').read().count('\\n'), open('/mnt/data/notes.txt').read().strip())"))),
                 fm.ok(fm.responses(fm.message("Read."))))
    resp = client.responses.create(model=fm.MODEL, input="read the files",
                                   tools=[{"type": "code_interpreter", "container": made.id}])
    reqs = model.requests(fm.RESPONSES)
    assert len(reqs) == 2, reqs
    assert output_of(reqs[1], "call_read") == "3 from the Files API\n"
    assert resp.output[0].container_id == made.id, resp.output[0]

    client.containers.files.delete(csv.id, container_id=made.id)
    with pytest.raises(openai.NotFoundError):
        client.containers.files.retrieve(csv.id, container_id=made.id)
    client.containers.delete(made.id)
    assert client.containers.retrieve(made.id).status == "expired", "a deleted container is remembered as expired"
    with pytest.raises(openai.BadRequestError) as e:
        client.containers.files.create(container_id=made.id, file=("x.txt", b"x"))
    assert e.value.code == "container_expired", e.value.body


def test_containers_tenants(make_client, model: fm.FakeModel) -> None:
    owner_key = _key("py-owner")
    owner, other = make_client(owner_key), make_client(_key("py-other"))
    model.add_file("file-py-own-" + owner_key, "own.txt", owner_key, b"mine")
    made = owner.containers.create(name="private")
    up = owner.containers.files.create(container_id=made.id, file=("secret.txt", b"secret"))

    assert made.id not in [c.id for c in other.containers.list()], "another key lists nothing of it"
    calls = {
        "retrieve": lambda: other.containers.retrieve(made.id),
        "list files": lambda: other.containers.files.list(container_id=made.id),
        "upload": lambda: other.containers.files.create(container_id=made.id, file=("x.txt", b"x")),
        "retrieve a file": lambda: other.containers.files.retrieve(up.id, container_id=made.id),
        "download": lambda: other.containers.files.content.retrieve(up.id, container_id=made.id),
        "delete a file": lambda: other.containers.files.delete(up.id, container_id=made.id),
        "delete": lambda: other.containers.delete(made.id),
    }
    for name, call in calls.items():
        with pytest.raises(openai.NotFoundError):
            call()
            pytest.fail(f"{name} as another key must be a 404")

    theirs = other.containers.create(name="theirs")
    with pytest.raises(openai.BadRequestError) as e:
        other.containers.files.create(container_id=theirs.id, file_id="file-py-own-" + owner_key)
    assert e.value.code == "file_not_found", e.value.body

    assert owner.containers.files.content.retrieve(up.id, container_id=made.id).read() == b"secret"
    owner.containers.delete(made.id)
    other.containers.delete(theirs.id)


def test_containers_errors(make_client) -> None:
    client = make_client(_key("py-errors"))
    with pytest.raises(openai.BadRequestError) as e:
        client.containers.create(name="x", expires_after={"anchor": "last_active_at", "minutes": 21})
    assert e.value.code == "integer_above_max_value", e.value.body
    with pytest.raises(openai.NotFoundError):
        client.containers.retrieve("cntr_" + "0" * 48)
    made = client.containers.create(name="x")
    with pytest.raises(openai.BadRequestError) as e:
        client.containers.files.create(container_id=made.id, file_id="file-nobody-has")
    assert e.value.code == "file_not_found", e.value.body
    client.containers.delete(made.id)


def test_containers_refuse_a_key_the_upstream_refuses(make_client, model: fm.FakeModel) -> None:
    good, bad = _key("py-known"), _key("py-made-up")
    model.add_key(good)
    for _ in range(3):
        with pytest.raises(openai.AuthenticationError) as e:
            make_client(bad).containers.create(name="x")
        assert e.value.status_code == 401
        assert e.value.code == "invalid_api_key", e.value.body
    made = make_client(good).containers.create(name="x")
    make_client(good).containers.delete(made.id)
    asked = [r.header("Authorization") for r in model.requests("/v1/models")]
    assert asked.count("Bearer " + bad) == 1, asked
    assert asked.count("Bearer " + good) == 1, asked
