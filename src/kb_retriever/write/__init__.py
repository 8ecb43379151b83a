"""Writing: files (``from_files``) and records (``from_memory``) into drafts and into the store,
bulk loads (``bulk``), and what follows a write (``recalibrate``)."""
