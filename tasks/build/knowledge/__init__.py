"""Builders of the SQL-v0, SearchQA-v0 and ToolMath-v0 tasks and labelled sets (``tasks/knowledge``)."""
