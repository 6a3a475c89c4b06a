"""The JDBC sinks: their pure parts (placeholders, URLs, gids, restore decisions), then each
writer and committer against the session's private PostgreSQL server: batching, retries after
a lost connection, prepare / commit / roll back, the recovery of a dead writer's prepared
transactions, and the errors a user gets for a bad URL, bad SQL or a server without prepared
transactions."""

from __future__ import annotations

import threading
import time
import uuid

import psycopg
import pytest

from tests.support.waiting import wait_until
from tidegate.common import Row, Types
from tidegate.connectors.base import UsesJobId
from tidegate.connectors.jdbc.exactly_once import PreparedTransactionCommittable
from tidegate.connectors.jdbc.gids import (
    CommitOutcome,
    Gid,
    commit_outcome,
    format_gid,
    parse_gid,
    to_roll_back,
)
from tidegate.connectors.jdbc.options import libpq_conninfo
from tidegate.connectors.jdbc.statements import JdbcStatement, to_psycopg
from tidegate.connectors.jdbc.transactions import MARKER_TABLE, create_marker_table
from tidegate.datastream.connectors.jdbc import (
    JdbcConnectionOptions,
    JdbcExactlyOnceOptions,
    JdbcExecutionOptions,
    JdbcSink,
)

PAIR = Types.ROW([Types.STRING(), Types.LONG()])


# placeholders ---------------------------------------------------------------------------------
def test_question_marks_become_psycopg_placeholders_outside_strings_identifiers_and_comments():
    assert to_psycopg("INSERT INTO t VALUES (?, ?)") == ("INSERT INTO t VALUES (%s, %s)", 2)
    sql = (
        "INSERT INTO \"we?ird\" (a, b, c) VALUES (?, 'it''s ?', E'\\' ?', $$ ? $$, "
        "$tag$ ? $tag$, ?) -- a ? comment\n /* a ? /* nested ? */ comment */ RETURNING ?"
    )
    query, count = to_psycopg(sql)
    assert count == 3
    assert query == sql.replace("(?,", "(%s,").replace("$tag$, ?)", "$tag$, %s)").replace(
        "RETURNING ?", "RETURNING %s"
    )


def test_percent_signs_are_escaped_and_double_question_marks_are_the_jsonb_operator():
    assert to_psycopg("SELECT 'a%' LIKE ? AND d ?? 'k' AND x % 2 = ?") == (
        "SELECT 'a%%' LIKE %s AND d ? 'k' AND x %% 2 = %s",
        2,
    )


def test_an_unterminated_string_is_refused():
    with pytest.raises(ValueError, match="unterminated ' quote"):
        to_psycopg("INSERT INTO t VALUES ('oops, ?)")


def test_the_statement_needs_one_placeholder_per_field_and_records_of_that_many_fields():
    with pytest.raises(ValueError, match=r"1 \? placeholder.*2 field"):
        JdbcStatement.of("INSERT INTO t VALUES (?)", PAIR)
    with pytest.raises(TypeError, match=r"Types\.ROW"):
        JdbcStatement.of("INSERT INTO t VALUES (?)", Types.STRING())
    statement = JdbcStatement.of("INSERT INTO t VALUES (?, ?)", PAIR)
    assert statement.parameters([Row("a", 1), ("b", 2), ["c", 3]]) == [
        ("a", 1),
        ("b", 2),
        ("c", 3),
    ]
    with pytest.raises(TypeError, match="Row or tuple of 2 field"):
        statement.parameters(["a,1"])


# options --------------------------------------------------------------------------------------
def test_jdbc_urls_become_libpq_connection_strings():
    info = libpq_conninfo(
        "jdbc:postgresql://db.example:5433/shop?ssl=true&ApplicationName=app", "u", "p"
    )
    assert set(info.split()) == {
        "host=db.example",
        "port=5433",
        "dbname=shop",
        "sslmode=require",
        "application_name=app",
        "user=u",
        "password=p",
        "connect_timeout=10",
    }
    assert "dbname=x" in libpq_conninfo("postgresql://h/x")
    with pytest.raises(ValueError, match="'prepareThreshold' is not supported"):
        libpq_conninfo("jdbc:postgresql://h/x?prepareThreshold=5")
    with pytest.raises(ValueError, match="PostgreSQL only"):
        JdbcConnectionOptions.JdbcConnectionOptionsBuilder().with_url("jdbc:mysql://h/x").build()
    with pytest.raises(ValueError, match=r"org\.postgresql\.Driver"):
        JdbcConnectionOptions.JdbcConnectionOptionsBuilder().with_driver_name("com.mysql.Driver")
    options = (
        JdbcConnectionOptions.JdbcConnectionOptionsBuilder()
        .with_url("jdbc:postgresql://h:1/x")
        .with_driver_name("org.postgresql.Driver")
        .with_user_name("u")
        .with_password("secret")
        .build()
    )
    assert (options.get_db_url(), options.get_user_name(), options.get_password()) == (
        "jdbc:postgresql://h:1/x",
        "u",
        "secret",
    )
    assert "secret" not in repr(options)


