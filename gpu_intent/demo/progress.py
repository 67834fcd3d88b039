"""The demo's progress while it waits for the story to end: pods bound and closed,
NodeClaims, seconds elapsed. On a terminal a live bar (``rich``); otherwise one plain
line every few seconds. Always on the stream it is given (the demo gives stderr), so
``--output json`` keeps stdout for the JSON object alone."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from types import TracebackType
from typing import Final, TextIO, cast

from rich.console import Console
from rich.file_proxy import FileProxy
from rich.progress import BarColumn, Progress, TaskID, TextColumn

#: Seconds between plain progress lines when the stream is not a terminal.
PLAIN_EVERY_SECONDS: Final = 5.0


@dataclass(frozen=True, slots=True)
class Counts:
    """Where the story is: of ``pods`` example pods, ``bound`` have a node and ``closed``
    have a closed status (`gpu_intent.demo.story`); ``claims`` NodeClaims created so far;
    ``elapsed`` seconds since the first pod was created."""

    pods: int
    bound: int
    closed: int
    claims: int
    elapsed: float

    def line(self) -> str:
        """``4/6 bound, 3/6 closed, 5 NodeClaims, 3.2s``."""
        return (
            f"{self.bound}/{self.pods} bound, {self.closed}/{self.pods} closed,"
            f" {self.claims} NodeClaim{'' if self.claims == 1 else 's'}, {self.elapsed:.1f}s"
        )


def is_terminal(stream: TextIO) -> bool:
    """``stream`` is an interactive terminal (False when it cannot say)."""
    isatty = getattr(stream, "isatty", None)
    try:
        return bool(isatty()) if isatty is not None else False
    except ValueError:  # a closed stream
        return False


class StoryProgress:
    """Progress on ``stream``: a live ``rich`` bar when ``live`` (default: ``stream`` is
    a terminal), else a plain ``progress: ...`` line at most every ``every`` seconds
    (``clock``: seconds, monotonic) and one at `close`. Use as a context manager around
    the wait; `above` routes the timeline's own lines above the bar."""

    def __init__(
        self,
        stream: TextIO,
        *,
        live: bool | None = None,
        every: float = PLAIN_EVERY_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.stream = stream
        self.live = is_terminal(stream) if live is None else live
        self.every = every
        self.clock = clock
        self._last_line: float | None = None
        self._counts: Counts | None = None
        self._bar: Progress | None = None
        self._task: TaskID | None = None

    def __enter__(self) -> StoryProgress:
        if self.live:
            self._bar = Progress(
                TextColumn("[bold]waiting for the story to end[/]"),
                BarColumn(),
                TextColumn("{task.fields[detail]}"),
                console=Console(file=self.stream),
                redirect_stdout=False,
                redirect_stderr=False,
                transient=True,
            )
            self._task = self._bar.add_task("story", total=None, detail="starting")
            self._bar.start()
        self._last_line = self.clock()
        return self

    def above(self, out: TextIO) -> TextIO:
        """Where lines meant for ``out`` go while the bar is live: through the bar's
        console, above the bar, when ``out`` is a terminal too; else ``out`` itself."""
        if self._bar is None or not is_terminal(out):
            return out
        return cast(TextIO, FileProxy(self._bar.console, out))

    def update(self, counts: Counts) -> None:
        """Show ``counts``: the bar at once, a plain line when ``every`` has passed."""
        self._counts = counts
        if self._bar is not None and self._task is not None:
            self._bar.update(
                self._task, total=counts.pods, completed=counts.closed, detail=counts.line()
            )
            return
        now = self.clock()
        if self._last_line is None or now - self._last_line >= self.every:
            self._last_line = now
            print(f"progress: {counts.line()}", file=self.stream, flush=True)

    def close(self) -> None:
        """Stop the bar, or write the last plain line."""
        if self._bar is not None:
            self._bar.stop()
            self._bar = None
            if self._counts is not None:
                print(f"story ended: {self._counts.line()}", file=self.stream, flush=True)
        elif self._counts is not None:
            print(f"progress: {self._counts.line()} (story ended)", file=self.stream, flush=True)

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.close()
