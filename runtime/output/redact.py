"""`StreamRedactor`: secrets redacted in a stream that arrives in pieces.

Task output reaches the client in pieces cut wherever the worker flushed (a partial write and a
flush, one character per write, a write longer than an `Output` frame's 1 MiB piece). Redacting each
piece alone lets a secret split across two pieces through whole. So, per stream, the redactor keeps
back the end of each piece that could be the beginning of a secret — the longest suffix that is a
proper prefix of some secret value, never more than the longest secret minus one character — and
puts it in front of the next piece of the same stream. What is held goes out at the end of the task
(`release`). Text with no such suffix is passed on whole and at once, so output waits only when it
ends in what may be the first characters of a secret, and a pool without secrets never uses this.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable

from ..events.log import REDACTED

__all__ = ["StreamRedactor", "NOTHING_HELD"]

#: What `owner` returns for a stream that holds nothing.
NOTHING_HELD = object()


class StreamRedactor:
    """Redacts `secrets` in streams identified by a key; each stream's held tail stays with its owner
    (the task that wrote it) so it is released to that task's sinks."""

    def __init__(self, secrets: Iterable[str]) -> None:
        self.secrets = tuple(sorted({s for s in secrets if s}, key=len, reverse=True))
        if not self.secrets:
            raise ValueError("StreamRedactor needs at least one non-empty secret")
        self._held: dict[Hashable, tuple[object, str]] = {}

    def __repr__(self) -> str:
        return f"<StreamRedactor secrets={len(self.secrets)} holding={len(self._held)}>"

    def redact(self, text: str) -> str:
        """`text` with every whole secret value replaced by `***`."""
        for secret in self.secrets:
            if secret in text:
                text = text.replace(secret, REDACTED)
        return text

    def owner(self, key: Hashable) -> object:
        """Who wrote the text held for `key` (`NOTHING_HELD` if nothing is held)."""
        held = self._held.get(key)
        return held[0] if held is not None else NOTHING_HELD

    def feed(self, key: Hashable, owner: object, text: str) -> str:
        """The redacted text of `key`'s stream that is safe to pass on now (maybe ""); the rest is
        held. Text held for another owner must be `release`d first."""
        held = self._held.pop(key, None)
        if held is not None:
            text = held[1] + text
        text = self.redact(text)
        keep = self._tail(text)
        if keep:
            self._held[key] = (owner, text[-keep:])
            return text[:-keep]
        return text

    def release(self, key: Hashable) -> tuple[object, str] | None:
        """(owner, text) held for `key`, now let go (the stream ended: no secret can complete)."""
        return self._held.pop(key, None)

    def keys(self) -> list[Hashable]:
        return list(self._held)

    def _tail(self, text: str) -> int:
        """Length of the longest suffix of `text` that is a proper prefix of a secret."""
        n = len(text)
        best = 0
        for secret in self.secrets:
            first = secret[0]
            p = text.find(first, max(0, n - len(secret) + 1))
            while p != -1 and n - p > best:
                if secret.startswith(text[p:]):
                    best = n - p  # the earliest start is the longest suffix for this secret
                    break
                p = text.find(first, p + 1)
        return best
