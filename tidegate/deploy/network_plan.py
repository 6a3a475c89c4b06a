"""Where the driver's control server and the slots' data listeners bind, and which address the
driver advertises to its slots: decided from the Spark master and the settings (pure; the
caller looks up the address that routes to the master).

* A local master (`local`, `local[N]`, `local-cluster[...]`, the local runner): everything on
  loopback (`127.0.0.1`), nothing reachable from another host, unless configured otherwise.
* A cluster master (`spark://`, `yarn`, `k8s://`, `mesos://`): bind to all interfaces and
  advertise, in this order, `tidegate.network.advertised-host`, Spark's own `spark.driver.host`
  (when it is not a loopback address), or the address of the interface that routes to the
  master. A slot's plan is all interfaces too, which it narrows to the one interface on which
  it reaches the driver (runtime/slot.py): it binds and advertises that address. A loopback
  address advertised to a cluster is refused, naming the key to set: executors on other hosts
  would dial themselves.
* IPv6: a host with a colon is an IPv6 literal (brackets, as in `spark://[fd00::1]:7077`, are
  accepted and dropped). "All interfaces" is `::` (dual-stack: IPv4 peers connect too) when
  the driver binds or advertises IPv6, else `0.0.0.0`; loopback is `::1` for an IPv6 bind.
  Slots bind all interfaces, or loopback, in the family of the driver's bind.

Every connection is authenticated with the job's secret (runtime/auth.py), so a listener on
all interfaces accepts only the job's own processes (docs/security.md).
"""

from __future__ import annotations

import ipaddress
import socket
from dataclasses import dataclass

from tidegate.common.configuration import ADVERTISED_HOST, BIND_HOST
from tidegate.runtime.addresses import (
    ALL_INTERFACES_V6,
    LOOPBACK,
    is_loopback,
    loopback_of,
    unbracket,
    wildcard_of,
)

__all__ = [
    "ClusterNetworkError",
    "NetworkPlan",
    "is_local_master",
    "master_host",
    "plan_network",
    "route_to_master",
]


class ClusterNetworkError(ValueError):
    """The plan cannot work: the driver would advertise an address executors on other hosts
    cannot reach, or one its listener does not accept."""


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


def master_host(master: str) -> str | None:
    """The host a master URL names: `spark://h:7077` -> `h`, `spark://[fd00::1]:7077` ->
    `fd00::1` (IPv6 in brackets, as in URLs), the first of `spark://h1:7077,h2:7077`,
    `k8s://https://h:6443` -> `h`; None for `yarn` or a URL without a host."""
    if "://" not in master:
        return None
    rest = master.split("://", 1)[1].split("://", 1)[-1]  # k8s://https://host:port
    authority = rest.split("/", 1)[0].split(",", 1)[0].rsplit("@", 1)[-1]
    if authority.startswith("["):
        host = authority[1:].split("]", 1)[0]
    elif authority.count(":") > 1:  # a bare IPv6 literal: no port can be told apart
        host = authority
    else:
        host = authority.split(":", 1)[0]
    return host or None


def route_to_master(master: str) -> str | None:
    """The local address of the interface that routes to `master`'s host (IPv4 or IPv6), None
    if the URL names no host or it does not resolve. A UDP `connect` only consults the
    routing table: nothing is sent."""
    host = master_host(master)
    if host is None:
        return None
    try:
        infos = socket.getaddrinfo(host, 7077, type=socket.SOCK_DGRAM)
        family, _, _, _, address = infos[0]
        with socket.socket(family, socket.SOCK_DGRAM) as probe:
            probe.connect(address)
            return str(probe.getsockname()[0])
    except OSError:
        return None


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
    unknown). Hosts may be IPv6 literals, with or without brackets."""
    bind_host, advertised_host, spark_driver_host, route_host = (
        None if host is None else unbracket(host)
        for host in (bind_host, advertised_host, spark_driver_host, route_host)
    )
    if is_local_master(master):
        bind = bind_host or LOOPBACK
        _check_families(bind, advertised_host)
        slot_bind = loopback_of(bind) if is_loopback(bind) else wildcard_of(bind)
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
    bind = bind_host or wildcard_of(chosen)
    if is_loopback(bind):
        raise ClusterNetworkError(
            f"{BIND_HOST} is {bind}, but the Spark master {master!r} runs executors on other "
            f"hosts: they could not connect. Unset {BIND_HOST} (all interfaces) or set it to "
            f"the address executors reach this host on"
        )
    _check_families(bind, chosen)
    return NetworkPlan(bind, chosen, wildcard_of(bind))


def _check_families(bind: str, advertised: str | None) -> None:
    """Refuse an advertised address the listener cannot accept: an IPv4 one on an IPv6
    listener or the reverse (`::` is dual-stack and accepts both; host names are not
    resolved here)."""
    if advertised is None or bind == ALL_INTERFACES_V6:
        return
    bound, dialled = _ip_version(bind), _ip_version(advertised)
    if bound is not None and dialled is not None and bound != dialled:
        raise ClusterNetworkError(
            f"{BIND_HOST} is {bind} (IPv{bound}), but the driver advertises {advertised} "
            f"(IPv{dialled}) to its slots: they could not connect. Set {BIND_HOST} to "
            f"{ALL_INTERFACES_V6} (IPv4 and IPv6) or {ADVERTISED_HOST} to an IPv{bound} address"
        )


def _ip_version(host: str) -> int | None:
    """4 or 6 for an IP literal, None for a host name."""
    try:
        return ipaddress.ip_address(host).version
    except ValueError:
        return None
