"""Builder of TauRetail-v0's labelled set (``tasks/tau_retail``; the tasks are τ-bench's)."""
