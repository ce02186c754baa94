"""The sample channel: the plugin template (cookiecutter-plugin/) baked as a polling
channel named "sample", kept here by ``scripts/bake-sample``.

:mod:`.channel` holds :class:`~.channel.SampleChannel` and its polling transport,
:mod:`.fake` the fake platform :class:`~.fake.SamplePlatform` and its protocol. They are
the template's files exactly (a test bakes the template and compares), so the kernel's
own tests run the channel third-party authors start from:
:mod:`chatkernel.testing.loopback` subclasses both with what those tests need.
"""
