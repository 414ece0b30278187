"""The demo's tools: small sync tools, and tools over the demo systems (`examples/systems/`):
an export completed by webhook, an enrichment pipeline that is polled, compliance filing and a
claims desk whose refunds need approval. `catalog.all_tools` is what the worker offers.
"""