def test_execution_and_exactly_once_options_have_flinks_defaults_and_check_their_values():
    defaults = JdbcExecutionOptions.defaults()
    assert (defaults.get_batch_size(), defaults.get_batch_interval_ms()) == (5000, 0)
    assert defaults.get_max_retries() == 3
    built = (
        JdbcExecutionOptions.builder()
        .with_batch_size(10)
        .with_batch_interval_ms(200)
        .with_max_retries(0)
        .build()
    )
    assert (built.batch_size, built.batch_interval_ms, built.max_retries) == (10, 200, 0)
    with pytest.raises(ValueError, match="with_batch_size"):
        JdbcExecutionOptions.builder().with_batch_size(0).build()
    assert JdbcExactlyOnceOptions.defaults().get_max_commit_attempts() == 3
    with pytest.raises(ValueError, match="with_max_commit_attempts"):
        JdbcExactlyOnceOptions.builder().with_max_commit_attempts(0).build()


# gids and restore decisions -------------------------------------------------------------------
def test_gids_name_job_writer_attempt_checkpoint_and_nonce_and_parse_back():
    gid = Gid("a:b", 3, 1, 42, "n0")
    assert format_gid(gid) == "tidegate:a:b:3:1:42:n0"
    assert parse_gid(format_gid(gid)) == gid
    assert parse_gid("tidegate:job:x:1:2:n") is None  # writer not a number
    assert parse_gid("someone-else:1") is None
    with pytest.raises(ValueError, match="at most 199 bytes"):
        format_gid(Gid("j" * 190, 0, 0, 1, "n"))


def test_a_restore_rolls_back_only_the_unrestored_gids_of_its_jobs_and_writer_indexes():
    def g(job, writer, checkpoint):
        return format_gid(Gid(job, writer, 0, checkpoint, "n"))

    prepared = [
        g("old", 0, 5),  # restored: committed next
        g("old", 0, 6),  # after the restored checkpoint: rolled back
        g("old", 1, 6),  # another writer index at parallelism 2
        g("old", 2, 6),  # a writer index gone after a scale-down from 3 to 2: subtask 0's
        g("new", 0, 7),
        g("other", 0, 6),  # another job: never touched
        "not-ours",
    ]
    chosen = to_roll_back(prepared, ["new", "old"], 0, 2, [g("old", 0, 5)])
    assert chosen == sorted([g("old", 0, 6), g("old", 2, 6), g("new", 0, 7)])
    assert to_roll_back(prepared, ["old"], 1, 2, []) == [g("old", 1, 6)]


def test_an_unknown_gid_is_already_committed_only_if_its_marker_exists():
    assert commit_outcome(True, True) is CommitOutcome.COMMITTED
    assert commit_outcome(False, True) is CommitOutcome.ALREADY_COMMITTED
    assert commit_outcome(False, False) is CommitOutcome.LOST


# against the server ---------------------------------------------------------------------------
@pytest.fixture
def db(postgres_server):
    conn = psycopg.connect(postgres_server.url, autocommit=True)
    yield conn
    conn.close()


@pytest.fixture
def table(db):
    name = f"t_{uuid.uuid4().hex[:8]}"
    db.execute(f"CREATE TABLE {name} (k text PRIMARY KEY, v bigint NOT NULL)")
    return name


def _options(url: str) -> JdbcConnectionOptions:
    """The test server's superuser (a JDBC URL names no user)."""
    builder = JdbcConnectionOptions.JdbcConnectionOptionsBuilder().with_url(url)
    return builder.with_user_name("postgres").build()


