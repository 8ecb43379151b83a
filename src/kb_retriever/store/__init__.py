"""I/O: the PostgreSQL + pgvector store. Only this package touches a connection."""
