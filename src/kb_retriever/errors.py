"""The one exception tree of kb-retriever.

::

    KbError                      base of everything the library raises on purpose
    ├── ConfigError              invalid setting or option (names the valid values)
    ├── InputError               bad caller input: empty/oversized query, unknown filter, bad limit
    │   └── FilterError          unknown filter key or malformed filter value
    ├── StoreError               the database failed or could not be reached (password redacted)
    │   ├── UnavailableError     the server could not be reached (connection refused, lost, none free)
    │   │   └── IngestInterruptedError  lost during an ingest: what was saved before it, what was not
    │   ├── QueryTimeoutError    a statement ran past its timeout (or was cancelled): nothing of it saved
    │   └── SchemaError          schema/embedding-dimension mismatch, missing ``vector`` extension
    ├── EmbeddingError           the embedder failed or returned NaN/inf/wrong-dimension vectors
    └── IngestError              a file could not be read or parsed (the old version stays intact)
        └── WriteError           some documents of one call were saved and some not: which is which

Driver errors (psycopg) are translated into :class:`StoreError` in one place,
``kb_retriever.store.connection``.
"""

from __future__ import annotations

import re
from typing import Any

__all__ = [
    "ConfigError",
    "EmbeddingError",
    "FilterError",
    "IngestError",
    "IngestInterruptedError",
    "InputError",
    "KbError",
    "QueryTimeoutError",
    "SchemaError",
    "StoreError",
    "UnavailableError",
    "WriteError",
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


class UnavailableError(StoreError):
    """The server could not be reached: the connection was refused or lost, or none was free
    in time. A read may go to another server; a write's outcome may be unknown."""


class IngestInterruptedError(UnavailableError):
    """The database connection was lost during an ingest, which stopped there.

    ``report`` holds what the ingest did before (each file in ``added`` / ``updated`` was
    committed whole; ``failed`` as reported), ``interrupted`` the file being written when the
    connection dropped (its outcome is unknown), ``remaining`` how many files after it were
    not read. Running the ingest again completes it: unchanged files are skipped."""

    def __init__(self, report: Any, *, interrupted: str, remaining: int, cause: str) -> None:
        # report: a kb_retriever.IngestReport (errors import nothing of the library)
        self.report, self.interrupted, self.remaining = report, interrupted, remaining
        super().__init__(
            f"the database connection was lost while ingesting {interrupted} (its outcome is "
            f"unknown; {remaining} more files not read); before it: {report.summary()}. Run "
            f"the ingest again: unchanged files are skipped. ({cause})")


class QueryTimeoutError(StoreError):
    """The database cancelled a statement: it ran past its ``statement_timeout``
    (``KB_STATEMENT_TIMEOUT_MS``; a write waiting on another's lock counts its wait) or an
    operator cancelled it. Its transaction was rolled back, so a write saved nothing of it; the
    server is up, so a caller may answer without the result or try again later."""


class SchemaError(StoreError):
    """The database schema does not fit (embedding dimension, missing extension)."""


class EmbeddingError(KbError):
    """The embedder failed or returned unusable vectors."""


class IngestError(KbError):
    """A source file could not be ingested; nothing was written for it."""


class WriteError(IngestError):
    """Some documents of one write were not saved. ``saved`` lists the ids that were (each
    committed, whole), ``failed`` maps each id that was not to the reason; a failed document
    keeps its previous version."""

    def __init__(self, saved: list[str], failed: dict[str, str]) -> None:
        self.saved, self.failed = saved, failed
        reasons = "; ".join(f"{doc_id}: {why}" for doc_id, why in list(failed.items())[:5])
        more = f" (and {len(failed) - 5} more)" if len(failed) > 5 else ""
        super().__init__(f"{len(failed)} document(s) not saved, {len(saved)} saved: "
                         f"{reasons}{more}")


_PASSWORD_IN_URL = re.compile(r"(://[^:/@\s]*:)([^@\s]*)(@)")
_PASSWORD_KV = re.compile(r"(password\s*=\s*)('[^']*'|\S+)", re.IGNORECASE)
# libpq's parse errors of a connection string quote the token they stopped at, which may be
# (part of) its password: a raw "%" in a URL's, the second word of an unquoted one.
_PARSE_TOKEN = re.compile(r'(invalid percent-encoded token: |missing "=" after )"[^"]*"')


def redact(text: str) -> str:
    """Hide passwords in connection strings and driver messages."""
    text = _PASSWORD_IN_URL.sub(r"\1***\3", text)
    text = _PARSE_TOKEN.sub(r'\1"***"', text)
    return _PASSWORD_KV.sub(r"\1***", text)


def printable(text: object, keep: str = "") -> str:
    r"""``text`` with control characters escaped, for a terminal: a file name or a title must
    not move the cursor or recolour it (``\x1b[2J``), nor forge a line of the output (``\n``).
    The characters of ``keep`` stay as they are (a prompt's line feeds and tabs).

    >>> print(printable("a\x1b[2Jb\nc"))
    a\x1b[2Jb\nc
    >>> print(printable("a\x1b[2Jb\nc", keep="\n"))
    a\x1b[2Jb
    c
    """
    return "".join(c if c.isprintable() or c in keep else repr(c)[1:-1] for c in str(text))
