"""`python -m tidegate ...`: the same as the `tidegate` command."""

from __future__ import annotations

from tidegate.cli import main

if __name__ == "__main__":
    main()
