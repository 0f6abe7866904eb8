"""keras_nbguard's own warnings: what it could not do, while the user's code ran regardless."""

from __future__ import annotations

import warnings


class NbguardWarning(UserWarning):
    """Something keras_nbguard could not do; the user's code ran regardless."""


def warn(message: str, stacklevel: int = 2) -> None:
    warnings.warn(f"keras_nbguard: {message}", NbguardWarning, stacklevel=stacklevel + 1)


class WarnOnce:
    """Each distinct message once per session: a failure that repeats every run says so once."""

    def __init__(self) -> None:
        self.said: set[str] = set()

    def __call__(self, message: str) -> bool:
        if message in self.said:
            return False
        self.said.add(message)
        warn(message, stacklevel=3)
        return True
