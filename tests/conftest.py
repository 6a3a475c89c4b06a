"""Shared fixtures: one SparkSession (local[8]) for the whole test session (starting a JVM is
slow); and the markers every test gets from where it is and what it uses (pyproject.toml lists
them): `unit` (tests/unit), `e2e` (tests/e2e), `spark` (uses the Spark session, directly, as the
`spark` runner, or in a subprocess it starts), `slow` (named in SLOW: more than SLOW_S seconds
on a 2-core machine; a run's summary lists the tests that took more than UNMARKED_S without the
marker, and SLOW entries that name no test). `pytest -m "not slow"` (about 6 minutes instead
of 28) and `pytest -m unit` are the quick loops; every test runs by default."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

TESTS = Path(__file__).parent

# Property-based tests (hypothesis): by default derandomized (the same examples on every run and
# machine, so a CI failure reproduces locally) and without a deadline (a shared 2-core CI
# machine has slow moments). HYPOTHESIS_PROFILE=explore searches afresh with more examples.
settings.register_profile(
    "ci",
    derandomize=True,
    deadline=None,
    database=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile("explore", deadline=None, max_examples=2000, print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
#: a test whose call takes longer than this (seconds) belongs in SLOW
SLOW_S = 3.0
#: the summary names the tests not in SLOW that took longer than this (a test's time varies by
#: a second or so from run to run with the load of the machine)
UNMARKED_S = 5.0
#: the slow tests, by file (relative to tests/) and function (every parametrization of it),
#: measured with the full suite on 2 cores (the first test of a module-scoped job fixture
#: pays for that job)
SLOW: dict[str, set[str]] = {
    "e2e/test_api.py": {
        "test_key_by_on_a_union_keeps_one_state_per_key_across_the_inputs",
        "test_operator_list_state_and_union_list_state_survive_a_restart",
    },
    "e2e/test_async_io.py": {
        "test_a_kill_9_mid_stream_commits_the_reference_exactly_once",
        "test_an_exception_in_async_invoke_restarts_the_job_which_commits_exactly_once",
    },
    "e2e/test_broadcast_state.py": {
        "test_rules_broadcast_to_a_keyed_stream_apply_exactly_once_despite_exceptions",
    },
    "e2e/test_checkpoint_semantics.py": {
        "test_concurrent_aligned_checkpoints_overlap_and_keep_exactly_once",
    },
    "e2e/test_chaos.py": {
        "test_chaos_passes_on_our_file_sink_under_every_fault_kind",
        "test_chaos_finds_both_planted_bugs_and_passes_the_sink_beside_them",
        "test_chaos_a_hung_storage_write_and_a_driver_restart_keep_exactly_once",
    },
    "e2e/test_soak.py": {"test_soak_quick_loses_and_duplicates_nothing"},
    "e2e/test_cli_run.py": {
        "test_a_failed_job_is_resumed_from_its_checkpoint_with_exactly_once_output",
        "test_a_failing_function_is_located_in_the_script_with_the_oldest_cloudpickle_allowed",
    },
    "e2e/test_cluster.py": {
        "test_chaos_loses_a_whole_executor_and_finds_the_committed_output_equal",
        "test_a_job_spans_two_hosts_exactly_once_through_a_kill_9_of_an_executor_jvm",
        "test_a_loopback_address_advertised_to_the_cluster_is_refused_naming_the_key",
        "test_a_checkpoint_directory_the_workers_do_not_share_fails_the_job_naming_the_host",
        "test_a_file_sink_path_the_workers_do_not_share_fails_the_job_naming_the_host_and_path",
        "test_without_a_checkpoint_directory_a_cluster_job_is_refused",
        "test_a_partitioned_worker_is_replaced_by_a_spare_exactly_once",
        "test_a_cut_off_slot_ends_on_its_own_and_the_job_resumes_when_the_partition_heals",
        "test_restarted_slots_return_to_the_hosts_of_their_task_local_state",
        "test_a_second_driver_fences_off_the_first_drivers_slots_on_other_hosts",
        "test_checkpoints_and_output_on_s3_reach_every_host_through_the_configuration_keys",
        "test_spark_submit_runs_the_example_unchanged_across_hosts",
        "test_a_new_driver_resumes_a_killed_drivers_job_rescaled_onto_a_new_host",
        "test_tidegate_run_with_a_master_and_spark_conf_runs_the_example_across_hosts",
    },
    "e2e/test_code_shipping.py": {
        "test_a_module_beside_the_script_and_an_added_package_reach_the_workers",
        "test_an_archive_is_extracted_into_each_slots_working_directory",
        "test_requirements_install_on_the_workers_from_shipped_wheels",
    },
    "e2e/test_poison_records.py": {
        "test_dead_letters_are_exactly_once_through_a_kill_and_an_exception",
    },
    "e2e/test_connected_streams.py": {
        "test_co_map_co_flat_map_co_process_and_broadcast_process_are_exactly_once_across_failures",
        "test_a_keyed_co_process_join_with_timeouts_is_exactly_once_across_an_exception_and_a_kill",
        "test_an_interval_join_is_exactly_once_across_an_exception_and_a_kill",
        "test_the_keyed_co_process_job_rescales_from_two_to_three_subtasks_from_a_savepoint",
        "test_the_keyed_co_process_join_on_rocksdb_with_unaligned_checkpoints_survives_kills",
    },
    "e2e/test_dashboard.py": {
        "test_a_screenshot_of_the_dashboard_is_a_real_rendering",
        "test_the_dashboard_renders_the_graph_records_and_checkpoints_of_a_running_job",
    },
    "e2e/test_disk_full.py": {
        "test_a_full_checkpoint_disk_fails_checkpoints_cleanly_and_loses_nothing",
    },
    "e2e/test_event_time.py": {
        "test_a_restore_from_a_savepoint_mid_stream_neither_re_emits_nor_loses_a_window",
        "test_event_time_windows_are_exactly_once_with_unaligned_checkpoints_across_kills",
        "test_event_time_windows_fire_exactly_once_as_the_watermark_advances_across_failures",
    },
    "e2e/test_exactly_once.py": {
        "test_a_hung_slot_is_detected_by_missing_heartbeats_and_the_job_recovers",
        "test_at_least_once_mode_loses_nothing_under_failures",
        "test_exceptions_in_an_operator_at_several_records_lose_and_duplicate_nothing",
        "test_kill_9_of_slot_processes_loses_and_duplicates_nothing",
        "test_typed_records_survive_kill_9_exactly_once",
    },
    "e2e/test_executor_python_errors.py": {
        "test_executors_with_the_wrong_python_fail_the_job_naming_the_settings",
    },
    "e2e/test_failures_under_backpressure.py": {
        "test_five_failures_under_backpressure_keep_exactly_once",
        "test_five_failures_under_backpressure_lose_nothing_at_least_once",
    },
    "e2e/test_file_source.py": {
        "test_text_files_are_read_exactly_once_through_an_exception_and_a_kill_9",
    },
    "e2e/test_incremental_checkpoints.py": {
        "test_a_changelog_job_killed_then_restored_at_3_subtasks_is_exactly_once",
        "test_a_claimed_incremental_checkpoint_is_deleted_but_not_the_files_of_its_siblings",
        "test_an_incremental_checkpoint_restores_rescaled_from_2_to_3_subtasks",
        "test_an_incremental_job_with_exceptions_and_a_kill_9_is_exactly_once",
    },
    "e2e/test_ipv6.py": {
        "test_a_job_whose_driver_and_slots_talk_ipv6_commits_exactly_the_reference",
    },
    "e2e/test_jdbc.py": {
        "test_exactly_once_and_upsert_sinks_hold_the_reference_through_an_exception_and_a_kill_9",
        "test_the_cli_lists_and_resolves_the_transactions_a_failed_job_left",
        "test_a_restore_at_parallelism_1_commits_both_writers_transactions_of_the_checkpoint",
    },
    "e2e/test_kafka_clients.py": {
        "test_a_restore_commits_a_pre_committed_transaction_of_a_dead_writer_exactly_once",
        "test_records_are_written_with_their_stream_records_timestamps",
        "test_a_restore_with_a_smaller_pool_and_fewer_writers_fences_every_id_the_old_run_used",
        "test_a_lingering_writer_of_a_failed_attempt_cannot_open_a_transaction_after_the_restore",
    },
    "e2e/test_kafka_sink.py": {
        "test_exactly_once_through_exceptions",
        "test_exactly_once_through_a_kill_9",
    },
    "e2e/test_kafka_source.py": {
        "test_a_bounded_source_through_exceptions_counts_the_topic_exactly_once",
        "test_a_kill_9_of_a_worker_loses_and_duplicates_nothing_of_the_topic",
        "test_a_rescale_from_two_to_three_subtasks_moves_partitions_exactly_once",
        "test_watermarks_follow_the_slowest_partition_and_skip_idle_ones",
    },
    "e2e/test_nats.py": {
        "test_the_jetstream_source_is_exactly_once_through_an_exception_and_a_kill_9",
        "test_an_unbounded_read_of_a_growing_stream_is_exactly_once_and_acknowledged",
        "test_the_bounded_source_rescales_from_2_to_3_subtasks_and_ends_at_the_planned_messages",
        "test_the_sink_holds_exactly_the_reference_through_an_exception_and_a_kill_9",
        "test_nothing_is_published_before_a_checkpoint_completes",
        "test_the_sink_restored_at_3_subtasks_from_2_publishes_every_batch_once",
    },
    "e2e/test_nexmark.py": {
        "test_every_nexmark_query_equals_its_reference_across_an_exception_and_a_kill",
    },
    "e2e/test_parquet.py": {
        "test_parquet_through_a_kill_9_and_an_exception_is_read_by_spark_exactly_once",
    },
    "e2e/test_postgres_cdc.py": {
        "test_the_cdc_source_mirrors_a_changing_table_exactly_once_through_failures_and_a_rescale",
    },
    "e2e/test_redis.py": {
        "test_the_streams_source_is_exactly_once_through_an_exception_and_a_kill_9",
        "test_the_streams_source_rescales_from_2_to_3_subtasks_from_a_checkpoint",
        "test_the_sinks_hold_exactly_the_reference_through_an_exception_and_a_kill_9",
        "test_nothing_reaches_redis_before_a_checkpoint_completes",
        "test_the_sinks_restored_at_3_subtasks_from_2_commit_every_batch_once",
    },
    "e2e/test_rescaling.py": {
        "test_a_failure_during_the_rescaled_run_restarts_it_and_stays_exactly_once",
        "test_a_job_rescaled_from_a_snapshot_keeps_its_state_and_output_exactly_once",
    },
    "e2e/test_restart_strategies.py": {
        "test_a_failure_rate_above_the_limit_fails_the_running_job",
        "test_a_restart_strategy_restarts_a_running_job_after_its_delays_exactly_once",
    },
    "e2e/test_restore_and_bad_input.py": {
        "test_a_damaged_checkpoint_fails_the_restart_naming_the_file_and_everything_is_kept",
        "test_a_function_that_always_raises_fails_the_job_with_the_users_error",
        "test_restoring_a_job_directory_with_a_damaged_latest_checkpoint",
        "test_with_restore_fallback_a_restart_skips_a_damaged_checkpoint_exactly_once",
    },
    "e2e/test_rocksdb_state_backend.py": {
        "test_a_rocksdb_job_with_exceptions_and_a_kill_9_commits_exactly_the_reference",
    },
    "e2e/test_s3.py": {
        "test_a_job_on_s3_restarts_from_its_s3_checkpoint_and_is_resumed_rescaled_exactly_once",
    },
    "e2e/test_savepoints.py": {
        "test_a_cancelled_job_resumes_from_its_latest_retained_checkpoint_exactly_once_unmodified",
        "test_a_failed_drain_restarts_the_job_from_its_latest_checkpoint",
        "test_a_failed_savepoint_never_fails_the_job",
        "test_a_failover_after_a_savepoint_restores_the_savepoint_not_an_older_checkpoint",
        "test_claim_makes_the_restored_checkpoint_the_jobs_own_so_it_is_subsumed",
    },
    "e2e/test_security.py": {
        "test_a_running_job_refuses_hostile_peers_on_every_socket_and_stays_exactly_once",
    },
    "e2e/test_setup.py": {
        "test_a_job_runs_on_spark_with_the_bundled_java_when_no_system_java_is_visible",
    },
    "e2e/test_state_processor.py": {
        "test_broadcast_state_and_timers_read_back_as_written",
        "test_from_existing_savepoint_replaces_keeps_and_removes_operators",
        "test_list_map_and_operator_state_round_trip_through_a_job",
        "test_round_trip_through_a_bootstrapped_savepoint_at_another_parallelism_is_lossless",
        "test_state_is_queried_with_spark_sql",
        "test_value_state_reads_as_the_reference_counts_with_key_groups_where_the_formula_puts_them",
    },
    "e2e/test_state_processor_incremental.py": {
        "test_an_incremental_checkpoint_rewrites_into_a_self_contained_canonical_savepoint",
        "test_every_keyed_state_and_the_timers_of_an_incremental_checkpoint_read_as_its_savepoint",
    },
    "e2e/test_state_ttl.py": {
        "test_expired_state_is_never_returned_and_ttl_state_survives_a_restore",
    },
    "e2e/test_tables.py": {
        "test_the_delta_and_iceberg_sinks_hold_exactly_the_reference_through_an_exception_and_a_kill_9",
        "test_the_table_sinks_restored_at_3_subtasks_from_2_commit_every_checkpoint_once",
    },
    "e2e/test_task_local_recovery.py": {
        "test_a_restore_prefers_intact_local_copies_and_stays_exactly_once",
    },
    "e2e/test_transactions_cli.py": {
        "test_the_cli_resolves_the_pending_files_and_kafka_transactions_a_killed_job_left",
    },
    "e2e/test_timers.py": {
        "test_event_time_timers_fire_at_the_end_of_input_exactly_once_across_failures",
        "test_processing_time_timers_fire_exactly_once_across_an_exception_and_two_kills",
        "test_rescaling_2_to_3_to_2_moves_pending_timers_with_their_key_groups",
    },
    "e2e/test_windows.py": {
        "test_keyed_and_all_windows_are_exactly_once_across_an_exception_and_two_kills",
        "test_late_elements_go_to_the_side_output_or_refire_their_window_exactly_once_across_failures",
        "test_processing_time_windows_and_sessions_count_every_value_once_across_an_exception_and_a_kill",
        "test_rescaling_2_to_3_to_2_through_savepoints_moves_open_windows_with_their_keys",
    },
    "unit/test_barrier_properties.py": {"test_barrier_alignment"},
    "unit/test_commit_properties.py": {"test_checkpoints_and_commits"},
    "unit/test_rocksdb_backend.py": {
        "test_state_larger_than_the_block_cache_and_write_buffers_works",
    },
    "unit/test_window_functions.py": {
        "test_a_continuous_event_time_trigger_fires_every_interval_and_at_the_window_end",
    },
    "unit/test_window_operator.py": {
        "test_late_elements_within_the_allowed_lateness_fire_the_window_again",
        "test_session_windows_merge_elements_closer_than_the_gap",
        "test_sliding_windows_each_get_every_element_in_their_range",
    },
}


def pytest_collection_modifyitems(config, items):
    modules: dict[str, object] = {}
    for item in items:
        path = item.path.relative_to(TESTS)
        kind = path.parts[0]
        if kind in ("unit", "e2e"):
            item.add_marker(kind)
        name = getattr(item, "originalname", item.name)
        if name == "runTest":  # a hypothesis state machine: named by its TestCase
            name = item.parent.name
        modules.setdefault(path.as_posix(), getattr(item, "module", None))
        if name in SLOW.get(path.as_posix(), ()):
            item.add_marker("slow")
        callspec = getattr(item, "callspec", None)
        runs_on_spark = "spark" in item.fixturenames or (
            callspec is not None and callspec.params.get("runner") == "spark"
        )
        if runs_on_spark:
            item.add_marker("spark")
    _stale_slow.extend(
        f"{path}::{name}"
        for path, module in modules.items()
        if module is not None
        for name in sorted(SLOW.get(path, ()))
        if not hasattr(module, name)
    )


@pytest.fixture(scope="session")
def spark():
    from tidegate.deploy.spark_session import get_spark

    session = get_spark("local[8]", 8)  # rescaling tests run up to 8 slots
    yield session
    session.stop()


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory):
    """A private S3-compatible server (SeaweedFS, tests/support/s3.py) with one bucket, started
    when a test first asks for it and stopped by PID at the end of the session."""
    from tests.support.s3 import start_s3_server

    server = start_s3_server(tmp_path_factory.mktemp("s3"))
    yield server
    server.stop()


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory):
    """A private redis-server (tests/support/servers.py), started when a test first asks for
    it and stopped by PID at the end of the session; `redis_server.url` reaches it."""
    from tests.support.servers import start_redis

    server = start_redis(tmp_path_factory.mktemp("redis"))
    yield server
    server.stop()


@pytest.fixture(scope="session")
def nats_server(tmp_path_factory):
    """A private nats-server with JetStream (tests/support/servers.py), like redis_server.
    At the end, no NATS client of this process may still be open (its loop thread is named
    "nats"): one left open logs reconnect errors once the server stops."""
    import threading

    from tests.support.servers import start_nats

    server = start_nats(tmp_path_factory.mktemp("nats"))
    yield server
    open_clients = sum(t.name == "nats" for t in threading.enumerate())
    server.stop()
    assert open_clients == 0, f"{open_clients} NATS client(s) left open by the tests"


@pytest.fixture(scope="session")
def postgres_server():
    """A private PostgreSQL server (tests/support/postgres.py) with prepared transactions and
    logical replication enabled, started when a test first asks for it and stopped by PID at
    the end of the session; `postgres_server.url` / `.jdbc_url` reach its test database."""
    from tests.support.postgres import start_postgres

    server = start_postgres()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def kafka(tmp_path_factory):
    """A Kafka-protocol broker (tests/support/kafka.py): a private Tansu broker started when a
    test first asks for it and stopped by PID at the end of the session, or the Kafka that
    TIDEGATE_TEST_KAFKA=host:port names."""
    from tests.support.kafka import start_kafka

    broker = start_kafka(tmp_path_factory.mktemp("kafka"))
    yield broker
    broker.stop()


@pytest.fixture(params=["spark", "local"])
def runner(request):
    """Run a test on both runners; the Spark one on the shared session."""
    if request.param == "spark":
        request.getfixturevalue("spark")
    return request.param


@pytest.fixture(scope="session", autouse=True)
def tidegate_home(tmp_path_factory):
    """Discovery files of the REST servers this test process (and the CLIs it runs) start go
    to a temporary TIDEGATE_HOME, not the user's ~/.tidegate."""
    import os

    home = tmp_path_factory.mktemp("tidegate-home")
    saved = os.environ.get("TIDEGATE_HOME")
    os.environ["TIDEGATE_HOME"] = str(home)
    yield home
    if saved is None:
        os.environ.pop("TIDEGATE_HOME", None)
    else:
        os.environ["TIDEGATE_HOME"] = saved


_unmarked_slow: list[tuple[str, float]] = []
_stale_slow: list[str] = []


def pytest_runtest_logreport(report):
    if report.when == "call" and report.duration > UNMARKED_S and "slow" not in report.keywords:
        _unmarked_slow.append((report.nodeid, report.duration))


def pytest_terminal_summary(terminalreporter):
    if _unmarked_slow:
        terminalreporter.section(f"tests over {UNMARKED_S:g} s not in conftest.SLOW")
        for nodeid, duration in sorted(_unmarked_slow, key=lambda t: -t[1]):
            terminalreporter.write_line(f"{duration:6.1f}s {nodeid}")
    if _stale_slow:
        terminalreporter.section("conftest.SLOW names tests that do not exist (renamed?)")
        for nodeid in _stale_slow:
            terminalreporter.write_line(nodeid)
