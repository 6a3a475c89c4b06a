"""Jobs across hosts: a Spark standalone cluster whose workers each run in a network
namespace of their own (tests/support/cluster.py: own address, own temp directory, no loopback
path to the driver), the driver a separate process in the test's namespace. Nothing about
tidegate's networking is configured: the driver binds to all interfaces and advertises the
address that routes to the master, slots advertise theirs. Each test compares the committed
output with the reference, record for record."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest

from tests.e2e.cluster_job import launch
from tests.support.cluster import PYSPARK_DAEMON, NamespaceCluster, spark_home
from tests.support.output import committed_lines
from tests.support.references import check_exactly_once
from tests.support.s3 import start_s3_server
from tidegate.runtime.faults import read_fault_log

REPO = Path(__file__).resolve().parents[2]
JOB_TIMEOUT_S = 300

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    started = NamespaceCluster(tmp_path_factory.mktemp("cluster"), workers=2).start()
    yield started
    started.stop()


def _start_job(
    cluster: NamespaceCluster,
    work: Path,
    n: int,
    *extra: str,
    checkpoints: str | None = None,
    log_level: str = "WARNING",
    out: str | None = None,
) -> subprocess.Popen:
    out, checkpoints = out or str(work / "out"), checkpoints or str(work / "chk")
    return launch(
        cluster.master_url, cluster.driver_host, out, checkpoints, n, *extra, log_level=log_level
    )


def _finish(job: subprocess.Popen) -> tuple[int, str]:
    try:
        _, stderr = job.communicate(timeout=JOB_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        job.kill()
        _, stderr = job.communicate()
        raise AssertionError(f"no end within {JOB_TIMEOUT_S} s:\n{stderr[-3000:]}") from None
    return job.returncode, stderr


EXECUTOR = b"CoarseGrainedExecutorBackend"  # an executor JVM's command line
SLOT = PYSPARK_DAEMON


def _completed_checkpoints(checkpoints: Path) -> int:
    """Completed checkpoints the job still retains (the latest, while it runs)."""
    return len(list(checkpoints.glob("*/chk-*/_metadata")))


def test_a_job_spans_two_hosts_exactly_once_through_a_kill_9_of_an_executor_jvm(cluster, tmp_path):
    n = 20_000
    job = _start_job(cluster, tmp_path, n)
    killed: list[tuple[int, float]] = []

    def kill_after_a_checkpoint() -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and job.poll() is None:
            pids = cluster.pids(1, EXECUTOR)
            if pids and _completed_checkpoints(tmp_path / "chk") >= 1:
                os.kill(pids[0], signal.SIGKILL)
                killed.append((pids[0], time.monotonic()))
                return
            time.sleep(0.1)

    killer = threading.Thread(target=kill_after_a_checkpoint, daemon=True)
    killer.start()
    code, stderr = _finish(job)
    killer.join(5)
    assert killed, "the executor was never killed (no checkpoint completed in time?)"
    assert code == 0, stderr[-3000:]
    assert "attempt 0 failed" in stderr  # the kill was noticed and the job restarted
    check_exactly_once(committed_lines(tmp_path / "out"), n, 2)


def test_chaos_loses_a_whole_executor_and_finds_the_committed_output_equal(cluster, tmp_path):
    """`tidegate chaos` on the cluster: after checkpoint 2 a slot SIGKILLs the executor JVM it
    runs under (the whole executor goes, its Python workers with it); the master starts
    another, the job restarts once, and the harness finds both runs' output equal."""
    summary = tmp_path / "summary.json"
    command = [sys.executable, "-m", "tidegate", "chaos", str(CHAOS_JOB), "-p", "2"]
    command += ["--spark-master", cluster.master_url, "--conf", "spark.cores.max=2"]
    command += ["--work-dir", str(tmp_path / "work"), "--json", str(summary)]
    command += ["--kinds", "executor-loss", "--faults", "1", "--schedule", "at:2"]
    done = _run_example(cluster, tmp_path, [*command, "--", "counts", "3000", "1500"])
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    result = json.loads(summary.read_text())
    assert result["faults_injected"] == {"executor-loss": 1}, done.stdout[-2000:]
    (fault,) = [e for e in read_fault_log(str(tmp_path / "work" / "faulty" / "faults.jsonl"))
                if e["event"] == "fault"]  # fmt: skip
    assert re.fullmatch(r"executor JVM \d+ killed", fault["note"]), fault
    assert result["restarts"] == 1
    assert (result["records_lost"], result["records_duplicated"]) == (0, 0)


