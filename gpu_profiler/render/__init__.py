"""Renderers: a result in, text out (rich table, JSON, CSV, Markdown)."""
