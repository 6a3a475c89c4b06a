"""Running a job: the JobMaster (one per job, in the driver) with its attempts, restart
strategy, restore planning and user-triggered snapshots; the control server the slots connect
to; the runners that start the slots (`runners`: a Spark barrier stage, or local processes);
the SparkSession and the Java it needs. The slots themselves run `runtime` code.
"""
