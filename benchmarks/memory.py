"""Peak resident memory of one planner run (issue 17): INSTANCE SOLVER SECONDS -> one TSV row
(instance, solver, domains, GPUs, units, peak RSS MB with child processes, status, wall s).
The table in docs/guide.md ("Memory") comes from it; results in benchmarks/results/memory.tsv."""
import resource, sys, time, logging
from planner import load_instance
from planner.solvers import stop
from planner.solvers.registry import plan
name, solver, tl = sys.argv[1], sys.argv[2], float(sys.argv[3])
inst = load_instance(name)
t = time.perf_counter()
with stop.Watch(memory_limit_bytes=float("inf"), sigint=False, period_s=0.05) as w:
    p = plan(inst, solver=solver, time_limit=tl)
    peak = w.peak_rss
self_peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
print(f"{name}\t{solver}\t{len(inst.domains)}\t{inst.total_gpus}\t{inst.num_units}\t{max(peak, self_peak)/1e6:.0f}\t{p.solver.status}\t{time.perf_counter()-t:.0f}", flush=True)
