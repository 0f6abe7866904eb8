"""``--prestart``: the next run's process, started while the user reads this run's result, and
the ``Context`` a child inherits from the kernel as it starts (a spare is used only while the
kernel's is still the same)."""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from keras_nbguard.isolation.parent import Child


@dataclass(frozen=True)
class Context:
    """What a child inherits from the kernel as it starts: a pre-started one is used only while
    the kernel's are still the same."""

    cwd: str
    environ: tuple[tuple[str, str], ...]
    path: tuple[str, ...]

    @classmethod
    def now(cls) -> Context:
        return cls(os.getcwd(), tuple(sorted(os.environ.items())), tuple(sys.path))

    def changed(self, other: Context) -> str | None:
        """What changed from ``self`` to ``other``, in words (None: nothing)."""
        if self.cwd != other.cwd:
            return "the working folder changed"
        if self.environ != other.environ:
            was, now = dict(self.environ), dict(other.environ)
            names = sorted(k for k in was.keys() | now.keys() if was.get(k) != now.get(k))
            return f"the environment changed ({', '.join(names[:3])})"
        if self.path != other.path:
            return "sys.path changed"
        return None


class Spare:
    """The next run's process, started while the user reads this run's result (``--prestart``)
    with the cell's imports loaded, so that the next run skips the interpreter's and the
    framework's start-up. One per kernel; it holds the memory of what it imported meanwhile.
    It is not used if the kernel's working folder, environment or ``sys.path`` changed since it
    started (a fresh process is: the spare is closed)."""

    def __init__(self) -> None:
        self.child: Child | None = None
        self.why_not: str | None = None  # why the last spare was not used

    def take(self) -> Child | None:
        child, self.child = self.child, None
        self.why_not = None
        if child is None:
            return None
        changed = child.context.changed(Context.now())
        if changed is None and child.alive():
            child.prestarted = True
            return child
        self.why_not = changed or "it had ended"
        child.kill()
        child.close()
        return None

    def make(self, preload: Sequence[str]) -> None:
        from keras_nbguard.isolation.parent import Child

        self.close()
        self.child = Child(preload)

    def close(self) -> None:
        if self.child is not None:
            self.child.kill()  # waiting for a job, or still importing: nothing to lose
            self.child.close()
            self.child = None
