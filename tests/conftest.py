import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("PLANNER_SHARED_DATA", ROOT.parent / "shared" / "data"))
sys.path.insert(0, str(Path(__file__).resolve().parent))


@pytest.fixture
def root():
    return ROOT


@pytest.fixture
def shared_data():
    if not SHARED.is_dir():
        pytest.skip(f"shared data not found at {SHARED}")
    return SHARED
