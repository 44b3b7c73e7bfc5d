"""Evaluation data: the embedded tasks (no network) and the user's own ImageFolder data."""

from optbench.tasks.base import TaskData, task_for

__all__ = ["TaskData", "task_for"]