def test_a_loopback_address_advertised_to_the_cluster_is_refused_naming_the_key(cluster, tmp_path):
    job = _start_job(cluster, tmp_path, 100, "tidegate.network.advertised-host=127.0.0.1")
    code, stderr = _finish(job)
    assert code != 0
    assert "runs executors on other hosts" in stderr
    assert "set tidegate.network.advertised-host" in stderr


def test_a_checkpoint_directory_the_workers_do_not_share_fails_the_job_naming_the_host(
    cluster, tmp_path
):
    # the driver writes into its own cluster.private_dir; each worker has an empty one there
    checkpoints = cluster.private_dir / tmp_path.name
    job = _start_job(cluster, tmp_path, 1_000, checkpoints=str(checkpoints))
    code, stderr = _finish(job)
    assert code != 0
    assert "StorageNotSharedError" in stderr
    assert f"is not the same storage on host vm ({cluster.subnet}.1" in stderr
    assert "attempt 1" not in stderr  # not restarted: the next attempt could not see it either


def test_a_file_sink_path_the_workers_do_not_share_fails_the_job_naming_the_host_and_path(
    cluster, tmp_path
):
    # the checkpoint directory is shared; the sink writes into the driver's own private_dir,
    # where each worker has an empty directory of its own
    out = cluster.private_dir / tmp_path.name / "out"
    code, stderr = _finish(_start_job(cluster, tmp_path, 1_000, out=str(out)))
    assert code != 0
    assert "StorageNotSharedError" in stderr
    assert f"the path {out} of sink 'sink' is not the same storage on host vm (" in stderr
    hosts = [f"on host vm ({cluster.worker_host(i)})" for i in range(1, cluster.workers + 1)]
    assert any(host in stderr for host in hosts), stderr[-3000:]  # a worker's address
    assert "attempt 1" not in stderr  # not restarted: the next attempt could not see it either
    assert list(out.iterdir()) == []  # the driver deleted its check file when the job ended


@pytest.fixture(scope="module")
def cluster_s3(cluster, tmp_path_factory):
    """A private S3-compatible server on the driver's host, listening on its address on the
    hosts' network (one the test assigned)."""
    server = start_s3_server(tmp_path_factory.mktemp("cluster-s3"), host=cluster.driver_host)
    yield server
    server.stop()


def test_checkpoints_and_output_on_s3_reach_every_host_through_the_configuration_keys(
    cluster, cluster_s3, tmp_path
):
    """The documented cluster choice: checkpoints and the FileSink on an S3-compatible server,
    its endpoint and keys only in the job's configuration (nothing in the workers'
    environment), so every slot on every host got them from there. An executor is killed
    mid-run: the new attempt restores from the S3 checkpoint."""
    n = 20_000
    root = cluster_s3.url(f"cluster-{uuid.uuid4().hex[:8]}")
    keys = [f"{k}={v}" for k, v in cluster_s3.configuration().items()]
    job = _start_job(cluster, tmp_path, n, *keys, checkpoints=f"{root}/chk", out=f"{root}/out")
    fs, chk = cluster_s3.filesystems.resolve(f"{root}/chk")
    deadline = time.monotonic() + 120
    while not fs.glob(f"{chk}/*/chk-*/_metadata") and time.monotonic() < deadline:
        assert job.poll() is None, job.communicate()[1][-3000:]
        time.sleep(0.2)
    busy = cluster.slot_hosts()
    assert busy, "no host runs a connected slot"
    os.kill(cluster.pids(busy[0], EXECUTOR)[0], signal.SIGKILL)
    code, stderr = _finish(job)
    assert code == 0, stderr[-3000:]
    assert "attempt 0 failed" in stderr
    lines = committed_lines(f"{root}/out", filesystems=cluster_s3.filesystems)
    check_exactly_once(lines, n, 2)


