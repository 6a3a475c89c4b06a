"""Entry point of a local-runner slot process: `python -m tidegate.deploy.local_slot SLOT`,
with the cloudpickled deployment on stdin."""

from __future__ import annotations

import sys

from tidegate.deploy import slot_entry

if __name__ == "__main__":
    slot_entry.run(sys.stdin.buffer.read(), int(sys.argv[1]))
