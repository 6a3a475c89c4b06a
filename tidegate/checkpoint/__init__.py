"""Checkpoints as the driver handles them: the coordinator that triggers them and collects the
subtasks' acknowledgements (`coordinator`, `pending`, `scheduling`, `failure_manager`), what a
completed one is and where it lives (`metadata`, `store`, `storage`, `fencing`, `savepoints`),
choosing and checking one for a restore (`selection`, `verification`), and state assignment:
which restored state each new subtask gets (`assignment`, pure). Uses `state` for key groups and
state files; knows nothing of the runtime's tasks or of Spark (docs/architecture.md).
"""
