"""Account balances: a stateful, exactly-once tidegate job that checks its own output.

A generated stream of bank transactions is keyed by account. A KeyedProcessFunction keeps each
account's running balance (and how many transactions it has applied) in keyed ValueState and
writes one line per transaction, plus ALERT lines, to an exactly-once FileSink. Checkpoints are
taken every second. When the job has finished, the script recomputes what the output must be
with plain Python and compares, record for record.

    .venv/bin/python examples/account_balances.py                        # local Spark, ~30 s
    .venv/bin/python examples/account_balances.py --kill-worker-after 8  # kill -9 a worker
    .venv/bin/python examples/account_balances.py --runner local         # no JVM
    .venv/bin/tidegate chaos examples/account_balances.py -- --no-check  # under faults

Output lines (amounts and balances in dollars, exact to the cent):

    txn_id,account,amount,balance,n          n = the account's n-th transaction (1, 2, ...)
    ALERT,overdrawn,txn_id,account,amount,balance,time         the balance went below zero
    ALERT,large-withdrawal,txn_id,account,amount,balance,time  a withdrawal of 2,000.00+

Press Ctrl-C to cancel: checkpoints are retained on cancellation, and the script prints the
command that resumes the job from the latest one (the resumed job appends to the same output,
which is then verified as a whole).
"""

from __future__ import annotations

import argparse
import collections
import logging
import os
import posixpath
import re
import signal
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime

from tidegate.common import Configuration, Encoder, JobExecutionException, RestartStrategies
from tidegate.common.filesystems import FileSystems
from tidegate.datastream import (
    CheckpointingMode,
    ExternalizedCheckpointRetention,
    KeyedProcessFunction,
    StreamExecutionEnvironment,
)
from tidegate.datastream.connectors.datagen import DataGeneratorSource
from tidegate.datastream.connectors.file_system import BucketAssigner, FileSink, OutputFileConfig
from tidegate.datastream.state import ValueStateDescriptor

NUM_ACCOUNTS = 1_000
OPENING_BALANCE = 1_000_00  # cents: every account opens with 1,000.00
LARGE_WITHDRAWAL = 2_000_00  # cents
EPOCH_MS = 1_735_689_600_000  # 2025-01-01T00:00:00Z; transaction i happens i * 50 ms later
SEED = 0x7469646567617465
_MASK = (1 << 64) - 1


# --- the data --------------------------------------------------------------------------------
def _mix64(x: int) -> int:
    """splitmix64's finalizer: a deterministic pseudo-random 64-bit value for each index."""
    x = (x + 0x9E3779B97F4A7C15) & _MASK
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK
    return x ^ (x >> 31)


def transaction(index: int) -> tuple[int, int, int, int]:
    """Transaction `index` as (txn_id, account, amount in cents, timestamp in epoch ms).

    62% deposits of 1.00-900.00, 37.9% withdrawals of 1.00-600.00, 0.1% large withdrawals of
    2,000.00-5,000.00. A pure function of the index: the job and the check below both call it.
    """
    h = _mix64(index ^ SEED)
    account = h % NUM_ACCOUNTS
    kind = (h >> 10) % 1000
    size = h >> 20
    if kind < 620:
        amount = 100 + size % 90_000
    elif kind < 999:
        amount = -(100 + size % 60_000)
    else:
        amount = -(LARGE_WITHDRAWAL + size % 300_000)
    return index, account, amount, EPOCH_MS + index * 50


def dollars(cents: int) -> str:
    """Exact decimal text for an amount in cents: -1234 -> '-12.34'."""
    sign = "-" if cents < 0 else ""
    return f"{sign}{abs(cents) // 100}.{abs(cents) % 100:02d}"


def cents(text: str) -> int:
    whole, _, frac = text.partition(".")
    value = int(whole.lstrip("-")) * 100 + int(frac)
    return -value if text.startswith("-") else value


