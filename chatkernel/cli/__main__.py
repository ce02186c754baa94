"""``python -m chatkernel.cli``: the ``chatkernel`` command."""

from chatkernel.cli import main

main()