def _rows(db, table: str) -> dict[str, int]:
    return dict(db.execute(f"SELECT k, v FROM {table}").fetchall())


def _prepared(db, job_id: str) -> list[str]:
    rows = db.execute("SELECT gid FROM pg_prepared_xacts WHERE gid LIKE %s", (f"%:{job_id}:%",))
    return sorted(r[0] for r in rows.fetchall())


def test_the_at_least_once_writer_flushes_by_size_interval_and_checkpoint(
    postgres_server, db, table
):
    execution = JdbcExecutionOptions.builder().with_batch_size(3).with_batch_interval_ms(100)
    sink = JdbcSink.sink(
        f"INSERT INTO {table} (k, v) VALUES (?, ?)",
        PAIR,
        _options(postgres_server.jdbc_url),
        execution.build(),
    )
    assert isinstance(sink, UsesJobId)
    writer = sink.create_writer(0, 1, 0)
    try:
        writer.write_batch([("a", 1), ("b", 2), ("c", 3)])  # the batch size: written at once
        assert _rows(db, table) == {"a": 1, "b": 2, "c": 3}
        writer.write_batch([("d", 4)])
        wait_until(lambda: "d" in _rows(db, table), "the timed flush", timeout=10)
        writer.write_batch([Row("e", 5)])
        assert writer.prepare_commit(1) == []
        assert _rows(db, table)["e"] == 5
    finally:
        writer.close()


def test_a_batch_is_retried_on_a_new_connection_after_the_old_one_is_killed(
    postgres_server, db, table
):
    sink = JdbcSink.sink(
        f"INSERT INTO {table} (k, v) VALUES (?, ?)", PAIR, _options(postgres_server.url)
    )
    writer = sink.create_writer(0, 1, 0)
    try:
        writer.write_batch([("a", 1)])
        writer.prepare_commit(1)
        db.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
        writer.write_batch([("b", 2)])
        writer.prepare_commit(2)
        assert _rows(db, table) == {"a": 1, "b": 2}
    finally:
        writer.close()


def test_bad_sql_a_missing_table_and_a_constraint_fail_with_the_statement_and_no_retry(
    postgres_server, table
):
    options = _options(postgres_server.url)
    for sql, message in [
        (f"INSERT INTO {table} (k, v) VALUSE (?, ?)", "syntax error"),
        ("INSERT INTO missing_table (k, v) VALUES (?, ?)", "does not exist"),
        (f"INSERT INTO {table} (k, v) VALUES (?, ?)", "null value"),
    ]:
        writer = JdbcSink.sink(sql, PAIR, options).create_writer(0, 1, 0)
        start = time.monotonic()
        try:
            writer.write_batch([(None, 1)] if "null" in message else [("a", 1)])
            with pytest.raises(RuntimeError, match=f"refused the JDBC sink's statement.*{message}"):
                writer.prepare_commit(1)
        finally:
            writer.close()
        assert time.monotonic() - start < 1.0  # not retried


def test_an_unreachable_server_a_missing_database_or_user_is_a_clear_error(postgres_server):
    port = postgres_server.port
    cases = [
        ("jdbc:postgresql://127.0.0.1:1/x", "Connection refused"),
        (f"jdbc:postgresql://127.0.0.1:{port}/no_such_db", 'database "no_such_db" does not exist'),
        (f"jdbc:postgresql://127.0.0.1:{port}/tidegate", 'role "nobody" does not exist'),
    ]
    for url, message in cases:
        builder = JdbcConnectionOptions.JdbcConnectionOptionsBuilder().with_url(url)
        options = builder.with_user_name("nobody" if "role" in message else "postgres").build()
        execution = JdbcExecutionOptions.builder().with_max_retries(0).build()
        w = JdbcSink.sink("INSERT INTO t VALUES (?, ?)", PAIR, options, execution).create_writer(
            0, 1, 0
        )
        w.write_batch([("a", 1)])
        with pytest.raises(RuntimeError, match=f"cannot connect to PostgreSQL at .*{message}"):
            w.prepare_commit(1)
        w.close()
        sink = JdbcSink.exactly_once_sink("INSERT INTO t VALUES (?, ?)", PAIR, options)
        with pytest.raises(ConnectionError, match=message):
            sink.for_job("j").recover(0, 1, 0, [])


