"""Where the driver's control server and the slots' data listeners bind, and which address the
driver advertises to its slots: decided from the Spark master and the settings (pure; the
caller looks up the address that routes to the master).

* A local master (`local`, `local[N]`, `local-cluster[...]`, the local runner): everything on
  loopback (`127.0.0.1`), nothing reachable from another host, unless configured otherwise.
* A cluster master (`spark://`, `yarn`, `k8s://`, `mesos://`): bind to all interfaces and
  advertise, in this order, `tidegate.network.advertised-host`, Spark's own `spark.driver.host`
  (when it is not a loopback address), or the address of the interface that routes to the
  master. Slots bind to all interfaces too and advertise the interface on which they reach the
  driver. A loopback address advertised to a cluster is refused, naming the key to set:
  executors on other hosts would dial themselves.

Every connection is authenticated with the job's secret (runtime/auth.py), so a listener on
all interfaces accepts only the job's own processes.
"""

from __future__ import annotations

import ipaddress
import socket
from dataclasses import dataclass

from tidegate.common.configuration import ADVERTISED_HOST, BIND_HOST

__all__ = [
    "ClusterNetworkError",
    "NetworkPlan",
    "is_local_master",
    "plan_network",
    "route_to_master",
]

LOOPBACK = "127.0.0.1"
ALL_INTERFACES = "0.0.0.0"


class ClusterNetworkError(ValueError):
    """The driver would advertise an address executors on other hosts cannot reach."""


@dataclass(frozen=True)
class NetworkPlan:
    #: where the driver's control server binds
    driver_bind: str
    #: the host slots dial to reach the driver (None: the bound address itself)
    advertised_host: str | None
    #: where every slot's data listener binds
    slot_bind: str


def is_local_master(master: str | None) -> bool:
    """Whether `master` runs everything on this host (None: tidegate's embedded local[N])."""
    return master is None or master == "local" or master.startswith(("local[", "local-cluster["))


def route_to_master(master: str) -> str | None:
    """The local address of the interface that routes to `master`'s host (`spark://h:p`,
    `k8s://https://h:p`), None if the URL names no host or it does not resolve. A UDP
    `connect` only consults the routing table: nothing is sent."""
    rest = master.split("://", 1)[1] if "://" in master else ""
    rest = rest.split("://", 1)[-1]  # k8s://https://host:port
    host = rest.split("/", 1)[0].split(",", 1)[0].rsplit(":", 1)[0].strip("[]")
    if not host:
        return None
    try:
        infos = socket.getaddrinfo(host, 7077, type=socket.SOCK_DGRAM)
        family, _, _, _, address = infos[0]
        with socket.socket(family, socket.SOCK_DGRAM) as probe:
            probe.connect(address)
            return probe.getsockname()[0]
    except OSError:
        return None


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def plan_network(
    master: str | None,
    *,
    bind_host: str | None,
    advertised_host: str | None,
    spark_driver_host: str | None,
    route_host: str | None,
) -> NetworkPlan:
    """The plan for a job on `master` (module docstring). `bind_host` / `advertised_host`:
    the configured keys (None: unset); `spark_driver_host`: the session's `spark.driver.host`;
    `route_host`: the local address of the interface that routes to the master (None if
    unknown)."""
    if is_local_master(master):
        bind = bind_host or LOOPBACK
        slot_bind = LOOPBACK if is_loopback(bind) else ALL_INTERFACES
        return NetworkPlan(bind, advertised_host, slot_bind)
    chosen = advertised_host
    if chosen is None and spark_driver_host and not is_loopback(spark_driver_host):
        chosen = spark_driver_host
    if chosen is None:
        chosen = route_host
    if chosen is None or is_loopback(chosen):
        raise ClusterNetworkError(
            f"the Spark master {master!r} runs executors on other hosts, but the driver would "
            f"advertise {chosen or 'no address'!s} to them, which they cannot reach: set "
            f"{ADVERTISED_HOST} (or spark.driver.host) to an address of this host that the "
            "executors can reach"
        )
    bind = bind_host or ALL_INTERFACES
    if is_loopback(bind):
        raise ClusterNetworkError(
            f"{BIND_HOST} is {bind}, but the Spark master {master!r} runs executors on other "
            f"hosts: they could not connect. Unset {BIND_HOST} (all interfaces) or set it to "
            f"the address executors reach this host on"
        )
    return NetworkPlan(bind, chosen, ALL_INTERFACES)
