from pathlib import Path

from fleet.testing.ports import free_port

__all__ = ["REPO", "free_port"]

REPO = Path(__file__).resolve().parents[2]
