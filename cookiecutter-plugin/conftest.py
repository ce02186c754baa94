"""The template's files are Jinja templates, not tests: never collect them from here
(tests/test_cookiecutter_plugin.py bakes the template and runs the baked tests)."""

collect_ignore_glob = ["*"]
