"""Errors raised by the engine.

``GrammarError`` is a ``ValueError`` so that callers validating user input can catch
the usual exception; its text names the line, column and rule where they are known.
"""

from __future__ import annotations


class GrammarError(ValueError):
    """A grammar (EBNF text, regular expression or IR) that cannot be compiled."""

    def __init__(
        self,
        message: str,
        *,
        line: int | None = None,
        column: int | None = None,
        rule: str | None = None,
    ) -> None:
        self.message = message
        self.line = line
        self.column = column
        self.rule = rule
        super().__init__(self._describe())

    def _describe(self) -> str:
        where = []
        if self.line is not None:
            where.append(f"line {self.line}")
        if self.column is not None:
            where.append(f"column {self.column}")
        if self.rule is not None:
            where.append(f"rule {self.rule!r}")
        return f"{self.message} ({', '.join(where)})" if where else self.message

    def __reduce__(self):
        return (_rebuild, (type(self), self.message, self.line, self.column, self.rule))


def _rebuild(cls, message, line, column, rule):
    return cls(message, line=line, column=column, rule=rule)


class EmptyLanguageError(GrammarError):
    """A grammar whose rules are well formed but that matches no string at all (an
    intersection without a common string, a class that matches nothing)."""


class UnsupportedRegexError(GrammarError):
    """A regular expression uses a feature outside the supported subset (lookaround, backreferences, ...)."""


class TokenBudgetError(ValueError):
    """No valid completion fits in the token budget."""
