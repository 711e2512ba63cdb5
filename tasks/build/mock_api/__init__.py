"""Builders of MockAPI-v0's bundled tasks and labelled set (``tasks/mock_api``)."""