# --- the job ---------------------------------------------------------------------------------
class AccountBalance(KeyedProcessFunction):
    """Applies each transaction to its account's balance, kept in keyed state."""

    def open(self, runtime_context) -> None:
        self.balance = runtime_context.get_state(ValueStateDescriptor("balance"))
        self.count = runtime_context.get_state(ValueStateDescriptor("count"))

    def process_element(self, value, ctx):
        txn_id, account, amount, timestamp_ms = value
        before = self.balance.value()
        if before is None:  # the account's first transaction
            before = OPENING_BALANCE
        after = before + amount
        n = (self.count.value() or 0) + 1
        self.balance.update(after)
        self.count.update(n)
        yield f"{txn_id},{account},{dollars(amount)},{dollars(after)},{n}"
        alerts = []
        if before >= 0 > after:
            alerts.append("overdrawn")
        if amount <= -LARGE_WITHDRAWAL:
            alerts.append("large-withdrawal")
        for kind in alerts:
            when = datetime.fromtimestamp(timestamp_ms / 1000, UTC).isoformat(timespec="seconds")
            yield f"ALERT,{kind},{txn_id},{account},{dollars(amount)},{dollars(after)},{when}"


def build_job(args: argparse.Namespace) -> tuple[StreamExecutionEnvironment, DataGeneratorSource]:
    conf = Configuration().set_string("execution.runner", args.runner).add_all(args.conf)
    if args.spark_master:
        conf.set_string("spark.master", args.spark_master)
    if args.from_checkpoint:
        conf.set_string("execution.state-recovery.path", args.from_checkpoint)
    env = StreamExecutionEnvironment.get_execution_environment(conf)
    env.set_parallelism(args.parallelism)
    env.enable_checkpointing(1000, CheckpointingMode.EXACTLY_ONCE)
    checkpoint_config = env.get_checkpoint_config()
    checkpoint_config.set_checkpoint_storage_dir(args.checkpoints)
    checkpoint_config.set_externalized_checkpoint_retention(
        ExternalizedCheckpointRetention.RETAIN_ON_CANCELLATION
    )
    env.set_restart_strategy(RestartStrategies.fixed_delay_restart(3, 1000))

    source = DataGeneratorSource(transaction, count=args.count, records_per_second=args.rate)
    sink = (
        FileSink.for_row_format(args.output, Encoder.simple_string_encoder())
        .with_bucket_assigner(BucketAssigner.base_path_bucket_assigner())
        .with_output_file_config(OutputFileConfig.builder().with_part_suffix(".csv").build())
        .build()
    )
    (
        env.from_source(source, None, "transactions")
        .uid("transactions")
        .key_by(lambda txn: txn[1])
        .process(AccountBalance())
        .uid("balances")
        .name("account balances")
        .sink_to(sink)
        .uid("balances-sink")
    )
    return env, source


# --- driving it: progress, an optional kill -9, cancellation ---------------------------------
def report_progress(client, stop: threading.Event) -> None:
    jm, started = client.jobmaster, time.monotonic()
    while not stop.wait(5.0):
        s = jm.stats
        print(
            f"  {time.monotonic() - started:5.1f}s  {jm.status.name:<10} "
            f"{s.records_read:>7} generated since (re)start  {s.records_per_s:5.0f}/s  "
            f"{s.completed_checkpoints} checkpoints  {s.restarts} restarts",
            flush=True,
        )


def kill_a_worker(client, after_s: float, killed: list) -> None:
    """`after_s` seconds after the job started running, once a checkpoint completed, SIGKILL
    one slot's worker process (a Python worker of the Spark barrier stage, or a local slot
    process)."""
    jm, started = client.jobmaster, None
    while not jm.done.is_set():
        if started is None and jm.status.name == "RUNNING":
            started = time.monotonic()
        ready = (
            started is not None
            and time.monotonic() - started >= after_s
            and jm.stats.completed_checkpoints >= 1
            and jm.status.name == "RUNNING"
        )
        if ready:
            break
        time.sleep(0.05)
    else:
        print("  [kill] the job ended before a worker could be killed", flush=True)
        return
    slot, pid = max(jm.slot_pids.items())
    restarts, checkpoint = jm.stats.restarts, jm.stats.last_checkpoint
    os.kill(pid, signal.SIGKILL)
    killed_at = time.monotonic()
    killed.append((slot, pid))
    print(
        f"  [kill] SIGKILL to slot {slot} (pid {pid}), {killed_at - started:.1f}s after the job "
        f"started running; latest completed checkpoint: chk-{checkpoint.checkpoint_id}",
        flush=True,
    )
    while not jm.done.is_set():
        if jm.stats.restarts > restarts and jm.status.name == "RUNNING":
            print(
                f"  [kill] recovered: attempt {jm.attempt} running, restored from "
                f"chk-{jm.stats.restored_from}, {time.monotonic() - killed_at:.1f}s after the kill",
                flush=True,
            )
            return
        time.sleep(0.05)


