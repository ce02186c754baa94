"""Tencent's own iLink client (npm ``@tencent-weixin/openclaw-weixin``, pinned in
tests/node/package.json) against :class:`FakeILink`: the fake must accept everything
the reference client sends, and the effects must happen.

The package is installed with ``npm ci`` into a cache folder outside the repository
(``$CHATKERNEL_NODE_CACHE``, else ``$XDG_CACHE_HOME/chatkernel-node``, else
``~/.cache/chatkernel-node``), keyed by the lock file, and reused across runs. Without
node or npm, or when npm cannot install it, the test fails and says so.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import anyio
import pytest

from chatkernel_wechat import crypto
from chatkernel_wechat.fake import FakeILink

pytestmark = pytest.mark.anyio
NODE_DIR = Path(__file__).parent / "node"
PACKAGE = "@tencent-weixin/openclaw-weixin"
USER = "o9cq80zWbjB8kN2xTfLcHf4PpA5s@im.wechat"
VERIFY_CODE = "482913"
DRIVER_TIMEOUT = 60.0
NPM_TIMEOUT = 300


def cache_root() -> Path:
    if os.environ.get("CHATKERNEL_NODE_CACHE"):
        return Path(os.environ["CHATKERNEL_NODE_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "chatkernel-node"


def installed_client() -> Path:
    """The folder whose node_modules holds the pinned client, installing it if needed."""
    for tool in ("node", "npm"):
        if shutil.which(tool) is None:
            pytest.fail(f"{tool} is not installed: this check runs Tencent's own WeChat "
                        f"client ({PACKAGE}) on Node.js; install Node.js 20+ and npm")
    lock = (NODE_DIR / "package-lock.json").read_bytes()
    target = cache_root() / f"openclaw-weixin-{hashlib.sha256(lock).hexdigest()[:16]}"
    if (target / "node_modules" / PACKAGE / "package.json").is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    # Install beside the target, then rename: a half-finished install is never reused.
    staging = Path(tempfile.mkdtemp(prefix="install-", dir=target.parent))
    for name in ("package.json", "package-lock.json", ".npmrc"):
        shutil.copy(NODE_DIR / name, staging / name)
    try:
        result = subprocess.run(["npm", "ci", "--ignore-scripts", "--no-audit", "--no-fund"],
                                cwd=staging, capture_output=True, text=True,
                                timeout=NPM_TIMEOUT)
    except subprocess.TimeoutExpired:
        shutil.rmtree(staging, ignore_errors=True)
        pytest.fail(f"npm ci of {PACKAGE} took over {NPM_TIMEOUT} s: is the npm registry "
                    "reachable?")
    if result.returncode != 0:
        shutil.rmtree(staging, ignore_errors=True)
        tail = "\n".join(result.stderr.strip().splitlines()[-15:])
        pytest.fail(f"npm ci could not install {PACKAGE} (is the npm registry reachable?):"
                    f"\n{tail}")
    try:
        staging.rename(target)
    except OSError:  # another run installed it meanwhile
        shutil.rmtree(staging, ignore_errors=True)
    return target


async def drive_qr_login(ilink: FakeILink) -> None:
    """Move the QR code through wait → scaned → need_verifycode → confirmed, each state
    once the client has seen the previous one."""
    def served(status: str) -> bool:
        code = ilink.qr_code
        return code is not None and ilink.qr_codes[code]["served"] == status

    await ilink.wait_until(lambda: served("wait"), timeout=DRIVER_TIMEOUT)
    ilink.set_qr_state("scaned")
    await ilink.wait_until(lambda: served("scaned"), timeout=DRIVER_TIMEOUT)
    ilink.set_qr_state("need_verifycode")
    await ilink.wait_until(lambda: any(c.params.get("verify_code") for c in ilink.qr_requests),
                           timeout=DRIVER_TIMEOUT)
    ilink.set_qr_state("confirmed")


@pytest.mark.slow
async def test_tencents_client_is_accepted_by_the_fake(tmp_path):
    modules = await anyio.to_thread.run_sync(installed_client)
    picture = os.urandom(3000)
    notes = "minutes of the meeting\n".encode() * 40
    (tmp_path / "picture.png").write_bytes(picture)
    (tmp_path / "notes.txt").write_bytes(notes)

    async with FakeILink(poll_timeout_ms=1000) as ilink:
        ilink.qr_hold = 0.5
        inbound = ilink.inject_message(USER, "你好, bot")
        environ = {**os.environ, "CHATKERNEL_NODE_MODULES": str(modules)}
        with anyio.fail_after(DRIVER_TIMEOUT):
            async with await anyio.open_process(
                    ["node", str(NODE_DIR / "drive.mjs"), ilink.base_url, ilink.cdn_base,
                     USER, str(tmp_path)], env=environ) as process:
                # The client reads the verification code from stdin when asked for it.
                await process.stdin.send(f"{VERIFY_CODE}\n".encode())
                async with anyio.create_task_group() as tg:
                    tg.start_soon(drive_qr_login, ilink)
                    stdout = b""
                    async for chunk in process.stdout:
                        stdout += chunk
                    tg.cancel_scope.cancel()
                await process.wait()
                stderr = b"".join([chunk async for chunk in process.stderr])
        report_line = stdout.decode().strip().splitlines()[-1:] or [""]
        try:
            report = json.loads(report_line[0])
        except ValueError:
            pytest.fail(f"the driver printed no report (exit {process.returncode}):\n"
                        f"{stdout.decode()}\n{stderr.decode()}")

        # Every request reached the fake and was accepted.
        assert ilink.violations == []
        failed = [(c.method, c.status, c.error) for c in ilink.calls if c.status != 200]
        assert failed == []
        assert report["ok"], report
        assert report["client"] == f"{PACKAGE}@2.4.9"
        methods = {c.method for c in ilink.calls}
        assert methods >= {"get_bot_qrcode", "get_qrcode_status", "getupdates",
                           "msg/notifystart", "getconfig", "sendtyping", "sendmessage",
                           "getuploadurl", "msg/notifystop"}
        assert ilink.calls_to("get_bot_qrcode")[0].http_method == "POST"
        assert any(c.params.get("verify_code") == VERIFY_CODE for c in ilink.qr_requests)
        assert [c.params["qrcode"] for c in ilink.qr_requests] == \
            [ilink.qr_code] * len(ilink.qr_requests)

        # The client logged in with the token the fake issued, and received the message.
        confirmed = next(s for s in report["steps"] if s["name"] == "get_qrcode_status")
        assert confirmed["result"]["accountId"] == ilink.bot_id
        assert confirmed["result"]["userId"] == ilink.owner
        assert report["inbound"] == {"message_id": str(inbound["message_id"]),
                                     "text": "你好, bot",
                                     "context_token": inbound["context_token"]}
        polls = ilink.calls_to("getupdates")
        assert [c.params["get_updates_buf"] for c in polls] == ["", ilink.cursor(1)]
        assert ilink.typing == [(USER, 1), (USER, 2)]

        # The sends were recorded, echoing the message's context_token, and the uploads
        # decrypted on the fake to the very bytes of the files.
        sent = ilink.sent(USER)
        assert [(m.kind, m.text, m.filename) for m in sent] == [
            ("text", "echo: 你好, bot", None), ("text", "a picture", None),
            ("image", None, None), ("file", None, "notes.txt")]
        assert {m.context_token for m in sent} == {inbound["context_token"]}
        assert sent[2].data == picture and sent[3].data == notes
        uploads = sorted(ilink.uploads.values(), key=lambda u: u.media_type)
        assert [(u.media_type, u.rawsize, u.rawfilemd5) for u in uploads] == [
            (1, len(picture), crypto.md5_hex(picture)), (3, len(notes), crypto.md5_hex(notes))]
        assert ilink.dropped == [] and ilink.refused == []
