"""`StreamExecutionEnvironment`: builds a job with the DataStream API and runs it."""

from __future__ import annotations

import os
import tempfile
from dataclasses import replace
from functools import partial
from typing import Any, ClassVar

from tidegate import rest
from tidegate.common.configuration import (
    ADVERTISED_HOST,
    BATCH_SIZE,
    BIND_HOST,
    BUFFER_TIMEOUT_MS,
    CHECKPOINTS_HISTORY,
    CLAIM_MODE,
    GC_THRESHOLD,
    HEARTBEAT_TIMEOUT_MS,
    IGNORE_UNCLAIMED_STATE,
    JOB_ID,
    LOCAL_RECOVERY,
    LOCAL_RECOVERY_DIRS,
    PYTHON_ARCHIVES,
    PYTHON_FILES,
    PYTHON_REQUIREMENTS,
    QUEUE_CAPACITY,
    RESTORE_FALLBACK,
    RUNNER,
    RUNTIME_MODE,
    SAVEPOINT_DIR,
    SAVEPOINT_IGNORE_UNCLAIMED_STATE,
    SAVEPOINT_PATH,
    SAVEPOINT_RESTORE_MODE,
    SHIP_SCRIPT_DIR,
    SPARK_MASTER,
    STATE_BACKEND_CHANGELOG,
    STATE_RECOVERY_PATH,
    STATE_SAVEPOINTS_DIR,
    SWITCH_INTERVAL_US,
    Configuration,
)
from tidegate.common.execution_config import (
    ExecutionConfig,
    auto_watermark_interval,
    job_parameters,
)
from tidegate.common.filesystems import FileSystems
from tidegate.common.job_client import JobClient, JobExecutionResult
from tidegate.common.restart_strategy import RestartStrategies
from tidegate.common.type_format import RecordTypeError, converter
from tidegate.common.typeinfo import TypeInformation, as_type_info
from tidegate.connectors.base import Boundedness, ChecksCheckpointing, Source
from tidegate.connectors.collection import CollectionSource
from tidegate.datastream.checkpoint_config import CheckpointConfig
from tidegate.datastream.checkpointing_mode import CheckpointingMode
from tidegate.datastream.configured import apply_configuration
from tidegate.datastream.data_stream import DataStream
from tidegate.datastream.event_time import check_strategy
from tidegate.datastream.execution_mode import RuntimeExecutionMode
from tidegate.datastream.state_backend import STATE_BACKENDS, resolve_state_backend
from tidegate.deploy.job_spec import CheckpointSettings, JobSpec, RestoreMode
from tidegate.deploy.jobmaster import JobMaster
from tidegate.deploy.python_deps import PythonDependencies, script_directory
from tidegate.graph.job_graph import build_job_graph
from tidegate.graph.stream_graph import StreamGraph
from tidegate.runtime.buffer_timeout import check_millis
from tidegate.runtime.collector import DEFAULT_GC_THRESHOLD, check_gc_threshold
from tidegate.runtime.connector_operators import SourceOperator
from tidegate.runtime.plan import JobGraph
from tidegate.runtime.switch_interval import DEFAULT_SWITCH_INTERVAL_US, check_switch_interval

DEFAULT_JOB_NAME = "tidegate job"


