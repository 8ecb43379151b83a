"""The one exception tree of kb-retriever.

::

    KbError                      base of everything the library raises on purpose
    ├── ConfigError              invalid setting or option (names the valid values)
    ├── InputError               bad caller input: empty/oversized query, unknown filter, bad limit
    │   └── FilterError          unknown filter key or malformed filter value
    ├── StoreError               the database failed or could not be reached (password redacted)
    │   └── SchemaError          schema/embedding-dimension mismatch, missing ``vector`` extension
    ├── EmbeddingError           the embedder failed or returned NaN/inf/wrong-dimension vectors
    └── IngestError              a file could not be read or parsed (the old version stays intact)

Driver errors (psycopg) are translated into :class:`StoreError` in one place,
``kb_retriever.store.connection``.
"""

from __future__ import annotations

import re

__all__ = [
    "ConfigError",
    "EmbeddingError",
    "FilterError",
    "IngestError",
    "InputError",
    "KbError",
    "SchemaError",
    "StoreError",
    "redact",
]


class KbError(Exception):
    """Base class of every error kb-retriever raises on purpose."""


class ConfigError(KbError, ValueError):
    """A setting or option is invalid; the message names the valid values."""


class InputError(KbError, ValueError):
    """The caller's input is invalid (query, limit, filters, ...)."""


class FilterError(InputError):
    """A filter key is unknown or a filter value is malformed."""


class StoreError(KbError):
    """The database failed or could not be reached."""


class SchemaError(StoreError):
    """The database schema does not fit (embedding dimension, missing extension)."""


class EmbeddingError(KbError):
    """The embedder failed or returned unusable vectors."""


class IngestError(KbError):
    """A source file could not be ingested; nothing was written for it."""


_PASSWORD_IN_URL = re.compile(r"(://[^:/@\s]*:)([^@\s]*)(@)")
_PASSWORD_KV = re.compile(r"(password\s*=\s*)('[^']*'|\S+)", re.IGNORECASE)


def redact(text: str) -> str:
    """Hide passwords in connection strings and driver messages."""
    text = _PASSWORD_IN_URL.sub(r"\1***\3", text)
    return _PASSWORD_KV.sub(r"\1***", text)
