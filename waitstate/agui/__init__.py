"""Agents served over AG-UI: a thread's run as AG-UI events (`mapping`), the facts of its history
those events tell (`history`), and what a `RunAgentInput` asks of a thread (`inputs`). The
gateway's route (`waitstate/gateway/routes/agui.py`) serves them; docs/ag-ui.md says how."""
