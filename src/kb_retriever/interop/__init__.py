"""Framework documents to and from kb-retriever (``coerce``: lenient readers of metadata values)."""
