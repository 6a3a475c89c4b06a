"""The driver's network plan (deploy/network_plan.py): loopback on a local master, all
interfaces and a reachable advertised address on a cluster, and a clear refusal of a loopback
address advertised to a cluster."""

from __future__ import annotations

import pytest

from tidegate.deploy.network_plan import (
    ClusterNetworkError,
    NetworkPlan,
    is_local_master,
    plan_network,
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
