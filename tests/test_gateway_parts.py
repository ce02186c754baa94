"""What only a gateway has reaches the kernel's components through the GatewayParts the
gateway hands it: its URL (the snapshot's, the control API's check for a send to the web
chat) and its reloader; a kernel run in-process has neither."""

from __future__ import annotations

import anyio
import pytest

from chatkernel.core.gateway.control import call
from chatkernel.core.gateway_state import read_state
from chatkernel.core.runtime.control import ControlError
from chatkernel.testing.gateway import start_gateway
from chatkernel.testing.memory import KernelHarness

pytestmark = pytest.mark.anyio


async def test_a_gateway_hands_the_kernel_its_url_and_its_reloader(chatkernel_home):
    home = chatkernel_home
    (home / "config.toml").write_text(  # what a reload reads: the same as running
        f'[gateway]\nworkspace = "{home / "workspace"}"\nlisten = "127.0.0.1:0"\n'
        f'[store]\npath = "{home / "state.db"}"\n')
    async with anyio.create_task_group() as tg:
        url, stop = await start_gateway(tg, home)
        try:
            info = read_state(home)
            assert info is not None and info.url == url

            async def control(path, body):
                return await anyio.to_thread.run_sync(call, info, path, body)

            status, answer = await control("/control/status", {})
            assert status == 200 and answer["gateway"]["url"] == url
            status, answer = await control("/control/reload", {})
            assert status == 200, answer
            assert answer["removed"] == [] and answer["added"] == []
            # The web chat's page is this gateway's: a send to it is taken.
            status, answer = await control("/control/send", {
                "channel": "webchat", "to": "browser-1", "text": "hello"})
            assert status == 200, answer
            assert answer["account"] == "webchat:default" and answer["reply_id"]
        finally:
            stop.set()


async def test_a_kernel_in_process_has_no_url_and_cannot_reload(tmp_path):
    async with KernelHarness(tmp_path) as h:
        answer = await h.kernel.control.status({})
        assert answer["gateway"]["url"] is None
        with pytest.raises(ControlError, match="it is not a gateway") as raised:
            await h.kernel.control.reload()
        assert raised.value.status == 409
