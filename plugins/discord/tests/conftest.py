"""chatkernel-discord's tests. The kit's pytest plugin gives each test a CHATKERNEL_HOME of
its own and the asyncio backend; the runs (discord_runs.py) are shared by several test
modules."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
