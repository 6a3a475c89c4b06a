"""From the user's program to the plan the runtime executes: the StreamGraph of transformations
(`stream_graph`, filled by the DataStream API) and its translation into a JobGraph of chained
vertices and edges with partitioners (`job_graph`; the result types are in `runtime.plan`).
"""
