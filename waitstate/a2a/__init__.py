"""A2A: remote agents as long tools (client.py)."""
