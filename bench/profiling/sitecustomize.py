"""Profile a ``chatkernel`` process from its start to its exit, for the benchmarks.

With this directory on ``PYTHONPATH`` and ``CHATKERNEL_PROFILE`` naming a directory,
every ``chatkernel`` process started writes ``<pid>.prof`` there (cProfile) when it
exits; other Python processes are left alone. ``bench/scaleout.py --profile DIR``
sets both for its gateways; ``bench/profile_summary.py DIR/*.prof`` sums them up.
"""

import os
import sys

if os.environ.get("CHATKERNEL_PROFILE") and sys.argv and \
        os.path.basename(sys.argv[0]) == "chatkernel":
    import atexit
    import cProfile

    _profile = cProfile.Profile()
    _profile.enable()

    def _write() -> None:
        _profile.disable()
        _profile.dump_stats(os.path.join(os.environ["CHATKERNEL_PROFILE"],
                                         f"{os.getpid()}.prof"))

    atexit.register(_write)