def test_without_a_checkpoint_directory_a_cluster_job_is_refused(cluster, tmp_path):
    code, stderr = _finish(_start_job(cluster, tmp_path, 100, checkpoints="-"))
    assert code != 0
    assert "the checkpoint directory must be storage every host reaches" in stderr
    assert "execution.checkpointing.dir" in stderr


EXAMPLE = REPO / "examples" / "account_balances.py"
CHAOS_JOB = REPO / "tests" / "e2e" / "chaos_job.py"


def _run_example(cluster: NamespaceCluster, tmp_path: Path, command: list[str]):
    """Run `command` (which ends in the example's arguments, `_example_args`) as a user on
    the driver host would: with the Python the executors run, and the address Spark binds the
    driver to (the host name resolves to loopback on this machine)."""
    env = dict(
        os.environ,
        PYSPARK_PYTHON=sys.executable,
        PYSPARK_DRIVER_PYTHON=sys.executable,
        SPARK_LOCAL_IP=cluster.driver_host,
    )
    return subprocess.run(
        command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=JOB_TIMEOUT_S
    )


def _example_args(root: str) -> list[str]:
    """The example's output and checkpoints under `root` (a path or a URI)."""
    out, checkpoints = f"{root}/out", f"{root}/chk"
    return [
        "--count",
        "4000",
        "--rate",
        "2000",
        "--output",
        str(out),
        "--checkpoints",
        checkpoints,
    ]


def test_spark_submit_runs_the_example_unchanged_across_hosts(cluster, cluster_s3, tmp_path):
    """Its output and checkpoints on S3: URIs, and the S3 keys as the example's --conf."""
    keys = [f"{k}={v}" for k, v in cluster_s3.configuration().items()]
    spark_submit = os.path.join(spark_home(), "bin", "spark-submit")
    command = [spark_submit, "--master", cluster.master_url, "--conf", "spark.cores.max=2"]
    command += [str(EXAMPLE), *_example_args(cluster_s3.url("example-submit"))]
    command += [arg for key in keys for arg in ("--conf", key)]
    done = _run_example(cluster, tmp_path, command)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "verified:" in done.stdout  # the example compares its output with its reference


def test_tidegate_run_with_a_master_and_spark_conf_runs_the_example_across_hosts(
    cluster, cluster_s3, tmp_path
):
    """Its output and checkpoints on S3, the S3 keys as `tidegate run --conf` entries."""
    keys = [f"{k}={v}" for k, v in cluster_s3.configuration().items()]
    command = [sys.executable, "-m", "tidegate", "run", "--spark-master", cluster.master_url]
    command += ["--conf", "spark.cores.max=2", *(arg for key in keys for arg in ("--conf", key))]
    command += ["--status-interval", "0", str(EXAMPLE), "--"]
    done = _run_example(cluster, tmp_path, [*command, *_example_args(cluster_s3.url("ex-run"))])
    assert done.returncode == 0, done.stderr[-3000:]
    assert "verified:" in done.stdout


