"""A Spark standalone cluster whose workers are separate hosts, for multi-host tests.

Each worker runs in a network namespace of its own (`ip netns`), linked by a veth pair to a
bridge in the test's namespace, with its own address and its own temp directory (`TMPDIR`,
Spark's local and work directories): it cannot reach the driver or its peers over loopback,
and what a process writes to "its" temp directory the others do not see. The master and the
driver run in the test's namespace, on the bridge's address. `private_dir` is a path every
host has but none shares: each worker mounts an empty tmpfs of its own there (a mount
namespace of its own), so a checkpoint directory under it is "storage that is not shared".
Everything (master, workers,
namespaces, links) is started here and stopped by PID / deleted on `stop()`, also after a
failed start. Needs root (CI and the dev machines run the tests as root).

Addresses are private (10.x.y.0/24, chosen from the test process's PID) and exist only on the
bridge and in the namespaces: no traffic leaves the machine.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from tidegate.deploy.java import use_java

#: in the command line of pyspark's Python worker daemon (slots run in the processes it forks)
PYSPARK_DAEMON = b"pyspark.daemon"

START_TIMEOUT_S = 90.0


#: ports free_port has handed out in this process (each at most once)
_HANDED_OUT: set[int] = set()
#: the lowest port free_port hands out
_LOWEST_PORT = 15000


def free_port() -> int:
    """A port no process of this machine listens on now, for a test server to bind later.

    Taken below the kernel's ephemeral range: a port the kernel handed out (port 0) is free
    only until it hands it out again, as the local end of any outgoing connection, and a
    server that binds many ports a while after they were chosen (SeaweedFS binds its S3 port
    a minute after start on a slow machine, while its own parts connect to each other) then
    fails with "address already in use". Never the same port twice in one process."""
    ephemeral_low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    rng = random.Random()
    for _ in range(1000):
        port = rng.randrange(_LOWEST_PORT, ephemeral_low)
        if port in _HANDED_OUT:
            continue
        with socket.socket() as s:
            try:
                s.bind(("0.0.0.0", port))
            except OSError:
                continue
        _HANDED_OUT.add(port)
        return port
    raise RuntimeError(f"no free port in [{_LOWEST_PORT}, {ephemeral_low}) after 1000 tries")


def _run(*args: str) -> None:
    subprocess.run(args, check=True, capture_output=True, text=True, timeout=30)


def spark_home() -> str:
    import pyspark

    return os.path.dirname(pyspark.__file__)


@dataclass
class NamespaceCluster:
    """`workers` standalone workers with `cores` cores each, each on its own "host"."""

    work_dir: Path
    workers: int = 2
    cores: int = 1
    memory: str = "1g"
    prefix: str = field(default_factory=lambda: f"tg{os.getpid() % 100000}")
    processes: dict[str, subprocess.Popen] = field(default_factory=dict)
    namespaces: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.private_dir = self.work_dir / "private"
        self.private_dir.mkdir(parents=True, exist_ok=True)
        pid = os.getpid()
        self.subnet = f"10.{200 + pid % 50}.{(pid // 50) % 250}"
        self.bridge = f"{self.prefix}b"
        self.master_port = free_port()
        self.webui_port = free_port()

    @property
    def driver_host(self) -> str:
        """The test namespace's address on the bridge: the master's and the driver's."""
        return f"{self.subnet}.1"

    @property
    def master_url(self) -> str:
        return f"spark://{self.driver_host}:{self.master_port}"

    def worker_host(self, i: int) -> str:
        return f"{self.subnet}.{10 + i}"

    def namespace(self, i: int) -> str:
        return f"{self.prefix}h{i}"

    # lifecycle ----------------------------------------------------------------------------
    def start(self) -> NamespaceCluster:
        try:
            self._bridge()
            self._start_master()
            for i in range(1, self.workers + 1):
                self._host(i)
                self.start_worker(i)
            self.wait_for_workers(self.workers)
        except BaseException:
            self.stop()
            raise
        return self

    def _bridge(self) -> None:
        _run("ip", "link", "add", self.bridge, "type", "bridge")
        _run("ip", "addr", "add", f"{self.driver_host}/24", "dev", self.bridge)
        _run("ip", "link", "set", self.bridge, "up")

    def _host(self, i: int) -> None:
        """Host `i`: its namespace, linked to the bridge by a veth pair, with its address."""
        ns = self.namespace(i)
        _run("ip", "netns", "add", ns)
        self.namespaces.append(ns)
        _run("ip", "link", "add", self.veth(i), "type", "veth", "peer", "name", "eth0", "netns", ns)
        _run("ip", "link", "set", self.veth(i), "master", self.bridge, "up")
        _run("ip", "-n", ns, "addr", "add", f"{self.worker_host(i)}/24", "dev", "eth0")
        _run("ip", "-n", ns, "link", "set", "eth0", "up")
        _run("ip", "-n", ns, "link", "set", "lo", "up")

    def veth(self, i: int) -> str:
        return f"{self.prefix}v{i}"

    def add_worker(self) -> int:
        """Another host with a worker (a spare, or one to scale onto); returns its number."""
        self.workers += 1
        self._host(self.workers)
        self.start_worker(self.workers)
        self.wait_for_workers(self.workers)
        return self.workers

    def pids(self, i: int, marker: bytes = b"") -> list[int]:
        """The processes running on host `i` whose command line contains `marker`."""
        return _pids_in(self.namespace(i), marker)

    def forked_python_workers(self, i: int) -> list[int]:
        """The Python workers pyspark's daemon forked on host `i`: a slot runs in one."""
        pids = self.pids(i, PYSPARK_DAEMON)
        return [p for p in pids if _parent(p) in pids]

    def remote_connections(self, i: int, marker: bytes) -> list[str]:
        """The remote addresses of the established TCP connections that processes on host `i`
        whose command line contains `marker` hold to other hosts (not to loopback)."""
        pids = set(self.pids(i, marker))
        listed = subprocess.run(
            ["ip", "netns", "exec", self.namespace(i), "ss", "-Htnp", "state", "established"],
            capture_output=True,
            text=True,
            check=True,
        )
        remote = []
        for line in listed.stdout.splitlines():
            fields = line.split()
            owners = {int(p) for p in re.findall(r"pid=(\d+)", line)}
            peer = fields[3] if len(fields) > 3 else ""
            if owners & pids and not peer.startswith(("127.", "[::1]", "[::ffff:127.")):
                remote.append(peer)
        return remote

    def slot_hosts(self) -> list[int]:
        """The hosts whose Python workers (slots run in them) hold connections to other hosts:
        the hosts running a connected slot."""
        return [i for i in range(1, self.workers + 1) if self.remote_connections(i, PYSPARK_DAEMON)]

    def partition(self, i: int, cut: bool = True) -> None:
        """Cut host `i` off the network (its link down), or heal it (`cut=False`)."""
        _run("ip", "link", "set", self.veth(i), "down" if cut else "up")

    def _environment(self, tmp: Path) -> dict[str, str]:
        use_java()
        env = {k: v for k, v in os.environ.items() if not k.startswith(("SPARK_", "PYSPARK"))}
        tmp.mkdir(parents=True, exist_ok=True)
        env.update(
            SPARK_HOME=spark_home(),
            TMPDIR=str(tmp),
            SPARK_LOCAL_DIRS=str(tmp),
            PYSPARK_PYTHON=sys.executable,
        )
        return env

    def _spawn(self, name: str, command: list[str], env: dict[str, str]) -> None:
        log = open(self.work_dir / f"{name}.log", "w")  # noqa: SIM115 (the process keeps it)
        self.processes[name] = subprocess.Popen(
            command, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )

    def _start_master(self) -> None:
        env = self._environment(self.work_dir / "master-tmp")
        env["SPARK_MASTER_HOST"] = self.driver_host
        spark_class = os.path.join(spark_home(), "bin", "spark-class")
        self._spawn(
            "master",
            [
                spark_class,
                "org.apache.spark.deploy.master.Master",
                "--host",
                self.driver_host,
                "--port",
                str(self.master_port),
                "--webui-port",
                str(self.webui_port),
            ],
            env,
        )

    def start_worker(self, i: int) -> None:
        """Start worker `i` (1-based) in its namespace (also to add one to a running cluster)."""
        host = self.worker_host(i)
        env = self._environment(self.work_dir / f"worker{i}-tmp")
        env["SPARK_LOCAL_IP"] = host
        spark_class = os.path.join(spark_home(), "bin", "spark-class")
        private = f'mount -t tmpfs tmpfs "{self.private_dir}" && exec "$@"'
        command = ["ip", "netns", "exec", self.namespace(i)]
        command += ["unshare", "--mount", "--propagation", "private", "sh", "-c", private, "sh"]
        command += [spark_class]
        command += ["org.apache.spark.deploy.worker.Worker", "--host", host]
        command += ["--cores", str(self.cores), "--memory", self.memory]
        command += ["--work-dir", str(self.work_dir / f"worker{i}-work"), self.master_url]
        self._spawn(f"worker{i}", command, env)

    def alive_workers(self) -> int:
        url = f"http://{self.driver_host}:{self.webui_port}/json/"
        try:
            with urllib.request.urlopen(url, timeout=2) as answer:
                return int(json.load(answer).get("aliveworkers", 0))
        except (OSError, ValueError):
            return 0

    def wait_for_workers(self, count: int, timeout: float = START_TIMEOUT_S) -> None:
        deadline = time.monotonic() + timeout
        while self.alive_workers() < count:
            for name, process in self.processes.items():
                if process.poll() is not None:
                    log = (self.work_dir / f"{name}.log").read_text()[-3000:]
                    raise RuntimeError(f"spark {name} exited ({process.returncode}):\n{log}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"{count} workers did not register within {timeout:g} s")
            time.sleep(0.5)

    def stop(self) -> None:
        """Stop every process group (SIGTERM, then SIGKILL), then remove the namespaces and the
        bridge."""
        for process in self.processes.values():
            _stop_group(process)
        for ns in self.namespaces:
            for pid in _pids_in(ns):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        # a namespace whose sockets still wait on an unreachable peer (after a partition)
        # lives on in the kernel for a while: delete the links explicitly
        for i in range(1, self.workers + 1):
            subprocess.run(["ip", "link", "del", self.veth(i)], capture_output=True)
        subprocess.run(["ip", "link", "del", self.bridge], capture_output=True)
        self.namespaces.clear()


def _pids_in(namespace: str, marker: bytes = b"") -> list[int]:
    """The processes in network namespace `namespace` whose command line contains `marker`."""
    listed = subprocess.run(["ip", "netns", "pids", namespace], capture_output=True, text=True)
    pids = []
    for pid in map(int, listed.stdout.split()):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:  # it ended meanwhile
            continue
        if marker in cmdline:
            pids.append(pid)
    return pids


def _parent(pid: int) -> int:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):  # it ended meanwhile
        return -1


def _stop_group(process: subprocess.Popen) -> None:
    if process.poll() is not None:
        return
    for sig, wait_s in ((signal.SIGTERM, 15), (signal.SIGKILL, 15)):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, sig)
        try:
            process.wait(wait_s)
            return
        except subprocess.TimeoutExpired:
            continue
