"""What the driver knows about its jobs while they run: checkpoint statistics
(`checkpoint_stats`), records, rates and backpressure (`job_metrics`), and failures and
restarts (`failures`). The JobMaster feeds them; the REST API and `tidegate run` read them."""
