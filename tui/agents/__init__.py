"""Open to agents: the workspace served over the Model Context Protocol (`autoresearch mcp`).

face.py   what an agent may do, as plain functions over the same code as the CLI (no SDK)
server.py the MCP server (the only import of the `mcp` SDK): tools, resources, the prompt
http.py   the streamable HTTP transport on 127.0.0.1, behind tui/webguard.py's rules
skill.py  SKILL.md, the protocol for agents that read skills (shipped as package data)
"""
