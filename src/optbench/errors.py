"""The errors every layer may raise: bad input shown as one line, never a traceback. No imports."""

from __future__ import annotations


class UsageProblem(Exception):
    """Bad input from the user: shown as one line, never as a traceback."""


class UnknownNameError(UsageProblem, KeyError):
    """Raised for a name that is not registered; the message lists the valid names."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0])