def source_parallelism(client) -> int:
    graph = client.jobmaster.spec.graph
    return next(v.parallelism for v in graph.vertices.values() if v.is_source)


def run(env: StreamExecutionEnvironment, args: argparse.Namespace) -> tuple[object, list]:
    client = env.execute_async("account balances")
    spec = client.jobmaster.spec  # `tidegate run` options may have overridden the script's
    print(
        f"job {client.get_job_id()} submitted ({spec.runner} runner, parallelism "
        f"{source_parallelism(client)}, {args.count} transactions at {args.rate:g}/s)",
        flush=True,
    )
    stop, killed = threading.Event(), []
    threading.Thread(target=report_progress, args=(client, stop), daemon=True).start()
    if args.kill_worker_after is not None:
        threading.Thread(
            target=kill_a_worker, args=(client, args.kill_worker_after, killed), daemon=True
        ).start()
    result = client.get_job_execution_result()
    try:
        while True:
            try:
                result.result(timeout=0.5)
                break
            except TimeoutError:
                continue
    except JobExecutionException as e:
        print(f"the job failed: {e}", file=sys.stderr)
        if e.detail:
            print(e.detail, file=sys.stderr)
        sys.exit(2)
    except KeyboardInterrupt:
        stop.set()
        print("\ncancelling ...", flush=True)
        client.cancel().result(timeout=120)
        job_dir = os.path.join(args.checkpoints, client.get_job_id())
        latest = client.jobmaster.stats.last_checkpoint
        if latest is None:
            print("cancelled before the first checkpoint completed; nothing to resume from")
        else:
            print(f"cancelled; checkpoints retained in {job_dir} (latest: {latest.path})")
            print("resume with:")
            print(
                f"  {sys.executable} {sys.argv[0]} --runner {spec.runner} --count {args.count} "
                f"--rate {args.rate:g} --parallelism {source_parallelism(client)} "
                f"--output {args.output} --checkpoints {args.checkpoints} "
                f"--from-checkpoint {job_dir}"
                + (" and the same --conf entries" if args.conf else "")
            )
        sys.exit(130)
    finally:
        stop.set()
    return client, killed


# --- the check -------------------------------------------------------------------------------
def committed_lines(output: str, filesystems: FileSystems) -> list[str]:
    """Lines of the committed part files. In-progress files are hidden (their names start
    with '.') and become visible only when the checkpoint that covers them completes."""
    fs, root = filesystems.resolve(output)
    lines = []
    for path in sorted(fs.find(root)) if fs.exists(root) else []:
        if not posixpath.basename(path).startswith("."):
            text = fs.cat_file(path).decode("utf-8")
            lines.extend(text.splitlines())
    return lines


