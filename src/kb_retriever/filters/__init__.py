"""Search filters: the typed dimensions (``dimensions``) and the expression language of
``$and`` / ``$or`` / ``$not`` (``expressions``)."""

from .dimensions import VALID_KEYS, SearchFilters, parse_filters

__all__ = ["VALID_KEYS", "SearchFilters", "parse_filters"]
