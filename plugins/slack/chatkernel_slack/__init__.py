"""chatkernel-slack: the Slack channel (Socket Mode or the Events API, on slack_sdk).

Importing this module is cheap: the channel, slack_sdk and aiohttp load only
when the kernel asks for channels.
"""

from chatkernel import hookimpl

__version__ = "0.1.0"


@hookimpl
def register_channels(register):
    from chatkernel_slack.channel import SlackChannel

    register(SlackChannel)


@hookimpl
def register_markups(register):
    from chatkernel_slack.markup import SlackMrkdwn

    register(SlackMrkdwn)
