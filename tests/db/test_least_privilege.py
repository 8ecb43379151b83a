"""A role granted only reads and writes on the tables (the owner migrated them, as production
deployments split the two) opens the knowledge base, searches, writes and deletes; a role that
may not set the knowledge base up gets a :class:`SchemaError` that says who can."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from kb_retriever import HashingEmbedder, KnowledgeBase, SchemaError

pytestmark = pytest.mark.db


class Roles:
    """An owner and a reads-and-writes role of their own, and databases owned by the owner."""

    def __init__(self, server_url: str) -> None:
        self.server_url, tag = server_url, uuid.uuid4().hex[:8]
        self.owner, self.app, self.databases = f"kbown_{tag}", f"kbapp_{tag}", []
        with psycopg.connect(server_url, autocommit=True) as conn:
            if not conn.execute("SELECT rolsuper FROM pg_roles WHERE rolname = current_user"
                                ).fetchone()[0]:  # type: ignore[index]
                pytest.skip("the test server's role may not create roles")
            for role in (self.owner, self.app):
                conn.execute(sql.SQL("CREATE ROLE {} LOGIN PASSWORD 'pw'").format(
                    sql.Identifier(role)))

    def database(self) -> str:
        name = f"kbpriv_{uuid.uuid4().hex[:10]}"
        with psycopg.connect(self.server_url, autocommit=True) as conn:
            conn.execute(sql.SQL("CREATE DATABASE {} OWNER {}").format(
                sql.Identifier(name), sql.Identifier(self.owner)))
            conn.execute(sql.SQL("GRANT CONNECT ON DATABASE {} TO {}").format(
                sql.Identifier(name), sql.Identifier(self.app)))
        self.databases.append(name)
        with psycopg.connect(make_conninfo(self.server_url, dbname=name), autocommit=True) as c:
            c.execute("CREATE EXTENSION vector")  # a superuser's step, as on a managed server
            c.execute(sql.SQL("GRANT CREATE ON SCHEMA public TO {}").format(
                sql.Identifier(self.owner)))
        return name

    def url(self, role: str, dbname: str) -> str:
        info = conninfo_to_dict(self.server_url)
        return make_conninfo("", host=info.get("host"), port=info.get("port"), user=role,
                             password="pw", dbname=dbname)

    def grant_reads_and_writes(self, dbname: str) -> None:
        with psycopg.connect(self.url(self.owner, dbname), autocommit=True) as conn:
            for grant in ("GRANT USAGE ON SCHEMA public TO {}",
                          "GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public "
                          "TO {}", "GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA public TO {}"):
                conn.execute(sql.SQL(grant).format(sql.Identifier(self.app)))

    def drop(self) -> None:
        with psycopg.connect(self.server_url, autocommit=True) as conn:
            for name in self.databases:
                conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(
                    sql.Identifier(name)))
            for role in (self.app, self.owner):
                conn.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(role)))


@pytest.fixture
def roles(pg_server_url: str) -> Iterator[Roles]:
    r = Roles(pg_server_url)
    yield r
    r.drop()


def test_a_role_with_reads_and_writes_only_uses_a_set_up_knowledge_base(
        roles: Roles, tmp_path: Path) -> None:
    """It failed to open: ``CREATE TABLE IF NOT EXISTS kb_meta`` checks the CREATE privilege
    before it looks whether the table exists."""
    db = roles.database()
    with KnowledgeBase(embedder=HashingEmbedder(64), database_url=roles.url(roles.owner, db)
                       ) as kb:
        kb.add_documents([{"id": "a.md", "text": "# Cache\n\nRedis is the cache layer.\n"}])
    roles.grant_reads_and_writes(db)
    (tmp_path / "queue.md").write_text("# Queue\n\nKafka is the event bus.\n")
    with KnowledgeBase(embedder=HashingEmbedder(64), database_url=roles.url(roles.app, db)
                       ) as kb:
        assert [h.document.source_path for h in kb.search("redis cache layer").primary] == [
            "a.md"]
        kb.add_documents([{"id": "b.md", "text": "# Sessions\n\nSessions live in Redis.\n"}])
        assert kb.ingest([tmp_path]).added == ["queue.md"]
        assert kb.delete(["b.md"]) == 1
        assert {d.id for d in kb.list_documents()} == {"a.md", "queue.md"}
        with pytest.raises(SchemaError, match="role that owns its tables"):
            # a new embedding model needs its index: the owner's step
            KnowledgeBase(embedder=HashingEmbedder(48),
                          database_url=roles.url(roles.app, db)).open()


def test_a_role_that_may_not_create_the_tables_is_told_who_can(roles: Roles) -> None:
    db = roles.database()
    with pytest.raises(SchemaError, match="permission denied for schema public.*role that owns"):
        KnowledgeBase(embedder=HashingEmbedder(64), database_url=roles.url(roles.app, db)).open()


def test_a_role_that_may_not_build_a_missing_index_opens_and_searches(roles: Roles) -> None:
    """A knowledge base whose model's index is missing (a build that failed, or dropped) is
    mended when its tables' owner opens it; a role of reads and writes only opens and searches
    all the same (by exact scans), as before the mend existed."""
    db = roles.database()
    with KnowledgeBase(embedder=HashingEmbedder(64), database_url=roles.url(roles.owner, db)
                       ) as kb:
        kb.add_documents([{"id": "a.md", "text": "# Cache\n\nRedis is the cache layer.\n"}])
    roles.grant_reads_and_writes(db)
    with psycopg.connect(roles.url(roles.owner, db), autocommit=True) as conn:
        conn.execute("DROP INDEX kb_chunks_hnsw_1")
    with KnowledgeBase(embedder=HashingEmbedder(64), database_url=roles.url(roles.app, db)
                       ) as kb:
        assert [h.document.source_path for h in kb.search("redis cache layer").primary] == [
            "a.md"]
    with KnowledgeBase(embedder=HashingEmbedder(64), database_url=roles.url(roles.owner, db)):
        pass  # the owner's open builds it again
    with psycopg.connect(roles.url(roles.owner, db), autocommit=True) as conn:
        assert conn.execute("SELECT indisvalid FROM pg_index WHERE indexrelid = "
                            "to_regclass('kb_chunks_hnsw_1')").fetchone() == (True,)
