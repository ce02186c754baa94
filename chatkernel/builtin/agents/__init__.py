"""Built-in ``register_agents``: the ``echo``, ``command`` and ``openai`` agent kinds, one
module each (the interface they implement is :mod:`chatkernel.core.turns.agents`).

Called last, so a plugin registering a kind of the same name replaces the built-in one.
"""

from chatkernel.hookspecs import hookimpl


@hookimpl(trylast=True)
def register_agents(register):
    # Imported here, not at module level: listing plugins must stay fast.
    from chatkernel.builtin.agents.command import CommandAgent
    from chatkernel.builtin.agents.echo import EchoAgent
    from chatkernel.builtin.agents.openai import OpenAIAgent

    register(EchoAgent)
    register(CommandAgent)
    register(OpenAIAgent)