class StreamExecutionEnvironment:
    #: set by `tidegate run` before it runs the job script (CLI options win over the script)
    cli_overrides: ClassVar[dict[str, Any]] = {}

    def __init__(self, configuration: Configuration | None = None) -> None:
        self._config = Configuration(configuration)
        self._parallelism = min(os.cpu_count() or 1, 4)
        self._max_parallelism: int | None = None
        self._checkpoint_config = CheckpointConfig()
        self._restart_strategy = None
        self._state_backend: Any = None  # None: state.backend.type decides
        self._stream_graph = StreamGraph()
        #: add_python_file paths and set_python_requirements' (file, cache dir)
        self._python_files: list[str] = []
        self._python_requirements: tuple[str, str | None] | None = None
        #: add_python_archive (archive path, target directory or None)
        self._python_archives: list[tuple[str, str | None]] = []
        self._spark_session = None
        apply_configuration(self, self._config)

    @staticmethod
    def get_execution_environment(configuration: Configuration | None = None):
        return StreamExecutionEnvironment(configuration)

    # settings ----------------------------------------------------------------------------------
    def configure(self, configuration: Configuration) -> StreamExecutionEnvironment:
        """Add the entries of `configuration`; the keys of settings that methods also set
        (parallelism, checkpointing, restart strategy) apply now, overriding earlier calls."""
        self._config.add_all(configuration)
        apply_configuration(self, Configuration(configuration))
        return self

    def get_config(self) -> ExecutionConfig:
        """PyFlink's ExecutionConfig of this environment (common/execution_config.py); the
        environment's Configuration keys are set with `configure(...)`."""
        return ExecutionConfig(self)

    def set_parallelism(self, parallelism: int) -> StreamExecutionEnvironment:
        if int(parallelism) < 1:
            raise ValueError(f"parallelism must be >= 1, got {parallelism}")
        self._parallelism = int(parallelism)
        return self

    def get_parallelism(self) -> int:
        return self._parallelism

    def set_max_parallelism(self, max_parallelism: int) -> StreamExecutionEnvironment:
        if not 0 < int(max_parallelism) <= 32768:
            raise ValueError(f"max parallelism must be in [1, 32768], got {max_parallelism}")
        self._max_parallelism = int(max_parallelism)
        return self

    def get_max_parallelism(self) -> int:
        return self._max_parallelism or -1

    def enable_checkpointing(self, interval: int, mode: CheckpointingMode | None = None):
        self._checkpoint_config.set_checkpoint_interval(interval)
        if mode is not None:
            self._checkpoint_config.set_checkpointing_mode(mode)
        return self

    def get_checkpoint_config(self) -> CheckpointConfig:
        return self._checkpoint_config

    def get_checkpoint_interval(self) -> int:
        return self._checkpoint_config.get_checkpoint_interval()

    def get_checkpointing_mode(self) -> CheckpointingMode:
        return self._checkpoint_config.get_checkpointing_mode()

    def set_default_savepoint_directory(self, directory: str | None) -> StreamExecutionEnvironment:
        """Where savepoints go when none is given when one is triggered (PyFlink's name; the
        same as `get_checkpoint_config().set_default_savepoint_directory`)."""
        self._checkpoint_config.set_default_savepoint_directory(directory)
        return self

    def get_default_savepoint_directory(self) -> str | None:
        return self._checkpoint_config.get_default_savepoint_directory()

    def set_restart_strategy(self, restart_strategy_configuration) -> StreamExecutionEnvironment:
        self._restart_strategy = restart_strategy_configuration
        return self

    def get_restart_strategy(self):
        if self._restart_strategy is not None:
            return self._restart_strategy
        # Flink's defaults: exponential delay when checkpointing is on, otherwise no restart.
        if self._checkpoint_config.is_checkpointing_enabled():
            return RestartStrategies.exponential_delay_restart()
        return RestartStrategies.no_restart()

    def set_state_backend(self, state_backend: Any) -> StreamExecutionEnvironment:
        if not isinstance(state_backend, STATE_BACKENDS):
            raise ValueError(
                f"unsupported state backend {type(state_backend).__name__}; "
                "tidegate supports HashMapStateBackend and EmbeddedRocksDBStateBackend"
            )
        self._state_backend = state_backend
        return self

    def get_state_backend(self):
        return resolve_state_backend(self._state_backend, self._config)

    def enable_changelog_state_backend(self, enabled: bool) -> StreamExecutionEnvironment:
        """The key `state.backend.changelog.enabled`: the rocksdb backend's checkpoints persist
        changed values as changelogs (state/rocksdb_changelog.py); the hashmap backend's
        incremental checkpoints are changelogs already (`state.backend.incremental`)."""
        self._config.set_string(STATE_BACKEND_CHANGELOG, "true" if enabled else "false")
        return self

    def is_changelog_state_backend_enabled(self) -> bool:
        return self._config.get_boolean(STATE_BACKEND_CHANGELOG, False)

    def set_spark_session(self, spark: Any) -> StreamExecutionEnvironment:
        """Run on this SparkSession instead of the active or an embedded local one."""
        self._spark_session = spark
        return self

    def set_buffer_timeout(self, timeout_millis: int) -> StreamExecutionEnvironment:
        """The longest a partly filled output buffer waits before it is sent downstream (ms;
        0: after every batch a subtask processes; -1: only when full), the key
        `execution.buffer-timeout` (runtime/buffer_timeout.py)."""
        self._config.set_integer(BUFFER_TIMEOUT_MS, check_millis(timeout_millis))
        return self

    def get_buffer_timeout(self) -> int:
        return self._config.get_integer(BUFFER_TIMEOUT_MS, 10)

    def set_runtime_mode(self, execution_mode: RuntimeExecutionMode) -> StreamExecutionEnvironment:
        """STREAMING (the default), BATCH or AUTOMATIC (datastream/execution_mode.py); the same
        as the configuration key `execution.runtime-mode`."""
        self._config.set_string(RUNTIME_MODE, RuntimeExecutionMode.parse(execution_mode).name)
        return self

    def add_python_file(self, file_path: str) -> None:
        """Ship a Python file, package or directory to every worker and put it on their
        `sys.path` (a directory's content is importable, as on PYTHONPATH). The job script's
        own directory is shipped without this (`tidegate.python.ship-script-dir`)."""
        self._python_files.append(os.path.abspath(os.path.expanduser(file_path)))

    def set_python_requirements(
        self, requirements_file_path: str, requirements_cache_dir: str | None = None
    ) -> None:
        """Install the packages of a requirements file on every worker (once per host, with
        `pip install --target`); with `requirements_cache_dir` (a directory of wheels, e.g.
        from `pip download -d DIR -r FILE`) only from those wheels, for workers without a
        package index."""
        self._python_requirements = (
            os.path.abspath(os.path.expanduser(requirements_file_path)),
            None if requirements_cache_dir is None else os.path.abspath(requirements_cache_dir),
        )

    def add_python_archive(self, archive_path: str, target_dir: str | None = None) -> None:
        """Ship an archive (zip, tar, tar.gz, tgz, tar.bz2, tar.xz) to every worker, extracted
        into the slot's working directory under `target_dir` (default: the archive's file
        name), so user functions open its files by relative path (`open("data/model.txt")`).
        Slots then run in a working directory of their own."""
        path = os.path.abspath(os.path.expanduser(archive_path))
        self._python_archives.append((path, target_dir))

    def _python_dependencies(self) -> PythonDependencies:
        """What the workers need of the job's Python code (deploy/python_deps.py)."""
        cfg = self._config
        paths = [p.strip() for p in (cfg.get_string(PYTHON_FILES) or "").split(",") if p.strip()]
        paths += self._python_files
        script_dir = script_directory()
        if script_dir is not None and cfg.get_boolean(SHIP_SCRIPT_DIR, True):
            paths.insert(0, script_dir)
        requirements, cache_dir = self._python_requirements or (None, None)
        configured = cfg.get_string(PYTHON_REQUIREMENTS)
        if requirements is None and configured:
            requirements, _, cache = configured.partition("#")
            cache_dir = cache or None
        archives = [
            (path, target or None)
            for entry in (cfg.get_string(PYTHON_ARCHIVES) or "").split(",")
            if entry.strip()
            for path, _, target in [entry.strip().partition("#")]
        ]
        archives += self._python_archives
        return PythonDependencies.collect(paths, requirements, cache_dir, archives)

    # sources -----------------------------------------------------------------------------------
    def from_source(
        self,
        source: Source,
        watermark_strategy: Any = None,
        source_name: str = "Source",
        type_info: Any = None,
    ) -> DataStream:
        if not isinstance(source, Source):
            raise TypeError(
                f"from_source expects a Source (NumberSequenceSource, FileSource, "
                f"DataGeneratorSource, ...), got {type(source).__name__}"
            )
        strategy = check_strategy(
            watermark_strategy,
            at_source=True,
            source_timestamps=getattr(source, "attaches_timestamps", False),
        )
        make_operator = SourceOperator
        if strategy is not None:
            interval = partial(auto_watermark_interval, self._config)  # read at submission
            make_operator = partial(
                SourceOperator, watermark_strategy=strategy, watermark_interval_ms=interval
            )
        t = self._stream_graph.add(
            kind="source",
            name=f"Source: {source_name}",
            make_operator=make_operator,
            connector=source,
            is_source=True,
            bounded=source.boundedness is Boundedness.BOUNDED,
            output_type=as_type_info(
                type_info if type_info is not None else _produced_type(source),
                "from_source(type_info=...)",
            ),
        )
        return DataStream(self, [(t, None)])

    def from_collection(self, collection: Any, type_info: Any = None) -> DataStream:
        """A bounded stream of the elements of `collection` (parallelism 1) whose records are
        of `type_info` (None: undeclared, PyFlink's PICKLED_BYTE_ARRAY). As in PyFlink, the
        elements are converted to that type now: tuples become Rows of a ROW type (with its
        field names), ints floats of a DOUBLE ...; an element that does not fit is an error."""
        declared = as_type_info(type_info, "from_collection(type_info=...)")
        elements = list(collection)
        if declared is not None:
            elements = _converted(elements, declared)
        ds = self.from_source(CollectionSource(elements), None, "Collection Source", declared)
        ds._transformation.parallelism = 1
        ds._transformation.non_parallel = True
        return ds

    # execution ---------------------------------------------------------------------------------
    def _job_spec(self, job_name: str | None) -> JobSpec:
        """The job as the JobMaster runs it: its graph and every setting, the CLI's overrides
        (`tidegate run -p ...`) taking precedence over the configuration."""
        overrides = self.cli_overrides
        if overrides.get("configuration"):  # `tidegate run --conf`: over the script's settings
            self.configure(Configuration().add_all(overrides["configuration"]))
        parallelism = overrides.get("parallelism") or self._parallelism
        chaos = overrides.get("chaos")  # `tidegate chaos`: its ChaosRun (deploy/chaos.py)
        if chaos is not None:
            chaos.redirect(self._stream_graph, parallelism)
        name = job_name or DEFAULT_JOB_NAME
        filesystems = FileSystems.from_configuration(self._config)
        graph = build_job_graph(
            self._stream_graph, name, parallelism, self._max_parallelism, filesystems
        )
        if not self.get_config().has_auto_generated_uids_enabled():
            _check_uids(graph)
        graph = replace(graph, job_parameters=job_parameters(self._config))
        checkpoint = self._checkpoint_settings()
        if self._is_batch():  # no periodic checkpoints: only the final one, where sinks commit
            graph = replace(graph, batch=True)
            checkpoint = replace(checkpoint, interval_ms=None)
        for t in self._stream_graph.transformations:
            if isinstance(t.connector, ChecksCheckpointing):
                t.connector.check_checkpoint_interval(checkpoint.interval_ms)
        cfg = self._config
        spec = JobSpec(
            job_name=name,
            graph=graph,
            checkpoint=checkpoint,
            restart_strategy=self.get_restart_strategy(),
            runner=overrides.get("runner") or cfg.get_string(RUNNER, "spark"),
            spark_master=overrides.get("spark_master") or cfg.get_string(SPARK_MASTER),
            bind_host=cfg.get_string(BIND_HOST),
            advertised_host=cfg.get_string(ADVERTISED_HOST),
            checkpoint_history_size=cfg.get_integer(CHECKPOINTS_HISTORY, 10),
            configuration=cfg.to_dict(),
            filesystems=filesystems,
            batch_size=cfg.get_integer(BATCH_SIZE, 512),
            buffer_timeout_ms=check_millis(cfg.get_integer(BUFFER_TIMEOUT_MS, 10)),
            queue_capacity=cfg.get_integer(QUEUE_CAPACITY, 64),
            gc_threshold=check_gc_threshold(cfg.get_integer(GC_THRESHOLD, DEFAULT_GC_THRESHOLD)),
            switch_interval_us=check_switch_interval(
                cfg.get_integer(SWITCH_INTERVAL_US, DEFAULT_SWITCH_INTERVAL_US)
            ),
            heartbeat_timeout_ms=cfg.get_integer(HEARTBEAT_TIMEOUT_MS, 50_000),
            job_id=cfg.get_string(JOB_ID),
            spark_session=self._spark_session,
            local_recovery=cfg.get_boolean(LOCAL_RECOVERY, False),
            local_recovery_dir=cfg.get_string(LOCAL_RECOVERY_DIRS),
            state_backend=self.get_state_backend(),
            python=self._python_dependencies(),
            **self._restore_settings(),
        )
        return spec if chaos is None else chaos.finish(spec)

    def _is_batch(self) -> bool:
        """Whether the job runs in BATCH mode; refuses BATCH with an unbounded source."""
        mode = RuntimeExecutionMode.parse(self._config.get_string(RUNTIME_MODE) or "STREAMING")
        unbounded = [
            t.name for t in self._stream_graph.reachable() if t.is_source and t.bounded is False
        ]
        if mode is RuntimeExecutionMode.BATCH and unbounded:
            raise ValueError(
                f"the job runs in BATCH mode, but its source(s) {', '.join(unbounded)} are "
                "unbounded: BATCH mode needs every source to end. Make the source bounded (e.g. "
                "a FileSource without monitoring, a DataGeneratorSource with a count) or run "
                "in STREAMING mode (env.set_runtime_mode(RuntimeExecutionMode.STREAMING))"
            )
        if mode is RuntimeExecutionMode.AUTOMATIC:
            return not unbounded
        return mode is RuntimeExecutionMode.BATCH

    def _checkpoint_settings(self) -> CheckpointSettings:
        """The checkpoint config's settings with the defaults filled in: a checkpoint directory
        in the temp dir, the configured savepoint directory."""
        settings, cfg = self._checkpoint_config.settings, self._config
        if settings.storage is None:
            settings = replace(
                settings,
                storage=os.path.join(tempfile.gettempdir(), "tidegate-checkpoints"),
                storage_defaulted=True,
            )
        if settings.savepoint_dir is None:
            configured = cfg.get_string(SAVEPOINT_DIR) or cfg.get_string(STATE_SAVEPOINTS_DIR)
            if configured:
                settings = replace(settings, savepoint_dir=configured)
        return settings

    def _restore_settings(self) -> dict[str, Any]:
        """The JobSpec fields that say what to restore from and how (Flink's and tidegate's
        keys, the CLI's flags first)."""
        overrides, cfg = self.cli_overrides, self._config
        return {
            "restore_fallback": bool(overrides.get("restore_fallback"))
            or cfg.get_boolean(RESTORE_FALLBACK, False),
            "restore_path": overrides.get("restore_path")
            or cfg.get_string(STATE_RECOVERY_PATH)
            or cfg.get_string(SAVEPOINT_PATH),
            "allow_non_restored_state": bool(
                overrides.get("allow_non_restored_state")
                or cfg.get_boolean(IGNORE_UNCLAIMED_STATE, False)
                or cfg.get_boolean(SAVEPOINT_IGNORE_UNCLAIMED_STATE, False)
            ),
            "restore_mode": RestoreMode.parse(
                overrides.get("restore_mode")
                or cfg.get_string(CLAIM_MODE)
                or cfg.get_string(SAVEPOINT_RESTORE_MODE)
                or RestoreMode.NO_CLAIM
            ),
        }

    def execute_async(self, job_name: str | None = None) -> JobClient:
        spec = self._job_spec(job_name)
        self._stream_graph.clear_sinks()  # a later execute() runs only what is added since
        capture = self.cli_overrides.get("capture_job_spec")
        if capture is not None:  # `tidegate check-restore`: build the job, never start it
            capture(spec)
        if spec.runner not in ("spark", "local"):
            raise ValueError(f"unknown runner {spec.runner!r}: use 'spark' or 'local'")
        jobmaster = JobMaster(spec)
        rest.register_job(jobmaster, spec.configuration)  # the driver's REST API and dashboard
        client = JobClient(jobmaster)
        hook = self.cli_overrides.get("on_submit")
        if hook is not None:
            hook(client)
        return client

    def execute(self, job_name: str | None = None) -> JobExecutionResult:
        """Run the job and wait for it; raises JobExecutionException if it fails."""
        return self.execute_async(job_name).get_job_execution_result().result()

    def close(self) -> None:
        pass


def _check_uids(graph: JobGraph) -> None:
    """`pipeline.auto-generate-uids` is false: every operator must have a uid."""
    missing = [op.name for v in graph.vertices.values() for op in v.operators if op.uid_generated]
    if missing:
        raise ValueError(
            f"auto-generated uids are disabled (pipeline.auto-generate-uids), but these "
            f"operators have no uid: {missing}; give each one .uid('...') (a stable name its "
            "state is found by in savepoints)"
        )


def _produced_type(source: Source) -> Any:
    """The type a source declares for its records (as PyFlink's sources do through their
    format, e.g. a FileSource of CsvReaderFormat: its row type), None if it declares none."""
    produced = getattr(source, "get_produced_type", None)
    return produced() if callable(produced) else None


def _converted(elements: list[Any], type_info: TypeInformation) -> list[Any]:
    convert = converter(type_info)
    out = []
    for i, element in enumerate(elements):
        try:
            out.append(convert(element))
        except RecordTypeError as e:
            raise RecordTypeError(
                f"from_collection: element {i} does not match type_info {type_info!r}: {e}"
            ) from None
    return out
