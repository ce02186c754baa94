{%- set P = cookiecutter.__class_prefix -%}
"""The kernel's channel contract suite, run unchanged against the fake platform, through
the adapter in ``{{ cookiecutter.__package_name }}/contract.py``."""

from __future__ import annotations

from chatkernel.testing import ChannelContract
from {{ cookiecutter.__package_name }}.contract import {{ P }}Adapter


class Test{{ P }}Contract(ChannelContract):
    adapter_class = {{ P }}Adapter
