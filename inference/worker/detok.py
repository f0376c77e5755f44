"""Incremental detokenization: text deltas that concatenate to the final text.

Decodes the whole emitted id list each time (sequences are short) and emits only what is
stable: never a trailing U+FFFD (half of a multi-byte UTF-8 character), and, when the
request has stop strings, never the last ``max(len(stop)) - 1`` characters (they may turn
out to be the start of a stop string, which OpenAI leaves out of the text). At the finish the
text is cut before the stop string and the rest is flushed.
"""

from __future__ import annotations


class Detokenizer:
    def __init__(self, tokenizer, *, stop: list[str] | None = None, prefix_ids=(), sent: str = ""):
        self.tokenizer = tokenizer
        self.stop = [s for s in (stop or []) if s]
        self.hold = max(map(len, self.stop), default=1) - 1
        self.ids: list[int] = list(prefix_ids)  # tokens emitted before (a resumed generation)
        self.sent = sent  # text already streamed

    def _decode(self) -> str:
        return self.tokenizer.decode(self.ids) if self.tokenizer is not None else ""

    def push(self, tokens: list[int]) -> str:
        """Add tokens; return the new stable text (maybe empty)."""
        self.ids.extend(tokens)
        text = self._decode()
        cut = self._stop_cut(text)
        if cut is not None:
            stable = text[:cut]
        else:
            stable = text.rstrip("\ufffd")
            if self.hold:
                stable = stable[: max(len(self.sent), len(stable) - self.hold)]
        return self._advance(stable)

    def finish(self) -> str:
        """All remaining text (cut before a stop string)."""
        text = self._decode()
        cut = self._stop_cut(text)
        return self._advance(text if cut is None else text[:cut])

    def _stop_cut(self, text: str) -> int | None:
        hits = [i for i in (text.find(s) for s in self.stop) if i >= 0]
        return min(hits) if hits else None

    def _advance(self, stable: str) -> str:
        if len(stable) <= len(self.sent) or not stable.startswith(self.sent):
            return ""
        delta = stable[len(self.sent) :]
        self.sent = stable
        return delta

    @property
    def text(self) -> str:
        return self.sent
