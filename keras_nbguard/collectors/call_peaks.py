"""The peaks during one call of the user's (a fit, an evaluate, a predict): the kernel's RSS
high-water mark and the GPU allocator's peak, each reset as the call begins. The run's own peak is
not lost to those resets: what each mark held so far is folded into ``run_rss`` first."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from keras_nbguard.collectors.gpu import GpuCollector
    from keras_nbguard.collectors.process import PeakRss


class CallPeaks:
    """Without a ``PeakRss`` (or where it can't be reset) and a ``GpuCollector``: peaks unknown."""

    def __init__(self, rss: PeakRss | None = None, gpu: GpuCollector | None = None) -> None:
        self._rss = rss
        self._gpu = gpu
        self.run_rss: int | None = None  # the highest mark read before a reset

    def begin(self) -> None:
        if self._rss is not None:
            self._fold(self._rss.read())
            if not self._rss.reset():
                self._rss = None
        if self._gpu is not None:
            self._gpu.call_began()

    def end(self) -> tuple[int | None, int | None]:
        """(peak RSS, GPU allocator peak) during the call; None where unknown."""
        rss = None
        if self._rss is not None:
            rss = self._rss.read()
            self._fold(rss)
        gpu = self._gpu.call_ended() if self._gpu is not None else None
        return rss, gpu

    def _fold(self, mark: int | None) -> None:
        if mark is not None:
            self.run_rss = max(mark, self.run_rss or 0)
