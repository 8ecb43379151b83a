"""The prompt: the rejected, related and context blocks (``compose``) and the plain-text
rendering of a result for the command line (``render``)."""

from .compose import PromptTemplate, compose_prompt

__all__ = ["PromptTemplate", "compose_prompt"]
