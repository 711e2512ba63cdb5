"""agentgym/TauRetail-v0: τ-bench retail's tools, data and reward with a deterministic customer (see ``env.py``)."""
