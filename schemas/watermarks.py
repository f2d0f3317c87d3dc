"""One high-watermark sample of one topic: every partition, one message per tick."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class Watermarks:
    """High watermarks of all partitions of ``topic`` at ``sampled_at_ms`` (epoch ms).

    ``high_watermarks[i]`` is partition i's next offset to be written (the log end), and
    ``leaders[i]`` the broker id leading partition i (-1 when unknown) as of the last
    metadata refresh. A partition whose ListOffsets failed this tick is -1.
    """

    topic: str
    sampled_at_ms: int
    high_watermarks: tuple[int, ...]
    leaders: tuple[int, ...] = ()
    event: str = field(default="watermarks", init=False)
    v: int = field(default=1, init=False)
