import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))  # flow_cases.py (importlib mode does not add test folders)


@pytest.fixture(scope="session")
def prefect_harness():
    """One temporary Prefect API for every flow test (a fresh database took 22 s to come up on 2 cores)."""
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=120):
        yield
