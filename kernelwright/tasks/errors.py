"""The one exception the task loader raises for any bad input."""

from __future__ import annotations

from kernelwright.errors import BadInput


class TaskError(BadInput, ValueError):
    """A task spec or task file that cannot be loaded; the message is one line naming the problem."""

    def __init__(self, message: str) -> None:
        # Callers print this straight to a terminal or a JSON field, so keep it on one line even
        # when it embeds text from elsewhere (an OS error, a SyntaxError message).
        super().__init__(" ".join(message.split()))
