"""factory_boy factories for the domain models."""

from __future__ import annotations

import factory
from django.contrib.auth import get_user_model

from gateways.models import Gateway, Membership, Tenant
from refresh.models import RefreshRun
from refresh.normalize import spec_hash
from tools.models import Tool, ToolRevision


class TenantFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Tenant
        django_get_or_create = ("slug",)

    slug = factory.Sequence(lambda n: f"tenant-{n}")
    name = factory.LazyAttribute(lambda o: o.slug.title())


class UserFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = get_user_model()
        django_get_or_create = ("username",)

    username = factory.Sequence(lambda n: f"user{n}")
    email = factory.LazyAttribute(lambda o: f"{o.username}@example.com")
    password = factory.django.Password("pw-for-tests")


class MembershipFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Membership

    user = factory.SubFactory(UserFactory)
    tenant = factory.SubFactory(TenantFactory)
    role = "viewer"


class GatewayFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Gateway

    tenant = factory.SubFactory(TenantFactory)
    name = factory.Sequence(lambda n: f"Gateway {n}")
    prefix = factory.Sequence(lambda n: f"gw{n}")
    transport = Gateway.Transport.STREAMABLE_HTTP
    url = "http://127.0.0.1:9/mcp"


def _tool_spec(o: Tool) -> dict:
    return {"name": o.name, "description": o.description, "inputSchema": o.input_schema}


class ToolFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Tool
        skip_postgeneration_save = True

    gateway = factory.SubFactory(GatewayFactory)
    name = factory.Sequence(lambda n: f"tool_{n}")
    description = factory.LazyAttribute(lambda o: f"Does {o.name}.")
    input_schema = factory.LazyFunction(lambda: {"type": "object"})
    spec_hash = factory.LazyAttribute(lambda o: spec_hash(_tool_spec(o)))
    current_revision = 1

    @factory.post_generation
    def revision(obj: Tool, create: bool, extracted: object, **kwargs: object) -> None:
        if create and obj.current_revision >= 1:
            for number in range(1, obj.current_revision + 1):
                ToolRevision.objects.create(
                    tool=obj,
                    number=number,
                    spec=obj.server_spec(),
                    spec_hash=obj.spec_hash,
                )


class ToolRevisionFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = ToolRevision

    tool = factory.SubFactory(ToolFactory, current_revision=0)
    number = 1
    spec = factory.LazyAttribute(lambda o: o.tool.server_spec())
    spec_hash = factory.LazyAttribute(lambda o: spec_hash(o.spec))


class RefreshRunFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = RefreshRun

    gateway = factory.SubFactory(GatewayFactory)
    trigger = RefreshRun.Trigger.API
