"""``python -m agentgym.cli``: the ``agentgym`` command."""

import sys

from agentgym.cli import main

if __name__ == "__main__":
    sys.exit(main())
