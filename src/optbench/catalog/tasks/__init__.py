"""Evaluation data: the embedded tasks (no network) and the user's own ImageFolder data."""

from optbench.catalog.tasks.base import TaskData, task_for

__all__ = ["TaskData", "task_for"]
