import sys
from pathlib import Path

# tests/ holds helper modules (chapter_cases.py) imported by the test files.
sys.path.insert(0, str(Path(__file__).resolve().parent))
