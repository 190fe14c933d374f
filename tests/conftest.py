import os
import sys
from pathlib import Path

import pytest
from hypothesis import settings

ROOT = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("PLANNER_SHARED_DATA", ROOT.parent / "shared" / "data"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

# property tests draw the same examples on every run (CI judges the code, not the draw);
# HYPOTHESIS_PROFILE=explore draws fresh random ones to hunt for counter-examples
settings.register_profile("ci", derandomize=True, database=None, print_blob=True)
settings.register_profile("explore", derandomize=False, print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


@pytest.fixture
def root():
    return ROOT


@pytest.fixture
def shared_data():
    if not SHARED.is_dir():
        pytest.skip(f"shared data not found at {SHARED}")
    return SHARED
