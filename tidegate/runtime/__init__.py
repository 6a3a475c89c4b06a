"""What runs in a slot (one worker process): the slot's start-up and its subtasks (`slot`,
`task`), their input gates, channels and record writers (`gate`, `network`, `partitioners`,
`frames`), barrier alignment (`barriers`, pure), operators (`operators`, `co_process`,
`broadcast`, `interval_join`, `windows/`, `connector_operators`), timers, watermarks and
timestamps, and the control connection to the driver (`control`, `messages`, `auth`).
Never imports `datastream`, `graph` or `deploy`.
"""
