"""Write the tiny mixed variants the typed RL policy trains on (tests/gpu_types_instances.py's
builders): tiny-3dc with gamma on toy-2tf, tiny-line with b on toy-2tf.

    PYTHONPATH=. python models/rl/types-instances/make_tiny.py
"""
import sys
from pathlib import Path

here = Path(__file__).resolve().parent
sys.path.insert(0, str(here.parents[2] / "tests"))

from gpu_types_instances import tiny_mixed  # noqa: E402

from planner.problem.io import write_instance  # noqa: E402

for base, fast, name in (("tiny-3dc", ("gamma",), "tiny-3dc-gamma2tf"), ("tiny-line", ("b",), "tiny-line-b2tf")):
    inst = tiny_mixed(base, fast=fast)
    data = inst.to_dict()
    data["name"] = name
    data["workload"]["model"] = inst.workload.model.name
    write_instance(data, [f"{name}: {base} with {', '.join(fast)} on toy-2tf (twice as fast, 54 MB usable)",
                          "SYNTHETIC, for training the typed RL policy (models/rl/types.zip); "
                          "written by models/rl/types-instances/make_tiny.py"], here / f"{name}.toml")