def verify(lines: list[str], count: int, source: DataGeneratorSource, parallelism: int):
    """Compare the committed output with a plain-Python reference; return (problems, alerts).

    The balance after a transaction depends on the order in which the account's transactions
    were applied, and that order is not deterministic: with parallelism p the source has p
    readers, each emitting a contiguous range of indices in order, and an account receives
    transactions from all of them, interleaved as the network delivers them. So the check is
    exact about everything that must not vary, and checks the order for validity:

    1. the multiset of (txn_id, account, amount) equals the reference: nothing lost,
       nothing duplicated, nothing altered;
    2. per account, the counts n are exactly 1..k: every transaction changed the state once;
    3. in the order given by n, each balance is the previous balance plus the amount (from
       the opening balance), and the transactions of each source reader appear in that
       reader's order (a channel is FIFO, so any other order means state was replayed wrongly);
    4. ALERT lines are exactly those implied: a large-withdrawal alert for each reference
       transaction of 2,000.00 or more, an overdrawn alert where the balance crossed below zero.
    """
    problems: list[str] = []
    rows: dict[int, tuple[int, int, int, int]] = {}  # txn_id -> (account, amount, balance, n)
    seen: collections.Counter = collections.Counter()
    alerts: collections.Counter = collections.Counter()
    for line in lines:
        fields = line.split(",")
        if fields[0] == "ALERT":
            alerts[(fields[1], int(fields[2]))] += 1
            continue
        txn_id, account, amount, balance, n = fields
        seen[int(txn_id)] += 1
        rows[int(txn_id)] = (int(account), cents(amount), cents(balance), int(n))

    # 1. exactly the reference transactions
    expected = {i: transaction(i) for i in range(count)}
    lost = sorted(set(expected) - set(seen))
    duplicated = sorted(t for t, c in seen.items() if c > 1)
    unknown = sorted(set(seen) - set(expected))
    altered = sorted(
        t
        for t, (account, amount, _, _) in rows.items()
        if t in expected and (account, amount) != expected[t][1:3]
    )
    for what, ids in (
        ("lost", lost),
        ("duplicated", duplicated),
        ("unexpected", unknown),
        ("altered", altered),
    ):
        if ids:
            problems.append(f"{len(ids)} transactions {what}, e.g. txn ids {ids[:10]}")

    # 2 and 3. per account: counts 1..k, a valid running balance, each reader's order kept
    readers = [range(s.next_index, s.stop) for s in source.create_splits(parallelism)]
    by_account = collections.defaultdict(list)
    for txn_id, (account, amount, balance, n) in rows.items():
        by_account[account].append((n, txn_id, amount, balance))
    expected_alerts = collections.Counter(
        ("large-withdrawal", t)
        for t, (_, _, amount, _) in expected.items()
        if amount <= -LARGE_WITHDRAWAL
    )
    for account, applied in sorted(by_account.items()):
        applied.sort()
        counts = [n for n, *_ in applied]
        if counts != list(range(1, len(applied) + 1)):
            problems.append(f"account {account}: counts {counts[:12]}... are not 1..{len(applied)}")
            continue
        previous = OPENING_BALANCE
        for n, txn_id, amount, balance in applied:
            if balance != previous + amount:
                problems.append(
                    f"account {account}: transaction {n} (txn {txn_id}) took the balance from "
                    f"{dollars(previous)} by {dollars(amount)} to {dollars(balance)}"
                )
                break
            if previous >= 0 > balance:
                expected_alerts[("overdrawn", txn_id)] += 1
            previous = balance
        for reader in readers:
            order = [txn_id for _, txn_id, _, _ in applied if txn_id in reader]
            if order != sorted(order):
                problems.append(f"account {account}: transactions of one reader out of order")

    # 4. alerts
    if alerts != expected_alerts:
        missing = sorted((expected_alerts - alerts).elements())
        extra = sorted((alerts - expected_alerts).elements())
        problems.append(f"alerts differ: missing {missing[:5]}, unexpected {extra[:5]}")
    return problems, alerts, len(lost), len(duplicated)


# --- main ------------------------------------------------------------------------------------
def prepare_output(output: str, filesystems: FileSystems) -> None:
    """Start from an empty output directory, refusing to delete anything FileSink did not write
    (part files, in progress or committed, and the check files of a run that did not end)."""
    fs, root = filesystems.resolve(output)
    if not fs.exists(root):
        return
    ours = re.compile(r"\.?part-\d+-\d+-\d+\.csv(\.inprogress)?|\.storage-check-\w+")
    files = fs.find(root)
    foreign = [path for path in files if not ours.fullmatch(posixpath.basename(path))]
    if foreign:
        sys.exit(
            f"refusing to clear {output}: it holds files this example did not write, "
            f"e.g. {foreign[0]}; pass another --output"
        )
    fs.rm(root, recursive=True)


