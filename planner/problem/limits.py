"""Caps on the figures an input may give, all in one place.

Each cap is far above any real deployment, so a valid instance never meets
one; they exist so that an absurd or mistyped figure (``gpus = 100000000000``,
a global batch of 10^12) is rejected at once with the reason, instead of
making the planner allocate memory that grows with it.  ``REASONS`` gives
the reason the error message carries; ``docs/guide.md`` (file formats)
lists the same table.
"""

from __future__ import annotations

# -- the machine -----------------------------------------------------------------
MAX_TOTAL_GPUS = 10**8          # all domains together: more than exist on Earth (~10^7 datacenter GPUs)
MAX_GPUS_PER_NODE = 4096        # one NVLink/scale-up node (the largest today: 576)
MAX_DOMAINS = 1000              # datacenters in one instance
MAX_LINKS = 100_000             # WAN links in one instance
MAX_PEAK_TFLOPS = 1e6           # per GPU (an H100 gives ~10^3)
MAX_MEMORY_GB = 1e6             # per GPU (today ~10^2)
MAX_BANDWIDTH_GBPS = 1e9        # any link or NIC, Gbit/s (1 Ebit/s)
MAX_LATENCY_MS = 1e6            # one way (about 17 minutes: further than Mars)
MAX_UNIT_OVERHEAD_MS = 1e6      # fixed time per unit and micro-batch (SPEC v3)
MAX_PRICE = 1e9                 # per GPU-hour or per GB, any currency

# -- the workload ----------------------------------------------------------------
MAX_GLOBAL_BATCH = 10**7        # sequences per iteration (real runs: 10^3 to 10^4)
MAX_SEQ_LEN = 10**8             # tokens per sequence (the longest contexts: ~10^7)
MAX_LAYERS = 10_000             # transformer blocks, and entries of an explicit [[units]] list
MAX_HIDDEN = 10**6              # hidden, FFN and head counts (real: ~10^4 to 10^5)
MAX_VOCAB = 10**8               # vocabulary entries (real: ~10^5)
MAX_GPU_TYPES = 1000           # entries of [[gpus]] (one per domain at most is useful)
MAX_LIST = 64                   # entries of micro_batch_sizes, tensor_parallel
MAX_STAGES = 10_000             # options.max_stages (it is also capped by the unit count)
MAX_UNIT_FIGURE = 1e18          # params, FLOPs or bytes per token of one explicit unit

# -- what the planners build -----------------------------------------------------
# The simulator compiles one iteration into ~9 operations per stage and micro-batch
# (about 3 kB per stage x micro-batch pair); shapes with more stage x micro-batch pairs
# than this are left out of the plan space, and a plan file asking for more is refused.
MAX_STAGE_MICRO_BATCHES = 200_000

# -- command-line counts ---------------------------------------------------------
MAX_ITERATIONS = 10**8          # simulate/bench: training iterations of a rollout
MAX_TRACE_HOURS = 24 * 366      # trace generate / bench: one year of 5-minute epochs
MAX_ROBUST = 1000               # plan --robust K: sampled network states
MAX_RL_STEPS = 10**8            # rl train --steps, bench --rl-steps
MAX_SEED = 2**31 - 1            # seeds: what NumPy and OR-Tools both take (from 0)
MAX_WORKERS = 1024              # threads, CP-SAT workers, shapes per wave

REASONS = {
    "gpus": "more GPUs than exist on Earth",
    "gpus_per_node": "larger than any scale-up node",
    "domains": "more datacenters than the planner is meant for",
    "links": "more WAN links than the planner is meant for",
    "peak_tflops": "no GPU is that fast",
    "memory_gb": "no GPU has that much memory",
    "nvlink_bandwidth_gbps": "faster than any interconnect",
    "intra_bandwidth_gbps": "faster than any interconnect",
    "bandwidth_gbps": "faster than any interconnect",
    "uplink_gbps": "faster than any interconnect",
    "unit_overhead_ms": "an absurd fixed time per unit (over 16 minutes)",
    "latency_ms": "a one-way latency longer than the light time to Mars",
    "price_per_gpu_hour": "an absurd price",
    "wan_price_per_gb": "an absurd price",
    "global_batch_size": "an absurd global batch (real runs use 10^3-10^4 sequences)",
    "seq_len": "an absurd sequence length",
    "num_layers": "an absurd number of layers",
    "units": "an absurd number of units",
    "hidden_size": "an absurd hidden size",
    "ffn_hidden_size": "an absurd FFN size",
    "num_heads": "an absurd head count",
    "num_kv_heads": "an absurd head count",
    "vocab_size": "an absurd vocabulary",
    "micro_batch_sizes": "too many candidates",
    "tensor_parallel": "too many candidates",
    "max_stages": "an absurd number of stages",
    "params": "an absurd figure",
    "fwd_flops_per_token": "an absurd figure",
    "out_bytes_per_token": "an absurd figure",
    "stored_bytes_per_token": "an absurd figure",
    "tp_bytes_per_token": "an absurd figure",
}


def reason(field: str | None) -> str | None:
    """The reason a cap on ``field`` (a dotted path such as ``domains[0].gpus``) exists."""
    if not field:
        return None
    last = field.split(".")[-1].split("[")[0]
    return REASONS.get(last)
