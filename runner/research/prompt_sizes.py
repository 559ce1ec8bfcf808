"""How big a patch prompt may grow: each part's share, scaled to the model's context window.

A large hosted model takes the defaults; a local server with an 8-32k token window gets every part
cut down together (fewer and shorter file excerpts, less evidence, clipped functions), so that a
patch is asked for with less context rather than refused by the server.
"""

from __future__ import annotations

from dataclasses import dataclass

MAX_FILES = 5
MAX_FILE_CHARS = 24_000
WINDOW_LINES = 60
MAX_SHRINKS = 2
"""Times a prompt that did not fit the model's context window is asked again, smaller."""
PROMPT_OVERHEAD = 6_000
"""Characters of a patch prompt that do not shrink: the instructions, the schema, the hypothesis."""


@dataclass(frozen=True)
class Sizes:
    """How much of each part a patch prompt holds, in characters. The defaults suit a large
    context window; `fit` scales every part down together for a smaller one (a local server's
    8-32k tokens), so that a patch is asked for with less context rather than not at all."""

    files: int = MAX_FILES
    file_chars: int = MAX_FILE_CHARS
    evidence_item: int = 3_000
    evidence_total: int = 20_000
    patch_chars: int = 20_000
    """The patch to rebase or repair."""
    output_chars: int = 6_000
    """The failed build's or checks' output a repair shows."""
    function_chars: int = 6_000
    """Each function of a port (the fork's and the baseline's)."""
    window_lines: int = WINDOW_LINES
    """Lines each side of a reference implementation's line."""

    @property
    def total(self) -> int:
        """The most a prompt built with these sizes holds (port functions: four pairs counted)."""
        references = 3 * (2 * self.window_lines + 1) * 80
        return (
            self.files * self.file_chars
            + self.evidence_total
            + 2 * self.patch_chars
            + self.output_chars
            + 8 * self.function_chars
            + references
            + PROMPT_OVERHEAD
        )

    @classmethod
    def fit(cls, chars: int | None) -> Sizes:
        """The sizes for a prompt of at most `chars` characters (None: no known limit)."""
        full = cls()
        if chars is None or chars >= full.total:
            return full
        scale = max(0.02, (chars - PROMPT_OVERHEAD) / (full.total - PROMPT_OVERHEAD))
        return cls(
            files=max(1, min(MAX_FILES, round(MAX_FILES * scale * 2))),
            file_chars=max(1_000, int(full.file_chars * scale)),
            evidence_item=max(300, int(full.evidence_item * scale)),
            evidence_total=max(600, int(full.evidence_total * scale)),
            patch_chars=max(1_000, int(full.patch_chars * scale)),
            output_chars=max(500, int(full.output_chars * scale)),
            function_chars=max(500, int(full.function_chars * scale)),
            window_lines=max(8, int(full.window_lines * scale)),
        )


FULL = Sizes()
"""The sizes for a model whose window is large or unknown."""
