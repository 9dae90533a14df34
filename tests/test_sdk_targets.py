"""Several api targets: how a target becomes a channel, and which calls gRPC may retry."""

from __future__ import annotations

import json

import pytest

from shardcron.client.errors import InvalidArgument
from shardcron.client.sdk.connection import (
    CREATE_METHODS,
    READ_METHODS,
    channel_target,
    keyed,
    service_config,
    split_targets,
)
from shardcron.client.types import HandlerTask, JobSpec


def test_one_address_is_left_to_grpc_as_given() -> None:
    assert channel_target("db.example:7400") == "db.example:7400"
    assert channel_target(" dns:///db.example:7400 ") == "dns:///db.example:7400"


def test_several_addresses_become_one_static_list() -> None:
    assert channel_target("10.0.0.1:7400, 10.0.0.2:7401,10.0.0.1:7400") == (
        "ipv4:10.0.0.1:7400,10.0.0.2:7401"
    )
    assert channel_target("[::1]:7400,[fe80::1]:7400") == "ipv6:[::1]:7400,[fe80::1]:7400"
    assert channel_target("localhost:7400,127.0.0.2:7400").startswith("ipv4:127.0.0.1:7400,")


@pytest.mark.parametrize(
    "target", [",", "10.0.0.1:7400,no-port", "10.0.0.1:7400,[::1]:7400", "a.invalid:1,b:x"]
)
def test_a_target_that_names_no_usable_address_is_invalid(target: str) -> None:
    with pytest.raises(InvalidArgument) as e:
        channel_target(target)
    assert e.value.field == "target"


def test_split_targets_keeps_order_and_drops_repeats() -> None:
    assert split_targets("b:1,a:1,b:1,") == ["b:1", "a:1"]


def _retried(config: str) -> set[tuple[str, str]]:
    (method_config,) = json.loads(config)["methodConfig"]
    assert method_config["retryPolicy"]["retryableStatusCodes"] == ["UNAVAILABLE"]
    return {(n["service"], n["method"]) for n in method_config["name"]}


def test_reads_are_retried_and_creates_only_on_the_keyed_channel() -> None:
    plain = json.loads(service_config())
    assert plain["loadBalancingConfig"] == [{"round_robin": {}}]
    assert _retried(service_config()) == set(READ_METHODS)
    assert _retried(service_config(retry_creates=True)) == set(READ_METHODS + CREATE_METHODS)


def test_a_create_may_be_retried_only_when_every_job_has_a_key() -> None:
    spec = JobSpec(name="j", task=HandlerTask(name="noop"))
    assert keyed([(spec, "k")])
    assert keyed([(spec, "k1"), (spec, "k2")])
    assert not keyed([(spec, "")])
    assert not keyed([spec])
    assert not keyed([(spec, "k"), spec])
    assert not keyed([])
