"""Skill writes: validation, revisions, delete; and the races they must survive."""

from __future__ import annotations

import threading
import time

import pytest
from django.db import IntegrityError, connection, transaction
from django.db.utils import DatabaseError
from django.utils import timezone

from gateways.models import Gateway
from skills.exceptions import SkillInvalid
from skills.models import Skill, SkillReference, SkillRevision
from skills.services import (
    MAX_INCLUDES,
    MAX_TOOLS,
    skill_create,
    skill_delete,
    skill_revision_create,
    skills_refresh_for_gateway,
)
from tests import factories
from tools.models import Tool


@pytest.mark.django_db
def test_create_writes_revision_one_and_its_references(tenant, catalog):
    catalog("gw", ["a", "b"])
    author = factories.UserFactory()
    skill = skill_create(
        tenant=tenant, name="acme/web", tools=["gw__a", "gw__b"], author=author
    )
    assert skill.revision_number == 1
    revision = skill.current_revision
    assert (revision.tools, revision.includes, revision.author) == (
        ["gw__a", "gw__b"],
        [],
        author,
    )
    assert sorted(
        SkillReference.objects.filter(revision=revision).values_list("kind", "target")
    ) == [("tool", "gw__a"), ("tool", "gw__b")]
    assert str(revision) == "acme/web@1"


@pytest.mark.django_db
def test_new_revision_numbers_up_and_identical_content_writes_nothing(
    tenant, catalog, make_skill
):
    catalog("gw", ["a", "b"])
    skill = make_skill("acme/web", ["gw__a"])
    skill, created = skill_revision_create(skill=skill, tools=["gw__a", "gw__b"])
    assert created and skill.revision_number == 2
    skill, created = skill_revision_create(skill=skill, tools=["gw__a", "gw__b"])
    assert not created and skill.revision_number == 2
    assert list(
        SkillRevision.objects.filter(skill=skill).values_list("number", flat=True)
    ) == [1, 2]
    # Older revisions keep what they said.
    assert SkillRevision.objects.get(skill=skill, number=1).tools == ["gw__a"]


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("name", "tools", "includes", "field", "fragment"),
    [
        ("NoSlash", [], [], "name", "namespace/name"),
        ("Acme/Upper", [], [], "name", "namespace/name"),
        ("a/b/c", [], [], "name", "namespace/name"),
        ("a/" + "x" * 129, [], [], "name", "namespace/name"),
        ("a/ok", ["no-separator"], [], "tools", "not a valid qualified tool name"),
        ("a/ok", ["gw__bad name"], [], "tools", "not a valid qualified tool name"),
        ("a/ok", ["gw__a\x00"], [], "tools", "not a valid qualified tool name"),
        ("a/ok", ["gw__" + "t" * 129], [], "tools", "not a valid qualified tool name"),
        ("a/ok", ["__tool"], [], "tools", "not a valid qualified tool name"),
        ("a/ok", ["gw__a", "gw__a"], [], "tools", "listed twice"),
        ("a/ok", [7], [], "tools", "Expected a string"),
        ("a/ok", "gw__a", [], "tools", "Expected a list"),
        ("a/ok", [], ["not a name"], "includes", "not a valid skill name"),
        ("a/ok", [], ["a/ok"], "includes", "cannot include itself"),
        ("a/ok", [f"gw__t{i}" for i in range(MAX_TOOLS + 1)], [], "tools", "At most"),
        (
            "a/ok",
            [],
            [f"a/s{i}" for i in range(MAX_INCLUDES + 1)],
            "includes",
            "At most",
        ),
    ],
)
def test_invalid_content_is_rejected_and_nothing_written(
    tenant, name, tools, includes, field, fragment
):
    with pytest.raises(SkillInvalid) as caught:
        skill_create(tenant=tenant, name=name, tools=tools, includes=includes)
    assert caught.value.status == 422
    details = caught.value.details
    assert any(
        fragment in message
        for path, messages in details.items()
        if path == field or path.startswith(f"{field}.")
        for message in messages
    ), details
    assert not Skill.objects.exists()
    assert not SkillRevision.objects.exists()


@pytest.mark.django_db
def test_invalid_revision_leaves_the_skill_as_it_was(tenant, make_skill):
    skill = make_skill("acme/web", [])
    with pytest.raises(SkillInvalid):
        skill_revision_create(skill=skill, tools=["bad ref"])
    assert SkillRevision.objects.filter(skill=skill).count() == 1


@pytest.mark.django_db
def test_duplicate_name_in_a_tenant_is_rejected_but_allowed_elsewhere(
    tenant, make_skill
):
    make_skill("acme/web", [])
    with pytest.raises(SkillInvalid) as caught:
        make_skill("acme/web", [])
    assert "already exists" in caught.value.details["name"][0]
    other = factories.TenantFactory(slug="elsewhere")
    assert make_skill("acme/web", [], tenant_=other).tenant == other


@pytest.mark.django_db
def test_delete_recomputes_the_includers(tenant, catalog, make_skill):
    catalog("gw", ["a"])
    base = make_skill("lib/base", ["gw__a"])
    make_skill("app/top", [], ["lib/base"])
    skill_delete(skill=base)
    top = Skill.objects.get(name="app/top")
    assert top.status == "failed"
    assert top.error == "missing include: lib/base (included by app/top)"
    assert not SkillReference.objects.filter(skill_id=base.pk).exists()


