"""agentgym/CodeExec-v0: write, test and submit Python code in a sandbox (see ``env.py``)."""
