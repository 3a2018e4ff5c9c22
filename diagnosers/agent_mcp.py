"""The MCP server of the ``agent`` diagnoser: ``python -m diageval.diagnosers.agent_mcp BUNDLE_DIR``, over stdio.

The agent starts it as a subprocess inside its own box, on the box's private bundle copy, and nothing else: it
serves the tools of :class:`~diageval.diagnosers.agent_tools.BundleTools` (each confined to that folder) with the
official ``mcp`` SDK (``MCPServer``, mcp >= 2). A tool's refusal or failure is an MCP tool error (``isError``) the
model reads; the server itself never stops on one.

Each tool answers JSON text without an output schema (``structured_output=False``): with one, the SDK's client
validates every result with ``jsonschema``, whose import (it builds the RFC 3987 grammars with ``lark``) took 4.5 to
15 s of the first tool call on this 2-core machine under load (cProfile of the client, n=3), against 0.02 s without.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from diageval.diagnosers.agent_tools import BundleTools, ToolRefused, shortened

SERVER_NAME = "diageval-bundle"


def build_server(bundle_dir: Path) -> Any:
    """An ``MCPServer`` whose tools read ``bundle_dir`` alone."""
    from mcp.server.mcpserver import MCPServer
    from mcp.server.mcpserver.exceptions import ToolError

    tools = BundleTools(bundle_dir)
    server = MCPServer(SERVER_NAME, instructions="Read-only tools over one evidence bundle of a PyTorch training job.",
                       log_level="ERROR")

    def answer(fn, *args: Any, **kwargs: Any) -> str:
        """The tool's answer as JSON text; a refusal or a reader's error is a ToolError, whose message (unlike
        a crash's) the SDK hands to the model."""
        try:
            return shortened(fn(*args, **kwargs))
        except ToolRefused as exc:
            raise ToolError(str(exc)) from None
        except (OSError, ValueError, KeyError) as exc:  # a damaged file, a trace the reader refuses
            raise ToolError(f"{type(exc).__name__}: {str(exc)[:500]}") from None

    @server.tool(description=tools.overview.__doc__, structured_output=False)
    def overview() -> str:
        return answer(tools.overview)

    @server.tool(description=tools.read_file.__doc__, structured_output=False)
    def read_file(path: str, offset: int = 0, max_chars: int = 8000) -> str:
        return answer(tools.read_file, path, offset, max_chars)

    @server.tool(description=tools.step_table.__doc__, structured_output=False)
    def step_table(run: str | None = None) -> str:
        return answer(tools.step_table, run)

    @server.tool(description=tools.trace_summary.__doc__, structured_output=False)
    def trace_summary(rank: int, run: str | None = None) -> str:
        return answer(tools.trace_summary, rank, run)

    @server.tool(description=tools.trace_stats.__doc__, structured_output=False)
    def trace_stats(rank: int, run: str | None = None) -> str:
        return answer(tools.trace_stats, rank, run)

    @server.tool(description=tools.time_table.__doc__, structured_output=False)
    def time_table(rank: int, run: str | None = None) -> str:
        return answer(tools.time_table, rank, run)

    @server.tool(description=tools.top_ops.__doc__, structured_output=False)
    def top_ops(rank: int, step: int | None = None, kind: str = "host", limit: int = 10, run: str | None = None) -> str:
        return answer(tools.top_ops, rank, step, kind, limit, run)

    @server.tool(description=tools.compare_ranks.__doc__, structured_output=False)
    def compare_ranks(rank_a: int, rank_b: int, run: str | None = None) -> str:
        return answer(tools.compare_ranks, rank_a, rank_b, run)

    @server.tool(description=tools.events_in_window.__doc__, structured_output=False)
    def events_in_window(rank: int, step: int, offset_ms: float = 0.0, length_ms: float = 10.0,
                         run: str | None = None, limit: int = 50) -> str:
        return answer(tools.events_in_window, rank, step, offset_ms, length_ms, run, limit)

    @server.tool(description=tools.fleet_runs.__doc__, structured_output=False)
    def fleet_runs() -> str:
        return answer(tools.fleet_runs)

    return server


def main() -> None:
    if len(sys.argv) != 2:
        sys.exit("usage: python -m diageval.diagnosers.agent_mcp BUNDLE_DIR")
    build_server(Path(sys.argv[1])).run("stdio")


if __name__ == "__main__":
    main()
