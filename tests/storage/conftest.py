import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))  # storage_helpers.py (importlib mode does not add test folders)

from storage import BlockStore  # noqa: E402


@pytest.fixture
def store(tmp_path):
    return BlockStore(tmp_path / "data")
