"""The chatkernel test kit for plugin authors (a pytest plugin, entry point ``pytest11``)."""
