"""What callers present, and how it is checked: resume, thread, view and publish tokens and
inbox sessions (`waitstate.auth.tokens`: the worker and its activities mint them, the gateway
verifies them), and operator keys (`waitstate.auth.operators`: what may start a thread through
the gateway, and the MCP server's caller keys).

Stdlib only, and below the adapters: it imports nothing from the gateway, the client, the MCP
server or the CLI (`tests/test_layers.py`).
"""
