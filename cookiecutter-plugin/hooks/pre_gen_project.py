"""Refuse a channel name the plugin cannot have, before anything is written.

cookiecutter renders this file first: the name below is what the author typed.
"""

import keyword
import sys

NAME = "{{ cookiecutter.channel_name }}"

#: Channels the kernel ships (built in, or its test kit's) and the first-party plugins:
#: a second plugin registering one of these names would clash with it.
TAKEN = {"webchat", "memory", "loopback", "telegram", "slack", "whatsapp", "wechat"}


def problem(name: str) -> str | None:
    """Why ``name`` cannot be a channel name, or None when it can."""
    if name.lower().startswith(("chatkernel-", "chatkernel_")):
        rest = name[len("chatkernel-"):]
        return (f"the name {name!r} starts with 'chatkernel-': the template adds that "
                f"prefix itself (chatkernel-<name>); type just {rest!r}")
    if not name.isidentifier() or keyword.iskeyword(name):
        return (f"the name {name!r} is not a valid Python identifier: use lowercase letters, "
                "digits and underscores, starting with a letter (it names the module "
                "chatkernel_<name> and the config table [channels.<name>])")
    if name != name.lower():
        return f"the name {name!r} has capitals: channel names are lowercase ({name.lower()!r})"
    if name in TAKEN:
        return (f"the name {name!r} is already a chatkernel channel (taken: "
                f"{', '.join(sorted(TAKEN))}): choose your platform's own name")
    return None


if __name__ == "__main__":
    reason = problem(NAME)
    if reason is not None:
        print(f"ERROR: {reason}", file=sys.stderr)
        sys.exit(1)
