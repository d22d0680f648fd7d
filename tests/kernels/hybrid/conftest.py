import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))  # hybrid_cases.py (importlib mode does not add test folders)
