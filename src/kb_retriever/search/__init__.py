"""The search: the sans-I/O plan (``plan``), its stages (``pipeline``, ``graph``,
``rejected_channel``) and the typed record of what a search did (``meta``)."""
