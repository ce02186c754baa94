"""Built-in ``gateway_root_page``: when the web chat does not serve ``/``, a page saying
the gateway runs, why the web chat is off and how to turn it on."""

from chatkernel.hookspecs import hookimpl


@hookimpl(trylast=True)
def gateway_root_page(config, channel_types, loopback):
    from chatkernel.webchat.landing import render_landing_page

    return render_landing_page(config, channel_types, loopback=loopback)