def test_a_new_driver_resumes_a_killed_drivers_job_rescaled_onto_a_new_host(cluster, tmp_path):
    """The driver (and its JVM) is killed; a new driver of the same job id resumes from the
    job's latest checkpoint at parallelism 3, on a third host that joined meanwhile."""
    n, job_id = 30_000, "resumed-on-three"
    first = _start_job(cluster, tmp_path, n, f"pipeline.job-id={job_id}")
    deadline = time.monotonic() + 120
    while _completed_checkpoints(tmp_path / "chk") < 1 and time.monotonic() < deadline:
        assert first.poll() is None, first.communicate()[1][-3000:]
        time.sleep(0.1)
    time.sleep(1.0)
    os.killpg(first.pid, signal.SIGKILL)
    first.communicate(timeout=30)
    cluster.add_worker()
    second = _start_job(
        cluster,
        tmp_path,
        n,
        f"pipeline.job-id={job_id}",
        "parallelism.default=3",
        f"execution.state-recovery.path={tmp_path / 'chk' / job_id}",
        "spark.cores.max=3",
    )
    code, stderr = _finish(second)
    assert code == 0, stderr[-3000:]
    # what the killed driver's attempt committed plus what the new one did, exactly once (the
    # source's splits were planned at parallelism 2)
    check_exactly_once(committed_lines(tmp_path / "out"), n, 2)


def test_a_second_driver_fences_off_the_first_drivers_slots_on_other_hosts(cluster, tmp_path):
    """Split brain across hosts: driver A's slots freeze on their hosts (A itself lives on, its
    heartbeat timeout long), driver B of the same job id takes the job over on two other hosts
    and finishes it; when A's slots thaw, every write of theirs is refused by the fence and A
    fails for good without deleting anything. A's and B's committed output together are
    exactly once."""
    while cluster.workers < 4:  # A's two executors stay; B needs two of its own
        cluster.add_worker()
    n, job_id = 30_000, "split-brain"
    chk = tmp_path / "chk"
    first = _start_job(
        cluster,
        tmp_path / "a",
        n,
        f"pipeline.job-id={job_id}",
        "heartbeat.timeout=300000",
        checkpoints=str(chk),
    )
    deadline = time.monotonic() + 120
    while _completed_checkpoints(chk) < 1 and time.monotonic() < deadline:
        assert first.poll() is None, first.communicate()[1][-3000:]
        time.sleep(0.1)
    hosts = range(1, cluster.workers + 1)
    frozen = [pid for i in hosts for pid in cluster.forked_python_workers(i)]
    assert len(frozen) == 2, frozen
    for pid in frozen:
        os.kill(pid, signal.SIGSTOP)
    try:
        second = _start_job(
            cluster,
            tmp_path / "b",
            n,
            f"pipeline.job-id={job_id}",
            f"execution.state-recovery.path={chk / job_id}",
            checkpoints=str(chk),
        )
        code, stderr = _finish(second)
        assert code == 0, stderr[-3000:]
    finally:
        for pid in frozen:
            os.kill(pid, signal.SIGCONT)
    code, stderr = _finish(first)
    assert code != 0
    assert "FencedWriterError" in stderr and "belongs to generation" in stderr, stderr[-3000:]
    check_exactly_once(
        committed_lines(tmp_path / "a" / "out") + committed_lines(tmp_path / "b" / "out"), n, 2
    )


def test_restarted_slots_return_to_the_hosts_of_their_task_local_state(cluster, tmp_path):
    """Three executors for two slots, task-local recovery on: after a slot's Python process is
    killed, Spark is asked to place each slot where its local copy is (it would pick two of the
    three executors at random), and both restore their keyed state from that copy."""
    if cluster.workers < 3:
        cluster.add_worker()
    n = 20_000
    job = _start_job(
        cluster,
        tmp_path,
        n,
        "state.backend.local-recovery=true",
        "spark.cores.max=3",
        log_level="INFO",
    )
    deadline = time.monotonic() + 120
    while _completed_checkpoints(tmp_path / "chk") < 1 and time.monotonic() < deadline:
        assert job.poll() is None, job.communicate()[1][-3000:]
        time.sleep(0.1)
    time.sleep(1.0)
    busy = cluster.slot_hosts()
    assert len(busy) == 2, busy
    os.kill(cluster.forked_python_workers(busy[0])[0], signal.SIGKILL)
    code, stderr = _finish(job)
    assert code == 0, stderr[-3000:]
    assert "attempt 0 failed" in stderr
    assert "where its task-local state is" not in stderr, stderr[-3000:]
    restores = re.findall(
        r"restored keyed state: (\d+) file\(s\) from the task-local copy, "
        r"(\d+) from",
        stderr,
    )
    assert len(restores) == 2, stderr[-3000:]
    assert all(int(local) > 0 and int(remote) == 0 for local, remote in restores), restores
    check_exactly_once(committed_lines(tmp_path / "out"), n, 2)