@pytest.mark.django_db
def test_revision_rows_refuse_updates_in_python(tenant, make_skill):
    revision = make_skill("acme/web", []).current_revision
    revision.tools = ["gw__x"]
    with pytest.raises(ValueError, match="immutable"):
        revision.save()


@pytest.mark.postgres
@pytest.mark.django_db
def test_database_refuses_revision_updates_and_gaps(tenant, make_skill):
    skill = make_skill("acme/web", ["gw__a"])
    with pytest.raises(DatabaseError, match="immutable"), transaction.atomic():
        SkillRevision.objects.filter(skill=skill).update(tools=["gw__x"])
    with pytest.raises(DatabaseError, match="immutable"), transaction.atomic():
        SkillReference.objects.filter(skill=skill).update(target="x")
    with pytest.raises(DatabaseError, match="no revision 2"), transaction.atomic():
        SkillRevision.objects.create(skill=skill, number=3)
    with pytest.raises(IntegrityError), transaction.atomic():
        SkillRevision.objects.create(skill=skill, number=1)


# -- races (real threads against PostgreSQL) ------------------------------------


def _in_thread(target, errors: list[BaseException]):
    def run() -> None:
        try:
            target()
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            errors.append(exc)
        finally:
            connection.close()

    thread = threading.Thread(target=run)
    thread.start()
    return thread


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_concurrent_revisions_stay_gap_free(tenant):
    skill = skill_create(tenant=tenant, name="acme/busy", tools=[])
    errors: list[BaseException] = []
    start = threading.Barrier(8)

    def revise(i: int):
        def go() -> None:
            start.wait()
            skill_revision_create(
                skill=Skill.objects.get(pk=skill.pk), tools=[f"gw__t{i}"]
            )

        return go

    threads = [_in_thread(revise(i), errors) for i in range(8)]
    for thread in threads:
        thread.join(30)
    assert not errors
    numbers = list(
        SkillRevision.objects.filter(skill=skill).values_list("number", flat=True)
    )
    assert numbers == list(range(1, 10))
    skill.refresh_from_db()
    assert skill.revision_number == 9


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_concurrent_creates_of_one_name_make_one_skill(tenant):
    errors: list[BaseException] = []
    start = threading.Barrier(4)

    def create() -> None:
        start.wait()
        skill_create(tenant=tenant, name="acme/once", tools=[])

    threads = [_in_thread(create, errors) for _ in range(4)]
    for thread in threads:
        thread.join(30)
    assert Skill.objects.filter(name="acme/once").count() == 1
    assert len(errors) == 3 and all(isinstance(e, SkillInvalid) for e in errors)


def _deactivate(gateway: Gateway, name: str) -> None:
    Tool.objects.filter(gateway=gateway, name=name).update(
        active=False, deactivated_at=timezone.now()
    )


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_two_gateway_refreshes_of_one_skill_see_each_others_changes(tenant, catalog):
    """The later skills step waits for the earlier's commit, then reads it."""
    one = catalog("one", ["a", "keep"])
    two = catalog("two", ["b", "keep"])
    skill_create(tenant=tenant, name="acme/both", tools=["one__a", "two__b"])
    first_wrote = threading.Event()
    errors: list[BaseException] = []

    def first() -> None:
        with transaction.atomic():
            Gateway.objects.select_for_update().get(pk=one.pk)
            _deactivate(one, "a")
            skills_refresh_for_gateway(gateway=one, run_id=None)
            first_wrote.set()
            time.sleep(0.5)  # the second one runs now and must wait for us

    def second() -> None:
        assert first_wrote.wait(10)
        with transaction.atomic():
            Gateway.objects.select_for_update().get(pk=two.pk)
            _deactivate(two, "b")
            skills_refresh_for_gateway(gateway=two, run_id=None)

    threads = [_in_thread(first, errors), _in_thread(second, errors)]
    for thread in threads:
        thread.join(30)
    assert not errors
    skill = Skill.objects.get(name="acme/both")
    assert skill.status == "failed"
    assert skill.missing == ["one__a", "two__b"]


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_revision_written_during_an_apply_reads_the_applied_catalog(tenant, catalog):
    """A skill write cannot slip between an apply's skills step and its commit."""
    gateway = catalog("gw", ["t", "u"])
    catalog("other", ["x"])
    skill = skill_create(tenant=tenant, name="acme/late", tools=["other__x"])
    stepped = threading.Event()
    errors: list[BaseException] = []

    def apply() -> None:
        with transaction.atomic():
            Gateway.objects.select_for_update().get(pk=gateway.pk)
            _deactivate(gateway, "t")
            # The skill does not name this gateway yet: nothing to refresh.
            assert (
                skills_refresh_for_gateway(gateway=gateway, run_id=None)["refreshed"]
                == []
            )
            stepped.set()
            time.sleep(0.5)

    def revise() -> None:
        assert stepped.wait(10)
        skill_revision_create(
            skill=Skill.objects.get(pk=skill.pk), tools=["other__x", "gw__t"]
        )

    threads = [_in_thread(apply, errors), _in_thread(revise, errors)]
    for thread in threads:
        thread.join(30)
    assert not errors
    skill.refresh_from_db()
    assert (skill.status, skill.missing) == ("failed", ["gw__t"])
