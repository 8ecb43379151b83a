"""kb-retriever as an agent tool: the StructuredTool called the way an agent calls it.

    python examples/agent_tool.py

A chat model with tool calling emits a tool call like the one below; LangChain (or LangGraph's
ToolNode) invokes the tool with it and feeds the ToolMessage back to the model. The content is
the composed context; the artifact is the list of Documents, handy for citations.
Uses KB_DATABASE_URL when set, else the embedded PostgreSQL under KB_HOME.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from langchain_core.messages import ToolMessage
from langchain_kb_retriever import kb_search_tool

from kb_retriever import KnowledgeBase

KB_DIR = Path(__file__).resolve().parent / "kb"

# What a model's AIMessage.tool_calls[0] looks like for this tool.
TOOL_CALL: dict[str, Any] = {
    "type": "tool_call",
    "id": "call_1",
    "name": "kb_search",
    "args": {
        "query": "how do we roll back a bad deploy?",
        "k": 3,
        "filters": {"canonical_types": ["runbook", "standard"]},
    },
}


def main(database_url: str | None = None) -> ToolMessage:
    with KnowledgeBase(database_url=database_url) as kb:
        kb.ingest([KB_DIR])  # a no-op when nothing changed
        tool = kb_search_tool(kb, allowed_projects=[kb.project])
        print("tool schema the model sees:")
        print(json.dumps(tool.tool_call_schema.model_json_schema(), indent=2)[:1500])
        message = tool.invoke(TOOL_CALL)
    print("=" * 80)
    print(message.content)
    print("=" * 80, "\nartifact (for citations):")
    for doc in message.artifact:
        print(f"  {doc.id:<22} {doc.metadata['kb']['origin']:<15} {doc.metadata['source']}")
    return message


if __name__ == "__main__":
    main()
    sys.exit(0)
