"""A rate over sampled windows, as Kafka's ``Rate`` over its ``SampledStat`` measures the
byte and request rates that client quotas bound.

Values fall into ``windows_num`` samples of ``window_ms`` each: a sample starts at the
first value after the previous one filled its time, and samples older than the whole
span are forgotten. The rate is the sum of the live samples over the time they cover,
counted as at least ``windows_num - 1`` whole windows, so one burst on an idle client is
spread over the span instead of reading as an enormous rate.

No clock of its own: every call takes ``now_ms``.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True)
class _Sample:
    start_ms: float
    value: float = 0.0


class SampledRate:
    def __init__(self, windows_num: int, window_ms: float, now_ms: float) -> None:
        assert windows_num >= 2 and window_ms > 0, (windows_num, window_ms)
        self.windows_num = windows_num
        self.window_ms = window_ms
        self._samples = [_Sample(now_ms)]
        self._current = 0

    def record(self, value: float, now_ms: float) -> None:
        sample = self._samples[self._current]
        if now_ms - sample.start_ms >= self.window_ms:
            sample = self._advance(now_ms)
        sample.value += value

    def rate(self, now_ms: float) -> float:
        """Per second, over the live samples."""
        self._forget_expired(now_ms)
        total = sum(s.value for s in self._samples)
        return total / (self.span_ms(now_ms) / 1000)

    def span_ms(self, now_ms: float) -> float:
        """The time the rate is measured over (Kafka's ``Rate.windowSize``)."""
        self._forget_expired(now_ms)
        elapsed = now_ms - min(s.start_ms for s in self._samples)
        full_windows = int(elapsed // self.window_ms)
        least = self.windows_num - 1
        if full_windows < least:
            elapsed += (least - full_windows) * self.window_ms
        return elapsed

    def _advance(self, now_ms: float) -> _Sample:
        self._current = (self._current + 1) % self.windows_num
        if self._current >= len(self._samples):
            self._samples.append(_Sample(now_ms))
        else:
            self._samples[self._current] = _Sample(now_ms)
        return self._samples[self._current]

    def _forget_expired(self, now_ms: float) -> None:
        expiry = self.windows_num * self.window_ms
        for i, sample in enumerate(self._samples):
            if now_ms - sample.start_ms >= expiry:
                self._samples[i] = _Sample(now_ms)
