"""agentgym/MockAPI-v0: helpdesk operations over a real loopback HTTP API with seeded, reproducible faults."""
