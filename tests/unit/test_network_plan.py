"""The driver's network plan (deploy/network_plan.py): loopback on a local master, all
interfaces and a reachable advertised address on a cluster, and a clear refusal of a loopback
address advertised to a cluster; IPv6 literals alike, in the family of the driver's bind."""

from __future__ import annotations

import pytest

from tests.support.ipv6 import requires_ipv6
from tidegate.deploy.network_plan import (
    ClusterNetworkError,
    NetworkPlan,
    is_local_master,
    master_host,
    plan_network,
    route_to_master,
)


def _plan(master, **kw):
    settings = {"bind_host": None, "advertised_host": None, "spark_driver_host": None}
    settings.update(kw)
    settings.setdefault("route_host", "10.0.0.5")
    return plan_network(master, **settings)


@pytest.mark.parametrize("master", [None, "local", "local[4]", "local-cluster[2,1,1024]"])
def test_a_local_master_keeps_everything_on_loopback(master):
    assert is_local_master(master)
    assert _plan(master) == NetworkPlan("127.0.0.1", None, "127.0.0.1")
    # a configured wildcard bind opens the slots too (a hand-made cluster of local processes)
    assert _plan(master, bind_host="0.0.0.0").slot_bind == "0.0.0.0"


@pytest.mark.parametrize("master", ["spark://10.0.0.1:7077", "yarn", "k8s://https://api:6443"])
def test_a_cluster_binds_all_interfaces_and_advertises_the_route_to_the_master(master):
    assert not is_local_master(master)
    assert _plan(master) == NetworkPlan("0.0.0.0", "10.0.0.5", "0.0.0.0")


def test_the_advertised_address_is_the_setting_then_spark_driver_host_then_the_route():
    master = "spark://10.0.0.1:7077"
    assert _plan(master, advertised_host="driver.example").advertised_host == "driver.example"
    assert _plan(master, spark_driver_host="10.0.0.9").advertised_host == "10.0.0.9"
    # Spark's default driver host is the host name, which often resolves to loopback
    assert _plan(master, spark_driver_host="127.0.1.1").advertised_host == "10.0.0.5"


def test_a_loopback_address_advertised_to_a_cluster_is_refused_naming_the_key():
    master = "spark://10.0.0.1:7077"
    with pytest.raises(ClusterNetworkError, match=r"tidegate\.network\.advertised-host"):
        _plan(master, advertised_host="127.0.0.1")
    with pytest.raises(ClusterNetworkError, match="no address"):
        _plan(master, route_host=None)
    with pytest.raises(ClusterNetworkError, match=r"tidegate\.network\.bind-host is 127\.0\.0\.1"):
        _plan(master, bind_host="127.0.0.1")


@pytest.mark.parametrize(
    ("master", "host"),
    [
        ("spark://10.0.0.1:7077", "10.0.0.1"),
        ("spark://master.example:7077", "master.example"),
        ("spark://[fd00::1]:7077", "fd00::1"),
        ("spark://[fd00::1]:7077,[fd00::2]:7077", "fd00::1"),
        ("spark://m1:7077,m2:7077", "m1"),
        ("k8s://https://[fd00::10]:6443", "fd00::10"),
        ("k8s://https://api.example:6443/path", "api.example"),
        ("k8s://api.example", "api.example"),
        ("mesos://zk://zk1:2181/mesos", "zk1"),
        ("spark://fd00::1", "fd00::1"),  # unbracketed: the whole authority is the host
        ("yarn", None),
        ("spark://", None),
    ],
)
def test_the_host_of_a_master_url_is_read_with_ipv6_literals_in_brackets(master, host):
    assert master_host(master) == host


@requires_ipv6
def test_an_ipv6_master_is_routed_through_the_ipv6_loopback():
    assert route_to_master("spark://[::1]:7077") == "::1"
    assert route_to_master("spark://127.0.0.1:7077") == "127.0.0.1"
    assert route_to_master("yarn") is None


@pytest.mark.parametrize("bind", ["::1", "[::1]"])
def test_an_ipv6_loopback_bind_on_a_local_master_keeps_the_slots_on_ipv6_loopback(bind):
    assert _plan("local[2]", bind_host=bind) == NetworkPlan("::1", None, "::1")


def test_the_ipv6_wildcard_on_a_local_master_opens_the_slots_on_every_interface_both_families():
    assert _plan("local[2]", bind_host="::") == NetworkPlan("::", None, "::")
    assert _plan(None, bind_host="::", advertised_host="::1") == NetworkPlan("::", "::1", "::")


def test_an_ipv6_route_to_the_master_binds_dual_stack_and_advertises_the_ipv6_address():
    master = "spark://[fd00::1]:7077"
    assert _plan(master, route_host="fd00::5") == NetworkPlan("::", "fd00::5", "::")
    # Spark's own driver host, as Spark writes IPv6 hosts in URLs
    assert _plan(master, spark_driver_host="[fd00::9]").advertised_host == "fd00::9"
    loopback_driver_host = _plan(master, spark_driver_host="::1", route_host="fd00::5")
    assert loopback_driver_host.advertised_host == "fd00::5"
    # an IPv4 route keeps the IPv4 wildcard; `::` by hand serves both families
    assert _plan("spark://10.0.0.1:7077").driver_bind == "0.0.0.0"
    assert _plan("spark://10.0.0.1:7077", bind_host="::") == NetworkPlan("::", "10.0.0.5", "::")
    # a specific IPv6 bind: the slots bind the IPv6 wildcard
    assert _plan(master, bind_host="fd00::5", route_host="fd00::5").slot_bind == "::"


def test_an_ipv6_loopback_is_refused_on_a_cluster_like_an_ipv4_one():
    master = "spark://[fd00::1]:7077"
    with pytest.raises(ClusterNetworkError, match=r"would advertise ::1"):
        _plan(master, advertised_host="[::1]")
    with pytest.raises(ClusterNetworkError, match=r"tidegate\.network\.bind-host is ::1"):
        _plan(master, bind_host="::1", route_host="fd00::5")


def test_an_advertised_address_of_the_other_family_than_the_bind_is_refused_naming_both_keys():
    with pytest.raises(ClusterNetworkError) as error:
        _plan("spark://[fd00::1]:7077", bind_host="0.0.0.0", route_host="fd00::5")
    message = str(error.value)
    assert "tidegate.network.bind-host is 0.0.0.0 (IPv4)" in message
    assert "advertises fd00::5 (IPv6)" in message
    assert "tidegate.network.advertised-host" in message
    with pytest.raises(ClusterNetworkError, match=r"is ::1 \(IPv6\).*127\.0\.0\.1 \(IPv4\)"):
        _plan("local[2]", bind_host="::1", advertised_host="127.0.0.1")
    # host names are not resolved here: they pass
    assert _plan("local[2]", bind_host="::1", advertised_host="localhost").slot_bind == "::1"
