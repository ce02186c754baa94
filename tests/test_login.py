"""`chatkernel login CHANNEL`: the kernel's command around a plugin's login flow."""

from __future__ import annotations

import stat
import tomllib

from click.testing import CliRunner

from chatkernel import cli, hookimpl
from chatkernel.channels import AccountConfig, Channel
from chatkernel.sdk.login import Login, LoginFailed, LoginResult


class DemoAccount(AccountConfig):
    token: str
    host: str = "https://demo.example"


class DemoChannel(Channel):
    name = "demo"
    account_model = DemoAccount


class DemoLogin(Login):
    name = "demo"

    def __init__(self, token: str = "s3cret-demo-token", fail: str | None = None) -> None:
        self.token, self.fail, self.requests = token, fail, []

    async def run(self, request):
        self.requests.append(request)
        if self.fail:
            raise LoginFailed(self.fail)
        request.echo("scan the code…")
        return LoginResult(config={"token": self.token, "host": request.api_base},
                           secret_keys=frozenset({"token"}), detail="bot demo-1")


def plugin(login: DemoLogin):
    class Plugin:
        @hookimpl
        def register_channels(self, register):
            register(DemoChannel)

        @hookimpl
        def register_logins(self, register):
            register(login)

    return Plugin()


def test_hook_register_logins(pm, temp_plugin, chatkernel_home, monkeypatch):
    login = DemoLogin()
    temp_plugin(pm, plugin(login), "test-login")
    monkeypatch.setattr(cli, "_plugin_manager", lambda: pm)
    result = CliRunner().invoke(cli.cli, ["login", "demo", "--account", "work",
                                          "--api-base", "http://127.0.0.1:9"])
    assert result.exit_code == 0, result.output
    assert "bot demo-1" in result.output and "s3cret" not in result.output
    path = chatkernel_home / "config.toml"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    account = tomllib.loads(path.read_text())["channels"]["demo"]["accounts"]["work"]
    assert account == {"token": "s3cret-demo-token", "host": "http://127.0.0.1:9"}
    assert login.requests[0].account == "work" and login.requests[0].current == {}

    # A second login replaces the token, sees the account's current table, and keeps
    # what the person wrote in the file.
    path.write_text("# my notes\n" + path.read_text())
    login.token = "new-demo-token"
    assert CliRunner().invoke(cli.cli, ["login", "demo", "--account", "work",
                                        "--api-base", "http://127.0.0.1:9"]).exit_code == 0
    account = tomllib.loads(path.read_text())["channels"]["demo"]["accounts"]["work"]
    assert account["token"] == "new-demo-token"
    assert login.requests[1].current["token"] == "s3cret-demo-token"
    assert path.read_text().startswith("# my notes\n")


def test_login_failure_and_unknown_channel(pm, temp_plugin, chatkernel_home, monkeypatch):
    temp_plugin(pm, plugin(DemoLogin(fail="the code expired: run it again")), "test-login")
    monkeypatch.setattr(cli, "_plugin_manager", lambda: pm)
    failed = CliRunner().invoke(cli.cli, ["login", "demo"])
    assert failed.exit_code == 1 and "the code expired: run it again" in failed.output
    assert not (chatkernel_home / "config.toml").exists()
    unknown = CliRunner().invoke(cli.cli, ["login", "nope"])
    assert unknown.exit_code == 1 and "has no login flow (channels with one: demo)" in \
        unknown.output
