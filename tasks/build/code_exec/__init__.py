"""Builders of CodeExec-v0's bundled tasks and labelled set (``tasks/code_exec``)."""