def _exactly_once(postgres_server, table: str, job_id: str, **options):
    builder = JdbcExactlyOnceOptions.builder()
    if "lock_timeout_ms" in options:
        builder.with_lock_timeout_ms(options["lock_timeout_ms"])
    sql = options.get("sql", f"INSERT INTO {table} (k, v) VALUES (?, ?)")
    return JdbcSink.exactly_once_sink(
        sql, PAIR, _options(postgres_server.jdbc_url), None, builder.build()
    ).for_job(job_id)


def test_exactly_once_prepares_at_the_checkpoint_and_commits_idempotently(
    postgres_server, db, table
):
    job = uuid.uuid4().hex
    sink = _exactly_once(postgres_server, table, job)
    sink.recover(0, 1, 0, [])
    writer, committer = sink.create_writer(0, 1, 0), sink.create_committer()
    try:
        writer.write_batch([("a", 1), ("b", 2)])
        [c] = writer.prepare_commit(1)
        assert c.gid == f"tidegate:{job}:0:0:1:{parse_gid(c.gid).nonce}"
        assert _rows(db, table) == {} and _prepared(db, job) == [c.gid]
        assert writer.prepare_commit(2) == [PreparedTransactionCommittable(job, 0, 2, None)]
        committer.commit([c])
        assert _rows(db, table) == {"a": 1, "b": 2} and _prepared(db, job) == []
        committer.commit([c])  # again, as after a restore: its marker says it committed
        marker = db.execute(
            f"SELECT job_id, writer, checkpoint_id FROM {MARKER_TABLE} WHERE gid = %s", (c.gid,)
        )
        assert marker.fetchone() == (job, 0, 1)
        writer.write_batch([("c", 3)])
        [lost] = writer.prepare_commit(3)
        db.execute(f"ROLLBACK PREPARED '{lost.gid}'")
        with pytest.raises(RuntimeError, match="no longer prepared and its commit marker"):
            committer.commit([lost])
    finally:
        writer.close()
        committer.close()


def test_a_restore_commits_the_restored_transactions_and_rolls_back_the_dead_writers_others(
    postgres_server, db, table
):
    """Writers 0 and 1 of a job at parallelism 2 die with prepared transactions of checkpoints
    1 (restored) and 2 (not completed) and an open one; the job restarts at parallelism 1."""
    job, other_job = uuid.uuid4().hex, uuid.uuid4().hex
    sink = _exactly_once(postgres_server, table, job)
    other = _exactly_once(postgres_server, table, other_job)
    sink.recover(0, 2, 0, [])
    writers = [sink.create_writer(k, 2, 0) for k in range(2)]
    restored = []
    for k, writer in enumerate(writers):
        writer.write_batch([(f"{k}-1", 1)])
        restored += writer.prepare_commit(1)
        writer.write_batch([(f"{k}-2", 2)])
        writer.prepare_commit(2)
        writer.write_batch([(f"{k}-3", 3)])
    stranger = other.create_writer(0, 1, 0)
    stranger.write_batch([("other", 9)])
    [kept] = stranger.prepare_commit(1)
    for writer in [*writers, stranger]:
        writer.close()  # dead: the open transactions are gone, the prepared ones stay
    assert len(_prepared(db, job)) == 4

    after = sink.for_job(uuid.uuid4().hex)  # a new run restored from checkpoint 1
    after.recover(0, 1, 1, restored)
    assert _prepared(db, job) == sorted(c.gid for c in restored)
    committer = after.create_committer()
    committer.commit(restored)
    committer.close()
    assert _rows(db, table) == {"0-1": 1, "1-1": 1}
    assert _prepared(db, job) == [] and _prepared(db, other_job) == [kept.gid]
    db.execute(f"ROLLBACK PREPARED '{kept.gid}'")


def test_a_row_locked_by_the_previous_checkpoints_transaction_fails_clearly(
    postgres_server, db, table
):
    sql = f"INSERT INTO {table} (k, v) VALUES (?, ?) ON CONFLICT (k) DO UPDATE SET v = EXCLUDED.v"
    sink = _exactly_once(postgres_server, table, uuid.uuid4().hex, lock_timeout_ms=200, sql=sql)
    sink.recover(0, 1, 0, [])
    writer = sink.create_writer(0, 1, 0)
    try:
        writer.write_batch([("a", 1)])
        [c] = writer.prepare_commit(1)
        writer.write_batch([("a", 2)])
        with pytest.raises(RuntimeError, match="holds its locks until that checkpoint completes"):
            writer.prepare_commit(2)
    finally:
        writer.close()
        db.execute(f"ROLLBACK PREPARED '{c.gid}'")


