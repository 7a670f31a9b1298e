"""The input budget: the context window minus the completion reserve minus a safety margin."""

from __future__ import annotations

from dataclasses import dataclass

MIN_INPUT_BUDGET = 1_024
MAX_RESERVE_SHARE = 0.25
"""The completion reservation never takes more than this share of the window unless set explicitly."""
MIN_RESERVE = 256
COMPLETION_FLOOR = 256
"""No request asks for fewer completion tokens than this (or the whole reservation, when it is smaller)."""


def fit_reserve(window: int, wanted: int, *, explicit: bool = False) -> int:
    """The tokens to reserve for the answer in a `window`-token context.

    A reservation set explicitly (`--max-tokens`, `[context] max_tokens`, a model's
    `max_completion_tokens`) is kept as it is (Budget.make says when it cannot fit); a default one
    (a profile's 32,768) is cut to a quarter of the window, so a 4k local model keeps 3k for input.
    """
    if explicit:
        return wanted
    return max(1, min(wanted, max(MIN_RESERVE, int(window * MAX_RESERVE_SHARE))))


@dataclass(frozen=True)
class Budget:
    """Token limits for one model: where pruning and compaction start, and the hard limit.

    `margin` absorbs the error of the estimate (about 2% of the window by default).
    """

    window: int
    reserve: int
    margin: int
    prune_threshold: float = 0.70
    compact_threshold: float = 0.85

    @classmethod
    def make(
        cls,
        window: int,
        reserve: int,
        *,
        margin: int | None = None,
        prune_threshold: float = 0.70,
        compact_threshold: float = 0.85,
    ) -> Budget:
        """Validate the numbers and build a Budget; bad values raise ValueError with what to change."""
        if window <= 0:
            raise ValueError(f"the context window must be a positive number of tokens (got {window})")
        if reserve < 0:
            raise ValueError(f"max_completion_tokens must not be negative (got {reserve})")
        if not 0 < prune_threshold <= 1:
            raise ValueError(f"prune_threshold must be in (0, 1] (got {prune_threshold})")
        if not 0 < compact_threshold <= 1:
            raise ValueError(f"compact_threshold must be in (0, 1] (got {compact_threshold})")
        if margin is None:
            margin = max(256, window // 50)
        budget = cls(window, reserve, margin, prune_threshold, compact_threshold)
        if budget.input_budget < MIN_INPUT_BUDGET:
            raise ValueError(
                f"a context window of {window:,} tokens leaves only {budget.input_budget:,} tokens for input "
                f"after reserving {reserve:,} for the answer (max_completion_tokens) and a margin of {margin:,}; "
                "raise the context window (--context-window) or lower the answer's limit (--max-tokens, "
                "[context] max_tokens or the model's max_completion_tokens)"
            )
        return budget

    @property
    def input_budget(self) -> int:
        """The most tokens a request's input may take."""
        return self.window - self.reserve - self.margin

    @property
    def prune_at(self) -> int:
        return int(self.input_budget * self.prune_threshold)

    @property
    def compact_at(self) -> int:
        return int(self.input_budget * self.compact_threshold)


def parse_overflow(message: str, reserve: int) -> tuple[int | None, int | None]:
    """(input tokens the server counted, the server's window) from a context-length error message.

    Any server's wording (see `kimicode.llm.overflow`); a total that includes the completion (Moonshot's
    `requested: N`) has the completion taken off (`reserve`, what the request asked for).
    """
    from kimicode.llm.overflow import context_overflow

    found = context_overflow(None, message)
    if found is None:
        return None, None
    return found.prompt_estimate(reserve), found.window
