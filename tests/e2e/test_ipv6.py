"""IPv6 end to end: with `tidegate.network.bind-host` an IPv6 address, the driver's control
server and every slot's data listener listen on IPv6, the slots reach the driver and each other
over it (their advertised data addresses are `::1`), and a job with a failure and a restart
commits exactly the reference output. `::` is the dual-stack wildcard; `::1` the loopback. A
slot listens only on the address it advertises, never on the wildcard."""

from __future__ import annotations

import pytest

from tests.e2e.jobs import count_job
from tests.support.ipv6 import requires_ipv6
from tests.support.output import committed_lines
from tests.support.references import check_exactly_once
from tests.support.sockets import listening_sockets
from tests.support.waiting import resolved, wait_for_checkpoints, wait_until
from tidegate.common.configuration import ADVERTISED_HOST, BIND_HOST

N = 20_000


@requires_ipv6
@pytest.mark.parametrize(
    ("bind", "advertised"),
    [("::1", None), ("::", "::1")],
    ids=["ipv6-loopback", "dual-stack-wildcard"],
)
def test_a_job_whose_driver_and_slots_talk_ipv6_commits_exactly_the_reference(
    spark, tmp_path, bind, advertised
):
    config = {BIND_HOST: bind} | ({ADVERTISED_HOST: advertised} if advertised else {})
    env = count_job(
        tmp_path / "out",
        tmp_path / "chk",
        runner="spark",
        n=N,
        rate=10_000,
        fail_at={0: 3_000},  # one restart: the second attempt connects over IPv6 again
        configuration=config,
    )
    client = env.execute_async(f"ipv6 {bind}")
    jm = client.jobmaster
    wait_until(lambda: jm.stats.restarts == 1, "the restart", job=client)
    wait_for_checkpoints(client, 1)
    # each slot listens only on the address it advertises (::1), even when the plan is `::`
    slots = listening_sockets(set(jm.slot_pids.values()))
    assert {(s.host, s.port) for s in slots} == set(jm.slot_addresses.values())
    resolved(client.get_job_execution_result(), "the job to finish", timeout=300)
    assert jm.stats.restarts == 1
    assert jm.server.address[0] == bind
    # a slot advertises its end of the control connection: ::1 means both ran over IPv6
    assert {host for host, _port in jm.slot_addresses.values()} == {"::1"}
    check_exactly_once(committed_lines(tmp_path / "out"), N, 2)
