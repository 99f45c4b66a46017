"""client.beta.skills of the anthropic SDK on /v1/skills (issue 29, Skills): Anthropic's shapes when the
call carries anthropic-version, as the SDK always sends it; a skill made from the files of its folder,
given a version, named by a Messages request's container.skills whose code reads its SKILL.md at
/skills/<name>/, then deleted."""

from __future__ import annotations

import anthropic
import pytest

import fake_model as fm
from conftest import Stack
from test_messages import MESSAGES, MODEL, TOOL, answer


def skill_md(desc: str) -> bytes:
    return f"---\nname: py-heron\ndescription: {desc}\n---\nThe bird is a heron.\n".encode()


def test_skills_api_in_anthropic_shapes(stack: Stack, model: fm.FakeModel) -> None:
    with anthropic.Anthropic(base_url=stack.envoy_url, api_key="sk-ant-skills", max_retries=0, timeout=60) as c:
        made = c.beta.skills.create(files=[("py-heron/SKILL.md", skill_md("Knows the bird."), "text/markdown")])
        try:
            assert (made.type, made.display_name, made.source.type, made.latest_version_id) == \
                ("skill", "py-heron", "custom", "1"), f"the skill: {made}"
            assert not made.model_extra, f"no field the SDK does not know: {made.model_extra}"
            assert made.id in [s.id for s in c.beta.skills.list(limit=100).data], "listed"
            assert c.beta.skills.retrieve(made.id).id == made.id, "retrieved"

            v2 = c.beta.skills.versions.create(made.id, files=[("py-heron/SKILL.md", skill_md("Knows the new bird."), "text/markdown")])
            assert (v2.id, v2.type, v2.skill_id, v2.name, v2.description) == \
                ("2", "skill_version", made.id, "py-heron", "Knows the new bird."), f"the version: {v2}"
            assert not v2.model_extra, f"no field the SDK does not know: {v2.model_extra}"
            assert [v.id for v in c.beta.skills.versions.list(made.id).data] == ["2", "1"], "the versions, newest first"
            assert c.beta.skills.versions.retrieve("1", skill_id=made.id).description == "Knows the bird."

            model.script(MESSAGES,
                         fm.ok(answer({"type": "tool_use", "id": "toolu_psk1", "name": "code_execution",
                                       "input": {"code": "print(open('/skills/py-heron/SKILL.md').read(), end='')"}}, usage=(10, 5))),
                         fm.ok(answer({"type": "text", "text": "A heron."}, usage=(20, 3))))
            msg = c.messages.create(model=MODEL, max_tokens=256, tools=[TOOL],
                                    container={"skills": [{"type": "custom", "skill_id": made.id}]},
                                    messages=[{"role": "user", "content": "Which bird?"}])
            result = msg.content[1]
            assert result.type == "code_execution_tool_result", f"the result block: {msg.content}"
            assert result.content.stdout == skill_md("Knows the new bird.").decode(), f"the latest SKILL.md: {result.content}"

            with pytest.raises(anthropic.BadRequestError) as e:
                c.beta.skills.create(files=[("py-heron/SKILL.md", skill_md("x"), "text/markdown")], display_name="Another")
            assert e.value.body["type"] == "error" and e.value.body["error"]["type"] == "invalid_request_error", e.value.body

            deleted_version = c.beta.skills.versions.delete("1", skill_id=made.id)
            assert (deleted_version.id, deleted_version.type) == ("1", "skill_version_deleted"), f"{deleted_version}"
        finally:
            deleted = c.beta.skills.delete(made.id)
        assert (deleted.id, deleted.type) == (made.id, "skill_deleted"), f"deleted: {deleted}"
        with pytest.raises(anthropic.NotFoundError) as e:
            c.beta.skills.retrieve(made.id)
        assert e.value.body["error"]["type"] == "not_found_error", f"a deleted skill: {e.value.body}"