@pytest.fixture(scope="module")
def no_2pc_server():
    """A second private server, with max_prepared_transactions = 0."""
    from tests.support.postgres import start_postgres

    server = start_postgres(max_prepared_transactions="0")
    yield server
    server.stop()


def test_a_server_without_prepared_transactions_is_refused_naming_the_setting(no_2pc_server):
    sink = JdbcSink.exactly_once_sink(
        "INSERT INTO t VALUES (?, ?)", PAIR, _options(no_2pc_server.url)
    )
    with pytest.raises(RuntimeError, match="max_prepared_transactions = 0"):
        sink.for_job("j").recover(0, 1, 0, [])


def test_a_transaction_that_cannot_be_prepared_fails_the_checkpoint_naming_the_setting(
    no_2pc_server,
):
    with psycopg.connect(no_2pc_server.url, autocommit=True) as db:
        create_marker_table(db)
        db.execute("CREATE TABLE IF NOT EXISTS t (k text, v bigint)")
    sink = JdbcSink.exactly_once_sink(
        "INSERT INTO t VALUES (?, ?)", PAIR, _options(no_2pc_server.url)
    ).for_job("j")
    writer = sink.create_writer(0, 1, 0)  # as if recover had not checked the server
    try:
        writer.write_batch([("a", 1)])
        with pytest.raises(RuntimeError, match=r"could not prepare.*max_prepared_transactions"):
            writer.prepare_commit(1)
    finally:
        writer.close()


def test_subtasks_creating_the_marker_table_at_once_all_succeed(no_2pc_server):
    """Recovering subtasks of a first run all find the table missing and create it."""
    conns = [psycopg.connect(no_2pc_server.url, autocommit=True) for _ in range(6)]
    errors: list[BaseException] = []

    def create(conn) -> None:
        try:
            create_marker_table(conn)
        except BaseException as e:  # collected for the assertion below
            errors.append(e)

    threads = [threading.Thread(target=create, args=(c,)) for c in conns]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert errors == []
    assert conns[0].execute(f"SELECT count(*) FROM {MARKER_TABLE}").fetchone() == (0,)
    for c in conns:
        c.close()


def test_the_transactions_tool_lists_the_jobs_prepared_transactions_with_their_cover():
    from datetime import UTC, datetime

    from tidegate.cli.transactions import lingering
    from tidegate.connectors.jdbc.transactions import PreparedTransaction

    def prepared(job, checkpoint):
        gid = Gid(job, 0, 0, checkpoint, "n")
        return PreparedTransaction(gid, datetime.now(UTC), "postgres", "db")

    found = [prepared("run-2", 7), prepared("run-1", 5), prepared("run-1", 6), prepared("x", 5)]
    covered = {str(Gid("run-1", 0, 0, 5, "n")): 7}  # run 2 restored run 1's checkpoint 5
    chosen = lingering(found, "run-2", covered)
    assert [
        (t.prepared.gid.job_id, t.prepared.gid.checkpoint_id, t.covered_by) for t in chosen
    ] == [
        ("run-2", 7, None),
        ("run-1", 5, 7),
        ("run-1", 6, None),
    ]


def test_add_sink_takes_a_jdbc_sink_as_pyflink_programs_add_it():
    from tidegate.datastream import StreamExecutionEnvironment
    from tidegate.datastream.data_stream import DataStreamSink

    env = StreamExecutionEnvironment.get_execution_environment()
    ds = env.from_collection([("a", 1)], type_info=PAIR)
    options = _options("jdbc:postgresql://127.0.0.1:5432/db")
    added = ds.add_sink(JdbcSink.sink("INSERT INTO t VALUES (?, ?)", PAIR, options))
    assert isinstance(added, DataStreamSink)
    with pytest.raises(TypeError, match="add_sink expects a tidegate Sink"):
        ds.add_sink(print)
    with pytest.raises(TypeError, match="needs JdbcConnectionOptions"):
        JdbcSink.sink("INSERT INTO t VALUES (?, ?)", PAIR, "postgresql://h/db")
