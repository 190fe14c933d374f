"""The problem: what is planned and the data that describe it.

Holds the instance (GPUs, domains, WAN, workload), the model profile and its
units, the plan and its micro-batch op lists, the network with its routes
and its states (``NetworkStates``, generated and loaded traces), the plan
space of shapes a plan may take (tensor-parallel degree, micro-batch size,
stage count, partitions), an instance built from measured latency and
throughput matrices (``measured``), the rank map of a launched job, the
JSON Schemas of the files, the errors with their exit codes, and file I/O.

Data and plain functions only.  It may import nothing else of ``planner``:
every other family stands on it.  Objects show themselves through views that
:mod:`planner.presentation` registers (:mod:`planner.problem.views`).
"""
