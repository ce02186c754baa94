"""Built-in ``register_agents``: the ``echo``, ``command`` and ``openai`` agent kinds.

Called last, so a plugin registering a kind of the same name replaces the built-in one.
"""

from chatkernel.hookspecs import hookimpl


@hookimpl(trylast=True)
def register_agents(register):
    # Imported here, not at module level: listing plugins must stay fast.
    from chatkernel.core.turns.agents import CommandAgent, EchoAgent, OpenAIAgent

    register(EchoAgent)
    register(CommandAgent)
    register(OpenAIAgent)