def _configuration_entry(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key, value


def output_filesystems(args: argparse.Namespace) -> FileSystems:
    """The filesystem options of the job's configuration (s3.endpoint, ...), for reading the
    output here as the job writes it: --conf entries and `tidegate run --conf` ones."""
    cli = StreamExecutionEnvironment.cli_overrides.get("configuration") or {}
    return FileSystems.from_configuration(Configuration().add_all(args.conf).add_all(cli))


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    base = os.path.join(tempfile.gettempdir(), "tidegate-account-balances")
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--count", type=int, default=60_000, help="transactions (default 60000)")
    p.add_argument("--rate", type=float, default=2_500, help="transactions/s (default 2500)")
    p.add_argument("--parallelism", type=int, default=2, help="default 2")
    p.add_argument("--runner", choices=["spark", "local"], default="spark")
    p.add_argument("--spark-master", help="default: an embedded local[N] session")
    p.add_argument(
        "--output",
        default=os.path.join(base, "output"),
        help="output directory or URI (s3://bucket/out), cleared at start (default %(default)s)",
    )
    p.add_argument(
        "--checkpoints",
        default=os.path.join(base, "checkpoints"),
        help="checkpoint directory or URI (default %(default)s)",
    )
    p.add_argument(
        "--conf",
        metavar="KEY=VALUE",
        type=_configuration_entry,
        action="append",
        default=[],
        help="a configuration entry for the job (repeatable), e.g. s3.endpoint=http://h:8333",
    )
    p.add_argument(
        "--kill-worker-after",
        type=float,
        metavar="SECONDS",
        help="SIGKILL one slot's worker process SECONDS after the job started running "
        "(and after at least one completed checkpoint)",
    )
    p.add_argument(
        "--no-check",
        action="store_true",
        help="skip the check of the committed output (`tidegate chaos` compares it itself: "
        "it moves the output elsewhere)",
    )
    p.add_argument(
        "--from-checkpoint",
        metavar="PATH",
        help="resume a cancelled run from a retained checkpoint (keeps the output)",
    )
    args = p.parse_args(argv)
    args.conf = dict(args.conf)
    # local paths absolute (the job may run elsewhere than here); URIs as given
    args.output, args.checkpoints = (
        path if "://" in path else os.path.abspath(path) for path in (args.output, args.checkpoints)
    )
    remote = (
        args.runner == "spark" and args.spark_master and not args.spark_master.startswith("local")
    )
    if args.kill_worker_after is not None and remote:
        p.error(
            "--kill-worker-after kills a local process: use it with local Spark or --runner local"
        )
    return args


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.WARNING, format="  [%(name)s] %(message)s")
    args = parse_args(argv)
    # `tidegate run --from-checkpoint` restores through the environment's CLI overrides
    resuming = args.from_checkpoint or StreamExecutionEnvironment.cli_overrides.get("restore_path")
    filesystems = output_filesystems(args)
    if not resuming:
        prepare_output(args.output, filesystems)
    started = time.monotonic()
    env, source = build_job(args)
    client, killed = run(env, args)
    elapsed = time.monotonic() - started
    stats = client.jobmaster.stats
    print(
        f"job finished in {elapsed:.1f}s: {stats.completed_checkpoints} checkpoints, "
        f"{stats.restarts} restarts; output in {args.output}",
        flush=True,
    )

    if args.no_check:
        return 0
    lines = committed_lines(args.output, filesystems)
    parallelism = source_parallelism(client)
    problems, alerts, lost, duplicated = verify(lines, args.count, source, parallelism)
    kinds = collections.Counter(kind for kind, _ in alerts.elements())
    recovered = (
        f"{len(killed)} worker killed and recovered" if killed else f"{stats.restarts} restarts"
    )
    summary = (
        f"{args.count} transactions, {lost} lost, {duplicated} duplicated, "
        f"{sum(alerts.values())} alerts ({kinds['overdrawn']} overdrawn, "
        f"{kinds['large-withdrawal']} large withdrawals), {recovered}"
    )
    if problems:
        print(f"FAILED: {summary}", file=sys.stderr)
        for problem in problems[:20]:
            print(f"  {problem}", file=sys.stderr)
        return 1
    print(f"verified: {summary}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
