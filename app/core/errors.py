"""Errors a person can cause, each with a message written for that person."""

from __future__ import annotations


class QuickdraftError(Exception):
    """Base of every error the engine reports to a user (never shown as a traceback)."""


class InvalidParameterError(QuickdraftError, ValueError):
    """A setting or flag value out of its range, named by its parameter so a front end can name its
    own control (the CLI's flag, the window's field)."""

    def __init__(self, name: str, problem: str):
        super().__init__(f"{name} {problem}")
        self.name = name
        self.problem = problem


class InvalidMessagesError(QuickdraftError):
    """Chat messages that are not a list of {role, content} texts."""


class ChatTemplateError(QuickdraftError):
    """The model's chat template cannot render what must go through it (tools, a tool conversation):
    a plain transcript would lose them."""


class ModelFileError(QuickdraftError):
    """A model file is missing, not a GGUF, truncated or otherwise unreadable."""


class ModelLoadError(QuickdraftError):
    """llama.cpp refused to load a model (unknown architecture, out of memory, ...)."""


class IncompatibleDraftError(QuickdraftError):
    """The draft model's vocabulary does not match the main model's."""


class DrafterUnavailableError(QuickdraftError):
    """The chosen drafter cannot draft with what is loaded: MTP heads on a model without MTP layers, or
    on a llama.cpp build whose staging API changed; EAGLE-3 with no EAGLE-3 drafter as the draft."""


class LoadCancelledError(QuickdraftError):
    """A model's load was cut short on request (the window closing while it loads): nothing stays loaded."""


class PromptTooLongError(QuickdraftError):
    def __init__(self, n_prompt: int, n_ctx: int):
        super().__init__(
            f"The prompt is {n_prompt} tokens long but the context holds {n_ctx}. "
            f"Shorten the conversation or raise the context size."
        )
        self.n_prompt = n_prompt
        self.n_ctx = n_ctx


class DecodeError(QuickdraftError):
    """llama_decode failed during generation."""


class SlotFileError(QuickdraftError):
    """A server slot's cache could not be written to its file, or read back from one (seq_file.py)."""