def test_a_cut_off_slot_ends_on_its_own_and_the_job_resumes_when_the_partition_heals(
    cluster, tmp_path
):
    """No spare (two executors for two slots): a slot host is cut off; its slot notices it
    lost the driver within the heartbeat timeout and ends (no connection of it stays open to
    another host), while the driver fails the attempt and waits for slots. Once the link is up
    again the job resumes on the same hosts and commits exactly once."""
    n, timeout_s = 25_000, 5
    job = _start_job(cluster, tmp_path, n, f"heartbeat.timeout={timeout_s * 1000}")
    deadline = time.monotonic() + 120
    while _completed_checkpoints(tmp_path / "chk") < 1 and time.monotonic() < deadline:
        assert job.poll() is None, job.communicate()[1][-3000:]
        time.sleep(0.1)
    busy = cluster.slot_hosts()
    assert busy, "no host runs a connected slot"
    host = busy[0]
    cluster.partition(host)
    cut_at = time.monotonic()
    try:
        ended_after = None
        while time.monotonic() - cut_at < timeout_s + 15:
            if not cluster.remote_connections(host, SLOT):
                ended_after = time.monotonic() - cut_at
                break
            time.sleep(0.2)
        time.sleep(max(0.0, timeout_s + 3 - (time.monotonic() - cut_at)))
        assert job.poll() is None  # still waiting for its slots, not given up
    finally:
        cluster.partition(host, cut=False)
    code, stderr = _finish(job)
    assert ended_after is not None, (
        f"the cut-off slot still holds connections: {cluster.remote_connections(host, SLOT)}"
    )
    assert code == 0, stderr[-3000:]
    assert "attempt 0 failed" in stderr and "heartbeat" in stderr
    check_exactly_once(committed_lines(tmp_path / "out"), n, 2)


def test_a_partitioned_worker_is_replaced_by_a_spare_exactly_once(cluster, tmp_path):
    """Runs last: it adds a third host and leaves the cut-off one's worker behind."""
    cluster.add_worker()  # three hosts, an executor on each, two slots: one spare
    n = 25_000
    job = _start_job(cluster, tmp_path, n, "heartbeat.timeout=5000", "spark.cores.max=3")
    cut: list[tuple[int, float]] = []

    def partition_a_slot_host() -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and job.poll() is None:
            if _completed_checkpoints(tmp_path / "chk") >= 1:
                busy = [i for i in range(1, cluster.workers + 1) if cluster.pids(i, SLOT)]
                if busy:
                    cluster.partition(busy[0])
                    cut.append((busy[0], time.monotonic()))
                    return
            time.sleep(0.1)

    cutter = threading.Thread(target=partition_a_slot_host, daemon=True)
    cutter.start()
    try:
        code, stderr = _finish(job)
    finally:
        cutter.join(5)
        for host, _ in cut:
            cluster.partition(host, cut=False)
    assert cut, "no slot host was partitioned (no checkpoint completed in time?)"
    assert code == 0, stderr[-3000:]
    assert "attempt 0 failed" in stderr and "heartbeat" in stderr
    check_exactly_once(committed_lines(tmp_path / "out"), n, 2)
