"""The CLI's catalog commands: ``projects``, ``documents`` and ``delete``; and what ``search``
and ``prompt`` ask of the catalog and of their options: the search's keyword arguments, checked
before the knowledge base opens (:func:`checked_search`), and the hint for a search of a project
that holds nothing (:func:`hint_if_empty`).

Thin, like the rest of the CLI: the knowledge base's typed listings
(:meth:`~kb_retriever.KnowledgeBase.list_projects`, :meth:`~kb_retriever.KnowledgeBase.
list_documents`) and :meth:`~kb_retriever.KnowledgeBase.delete`; the SQL is the store's.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from typing import Any

from .errors import FilterError, printable
from .models import DocumentSummary

__all__ = ["COMMANDS", "add_parsers", "checked_search", "hint_if_empty", "resolve_keys",
           "search_kwargs"]


def add_parsers(sub: Any, scope: Callable[[argparse.ArgumentParser], None]) -> None:
    sp = sub.add_parser("projects", help="list the projects: documents, chunks, embedding model",
                        description="List the tenant's projects that hold documents, with their "
                                    "document and chunk counts and the embedding model each is "
                                    "bound to.")
    sp.add_argument("--tenant", default="default", help="tenant id (default: default)")
    sp.add_argument("--json", action="store_true", help="print a JSON list")
    sp = sub.add_parser("documents", help="list a project's documents",
                        description="List a project's documents: id, slug, title, canonical "
                                    "type and status, chunks.")
    scope(sp)
    sp.add_argument("--json", action="store_true", help="print a JSON list")
    sp = sub.add_parser("delete", help="delete documents by id or slug",
                        description="Delete whole documents of a project, named by id (a "
                                    "file's id is its path, as `documents` lists it) or slug. "
                                    "A deleted file comes back on its next ingest.")
    sp.add_argument("keys", nargs="+", metavar="ID_OR_SLUG", help="documents to delete")
    scope(sp)
    sp.add_argument("--json", action="store_true", help="print what was deleted as JSON")


def resolve_keys(keys: Sequence[str], listed: Sequence[DocumentSummary]
                 ) -> tuple[list[str], list[str]]:
    """The document ids ``keys`` name (an id first, else a slug), each once, and the keys that
    name no document.

    >>> doc = DocumentSummary("adr/0001.md", "0001", "dec-cache", "Cache", "markdown",
    ...                       "decision", "accepted", 2)
    >>> resolve_keys(["dec-cache", "adr/0001.md", "nope"], [doc])
    (['adr/0001.md'], ['nope'])
    """
    by_id = {d.id: d.id for d in listed}
    by_slug = {d.slug: d.id for d in listed if d.slug}
    ids: dict[str, None] = {}
    missing = []
    for key in keys:
        found = by_id.get(key) or by_slug.get(key)
        if found is None:
            missing.append(key)
        else:
            ids[found] = None
    return list(ids), missing


def _table(rows: list[list[str]], header: list[str]) -> str:
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()
                     for r in [header, *rows])


def cmd_projects(args: argparse.Namespace, kb_for: Callable[..., Any]) -> int:
    with kb_for(args, project="default", catalog=True) as kb:
        listed = kb.list_projects(tenant=args.tenant)
    if args.json:
        print(json.dumps([p.to_dict() for p in listed], indent=2, ensure_ascii=False))
        return 0
    if not listed:
        print(f"no projects with documents in tenant {printable(args.tenant)}")
        return 0
    print(_table([[printable(p.project), str(p.documents), str(p.chunks),
                   printable(p.model_id) if p.model_id else "-",
                   str(p.dimension) if p.dimension else "-"] for p in listed],
                 ["project", "documents", "chunks", "model", "dimension"]))
    return 0


def cmd_documents(args: argparse.Namespace, kb_for: Callable[..., Any]) -> int:
    with kb_for(args, catalog=True) as kb:
        listed = kb.list_documents(project=args.project, tenant=args.tenant)
    if args.json:
        print(json.dumps([d.to_dict() for d in listed], indent=2, ensure_ascii=False))
        return 0
    if not listed:
        print(f"no documents in project {printable(args.project)} of tenant "
              f"{printable(args.tenant)}")
        return 0
    print(_table([[printable(d.id), printable(d.slug or "-"), printable(d.title),
                   printable(d.canonical_type or "-"), printable(d.canonical_status or "-"),
                   str(d.chunks)] for d in listed],
                 ["id", "slug", "title", "type", "status", "chunks"]))
    return 0


def cmd_delete(args: argparse.Namespace, kb_for: Callable[..., Any]) -> int:
    with kb_for(args, catalog=True) as kb:
        ids, missing = resolve_keys(args.keys, kb.list_documents(
            project=args.project, tenant=args.tenant, keys=args.keys))
        deleted = kb.delete(ids, project=args.project, tenant=args.tenant) if ids else 0
    if args.json:
        print(json.dumps({"project": args.project, "tenant": args.tenant, "deleted": ids,
                          "deleted_count": deleted, "not_found": missing}, indent=2,
                         ensure_ascii=False))
    else:
        print(f"deleted {deleted} document{'' if deleted == 1 else 's'} from project "
              f"{printable(args.project)}" + (": " + ", ".join(printable(i) for i in ids)
                                               if ids else ""))
    # Nothing to delete for a key is bad input (a typo?): exit 2 with the one line on stderr,
    # as every bad input; what was found is deleted anyway.
    if missing:
        print(f"kb-retriever: not found in project {printable(args.project)}: "
              + ", ".join(printable(k) for k in missing), file=sys.stderr)
    return 2 if missing else 0


COMMANDS = {"projects": cmd_projects, "documents": cmd_documents, "delete": cmd_delete}


def search_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    """``kb.search``'s keyword arguments from the command's options (--filters parsed)."""
    filters = None
    if args.filters:
        try:
            filters = json.loads(args.filters)
        except json.JSONDecodeError as exc:
            raise FilterError(f"--filters is not valid JSON: {exc.msg}") from None
        except RecursionError:
            raise FilterError("--filters is nested too deeply") from None
    projects = [args.project, *args.also_project]
    return {"limit": args.limit, "filters": filters,
            "project": projects if len(projects) > 1 else args.project}


def hint_if_empty(kb: Any, args: argparse.Namespace, result: Any) -> None:
    """An empty result from an empty scope (a misspelt project?) says so on stderr."""
    if result.primary or result.meta.get("retrieval_stats", {}).get("candidates_pre_threshold"):
        return
    existing = kb.projects(tenant=args.tenant)
    wanted = [args.project, *args.also_project]
    if any(p in existing for p in wanted):
        return
    have = ", ".join(f"{printable(p)} ({n})" for p, n in existing.items()) or "none"
    print(f"kb-retriever: hint: project {printable(', '.join(wanted))} of tenant "
          f"{printable(args.tenant)} has no documents; projects with documents: {have}",
          file=sys.stderr)


def checked_search(args: argparse.Namespace) -> dict[str, Any]:
    """The search's keyword arguments, the query, limit and filters checked as the search
    checks them, before the knowledge base opens: a bad input read as "the database could not
    be reached", or started the embedded server and loaded the model first."""
    from .filters.dimensions import parse_filters
    from .search.plan import validate_limit, validate_query
    from .settings import load_settings

    settings = load_settings()
    kwargs = search_kwargs(args)
    validate_query(args.query, settings)
    if kwargs["limit"] is not None:
        validate_limit(kwargs["limit"], settings)
    parse_filters(kwargs["filters"])
    return kwargs
