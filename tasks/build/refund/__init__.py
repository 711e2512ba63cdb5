"""Builders of Refund-v0's bundled tasks and labelled set (``tasks/refund``)."""
