"""Where the Spark driver of a session tidegate creates binds its own endpoints (its RPC server
and block manager; deploy/spark_session.py): loopback on a local master, unless the user chose."""

from __future__ import annotations

import pytest

from tidegate.deploy.spark_session import loopback_driver_conf

LOOPBACK = {"spark.driver.host": "127.0.0.1", "spark.driver.bindAddress": "127.0.0.1"}


@pytest.mark.parametrize("master", ["local", "local[4]", "local-cluster[2,1,1024]"])
def test_a_local_master_keeps_the_spark_driver_on_loopback(master):
    assert loopback_driver_conf(master, {}, {}) == LOOPBACK


@pytest.mark.parametrize("master", ["spark://10.0.0.1:7077", "yarn", "k8s://https://h:6443", None])
def test_a_cluster_master_or_spark_submits_session_is_left_alone(master):
    assert loopback_driver_conf(master, {}, {}) == {}


@pytest.mark.parametrize(
    ("environ", "conf"),
    [
        ({"SPARK_LOCAL_IP": "10.0.0.5"}, {}),
        ({}, {"spark.driver.host": "10.0.0.5"}),
        ({}, {"spark.driver.bindAddress": "0.0.0.0"}),
    ],
    ids=["SPARK_LOCAL_IP", "driver-host", "bind-address"],
)
def test_an_address_the_user_chose_wins(environ, conf):
    assert loopback_driver_conf("local[2]", environ, conf) == {}
