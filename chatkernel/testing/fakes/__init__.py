"""Stand-ins for what surrounds a gateway, each a real server or a real mount: an
OpenAI-compatible model server (:mod:`~chatkernel.testing.fakes.openai`), a network that
fails (:mod:`~chatkernel.testing.fakes.faultproxy`), a disk that fills up
(:mod:`~chatkernel.testing.fakes.disk`). A platform's own fake builds on
:mod:`chatkernel.testing.fake_platform` instead."""
