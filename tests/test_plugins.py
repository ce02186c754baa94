"""Plugin discovery and loading, tested two ways.

1. In-process, with FAKE distributions: a ``*.dist-info`` directory (METADATA
   and ``entry_points.txt``) plus a module, in a temporary directory put first
   on ``sys.path``; then ``PluginManager().load(...)``.
2. For REAL: the throwaway packages under ``tests/fixtures/plugins/`` are
   installed with pip into a temporary ``--target`` directory and listed by the
   ``chatkernel`` console script in a subprocess.
"""

from __future__ import annotations

import asyncio
import importlib
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import stevedore
import stevedore._cache
from stevedore import ExtensionManager

from chatkernel import hookimpl
from chatkernel.core.plugins import (
    BUILTIN_PLUGINS,
    PluginLoadError,
    PluginManager,
    await_maybe,
    collect_channels,
)

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "plugins"
CHATKERNEL = Path(sys.executable).with_name("chatkernel")
SUBPROCESS_TIMEOUT = 60
PIP_TIMEOUT = 300

# -- fake distributions --------------------------------------------------------------------

GOOD = textwrap.dedent('''
    from chatkernel import Command, hookimpl


    @hookimpl
    def register_commands(register):
        register(Command(name="fake", handler=lambda ctx: "ok"))


    @hookimpl
    def inbound_accept(message, account):
        return None
''')

OTHER = textwrap.dedent('''
    from chatkernel import hookimpl


    @hookimpl
    def heartbeat_visibility(channel):
        return None
''')

BROKEN = 'raise RuntimeError("boom at import")\n'

MISSPELT = textwrap.dedent('''
    from chatkernel import hookimpl


    @hookimpl
    def inbound_acept(message, account):
        return None
''')

WRONG_ARGUMENT = textwrap.dedent('''
    from chatkernel import hookimpl


    @hookimpl
    def inbound_accept(msg):
        return None
''')

MISSING_DEPENDENCY = "import chatkernel_test_no_such_sdk  # noqa: F401\n"

FAILED_ASSERT = 'assert False, "needs a newer platform SDK"\n'

#: entry-point name -> (distribution, version, module name, module source)
FAKE = {
    "fakegood": ("chatkernel-fakegood", "1.4.2", "chatkernel_fakegood", GOOD),
    "fakeother": ("chatkernel-fakeother", "0.9", "chatkernel_fakeother", OTHER),
    "fakebroken": ("chatkernel-fakebroken", "0.1", "chatkernel_fakebroken", BROKEN),
    "fakemisspelt": ("chatkernel-fakemisspelt", "0.1", "chatkernel_fakemisspelt", MISSPELT),
    "fakewrongarg": ("chatkernel-fakewrongarg", "0.1", "chatkernel_fakewrongarg",
                     WRONG_ARGUMENT),
    "fakenodep": ("chatkernel-fakenodep", "0.1", "chatkernel_fakenodep", MISSING_DEPENDENCY),
    "fakeassert": ("chatkernel-fakeassert", "0.1", "chatkernel_fakeassert", FAILED_ASSERT),
}
FAKE_MODULES = {module for _, _, module, _ in FAKE.values()}


def write_distribution(site: Path, entry_point: str) -> None:
    dist, version, module, source = FAKE[entry_point]
    info = site / f"{dist.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n", encoding="utf-8")
    (info / "entry_points.txt").write_text(
        f"[chatkernel]\n{entry_point} = {module}\n", encoding="utf-8")
    (site / f"{module}.py").write_text(source, encoding="utf-8")


def forget_fake_modules() -> None:
    for module in FAKE_MODULES:
        sys.modules.pop(module, None)


@pytest.fixture
def isolated_entry_points(tmp_path, monkeypatch):
    """Empty stevedore caches, in memory and on disk, restored after the test."""
    cache = tmp_path / "xdg-cache"
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache))
    # stevedore's module-level cache picked its directory at import time, and
    # keeps an in-memory copy per sys.path: point both at this test.
    monkeypatch.setattr(stevedore._cache._c, "_dir", str(cache / "python-entrypoints"))
    monkeypatch.setattr(stevedore._cache._c, "_internal", {})
    monkeypatch.setattr(ExtensionManager, "ENTRY_POINT_CACHE", {})
    yield cache


@pytest.fixture
def fake_site(tmp_path, monkeypatch, isolated_entry_points):
    """Install fake distributions: ``fake_site("fakegood", "fakebroken")``."""
    site = tmp_path / "site-packages"
    site.mkdir()
    forget_fake_modules()

    def install(*entry_points: str) -> Path:
        for name in entry_points:
            write_distribution(site, name)
        importlib.invalidate_caches()
        return site

    monkeypatch.syspath_prepend(str(site))
    yield install
    forget_fake_modules()
    importlib.invalidate_caches()


def fake_infos(pm: PluginManager, *, include_builtins: bool = False) -> dict[str, dict]:
    """plugin_infos() of the fake plugins only (the venv may hold real ones)."""
    return {info.name: info.as_dict() for info in pm.plugin_infos(
        include_builtins=include_builtins) if info.name in FAKE or info.builtin}


# -- loading, in process -------------------------------------------------------------------


def test_good_plugin_is_registered_with_hooks_version_and_distribution(fake_site):
    fake_site("fakegood")
    pm = PluginManager().load()
    assert pm.get_plugin("fakegood") is sys.modules["chatkernel_fakegood"]
    assert pm.load_errors.get("fakegood") is None
    assert fake_infos(pm)["fakegood"] == {
        "name": "fakegood",
        "version": "1.4.2",
        "distribution": "chatkernel-fakegood",
        "hooks": ["inbound_accept", "register_commands"],
        "builtin": False,
    }
    commands = []
    pm.hook.register_commands(register=commands.append)
    assert "fake" in [command.name for command in commands]


def test_import_error_is_reported_and_the_others_still_load(fake_site):
    fake_site("fakegood", "fakebroken", "fakenodep", "fakeother")
    pm = PluginManager().load()
    assert pm.load_errors["fakebroken"] == "RuntimeError: boom at import"
    assert pm.load_errors["fakenodep"] == (
        "ModuleNotFoundError: No module named 'chatkernel_test_no_such_sdk'")
    assert pm.get_plugin("fakegood") is not None
    assert pm.get_plugin("fakeother") is not None
    infos = fake_infos(pm)
    assert infos["fakebroken"]["error"] == "RuntimeError: boom at import"
    assert infos["fakebroken"]["distribution"] == "chatkernel-fakebroken"
    assert infos["fakebroken"]["hooks"] == []
    assert "error" not in infos["fakegood"]


def test_entry_point_naming_a_missing_module_is_reported(fake_site):
    site = fake_site("fakegood")
    (site / "chatkernel_fakegood.py").unlink()
    importlib.invalidate_caches()
    pm = PluginManager().load()
    assert pm.load_errors["fakegood"].startswith("ModuleNotFoundError")


def test_plugin_failing_an_assert_at_import_is_reported_not_raised(fake_site):
    """An ``assert`` at import time is an import failure like any other.

    stevedore re-raises AssertionError from its on-load-failure isolation, so
    today this escapes ``load()`` and takes the CLI down (see the report).
    """
    fake_site("fakegood", "fakeassert")
    pm = PluginManager().load()
    assert pm.load_errors["fakeassert"] == "AssertionError: needs a newer platform SDK"
    assert pm.get_plugin("fakegood") is not None


def test_misspelt_hookimpl_is_reported_and_unregistered(fake_site):
    fake_site("fakegood", "fakemisspelt")
    pm = PluginManager().load()
    assert "unknown hook 'inbound_acept'" in pm.load_errors["fakemisspelt"]
    assert pm.get_plugin("fakemisspelt") is None
    assert pm.get_plugin("fakegood") is not None
    assert "unknown hook 'inbound_acept'" in fake_infos(pm)["fakemisspelt"]["error"]
    pm.check_pending()  # nothing left pending


def test_hookimpl_with_an_argument_the_spec_lacks_is_reported(fake_site):
    fake_site("fakegood", "fakewrongarg")
    pm = PluginManager().load()
    error = pm.load_errors["fakewrongarg"]
    assert "inbound_accept" in error and "msg" in error
    assert pm.get_plugin("fakewrongarg") is None
    assert pm.get_plugin("fakegood") is not None


def test_only_loads_only_the_named_plugins(fake_site):
    fake_site("fakegood", "fakeother", "fakebroken")
    pm = PluginManager().load(only=["fakegood"])
    assert pm.get_plugin("fakegood") is not None
    assert pm.get_plugin("fakeother") is None
    assert pm.load_errors == {}
    assert "chatkernel_fakebroken" not in sys.modules  # not even imported
    assert "chatkernel_fakeother" not in sys.modules


def test_only_empty_loads_no_installed_plugin(fake_site):
    fake_site("fakegood", "fakebroken")
    pm = PluginManager().load(only=[])
    assert [name for name, _ in pm.list_name_plugin() if name not in BUILTIN_PLUGINS] == []
    assert pm.load_errors == {}
    assert "chatkernel_fakegood" not in sys.modules
    assert pm.builtin_names == set(BUILTIN_PLUGINS)


def test_only_with_an_unknown_name_is_reported(fake_site):
    fake_site("fakegood")
    pm = PluginManager().load(only=["fakegood", "nosuchplugin"])
    assert pm.get_plugin("fakegood") is not None
    assert "no installed plugin has the entry point 'nosuchplugin'" in (
        pm.load_errors["nosuchplugin"])
    assert fake_infos(pm).keys() >= {"fakegood"}
    assert [info.error for info in pm.plugin_infos() if info.name == "nosuchplugin"] == [
        pm.load_errors["nosuchplugin"]]


def test_disabled_plugins_are_not_even_imported(fake_site):
    fake_site("fakegood", "fakebroken")
    pm = PluginManager().load(disabled=["fakebroken"])
    assert "chatkernel_fakebroken" not in sys.modules
    assert pm.is_blocked("fakebroken")
    assert "fakebroken" not in pm.load_errors
    assert "fakebroken" not in fake_infos(pm)
    assert pm.get_plugin("fakegood") is not None


def test_environment_variables_select_plugins(fake_site, monkeypatch):
    fake_site("fakegood", "fakeother", "fakebroken")
    monkeypatch.setenv("CHATKERNEL_LOAD_PLUGINS", " fakegood , fakebroken ")
    monkeypatch.setenv("CHATKERNEL_DISABLE_PLUGINS", "fakebroken")
    pm = PluginManager().load()
    assert pm.get_plugin("fakegood") is not None
    assert pm.get_plugin("fakeother") is None
    assert "chatkernel_fakebroken" not in sys.modules
    assert pm.load_errors == {}


def test_environment_variable_set_but_empty_loads_none(fake_site, monkeypatch):
    fake_site("fakegood")
    monkeypatch.setenv("CHATKERNEL_LOAD_PLUGINS", "")
    pm = PluginManager().load()
    assert pm.get_plugin("fakegood") is None
    assert "chatkernel_fakegood" not in sys.modules


def test_a_builtin_can_be_disabled(fake_site):
    pm = PluginManager().load(only=[], disabled=["chatkernel.builtin.policy"])
    assert pm.is_blocked("chatkernel.builtin.policy")
    assert "chatkernel.builtin.policy" not in pm.builtin_names
    assert not any(info.name == "chatkernel.builtin.policy"
                   for info in pm.plugin_infos(include_builtins=True))


@pytest.mark.parametrize("how", ["argument", "environment"])
def test_strict_mode_raises_plugin_load_error(fake_site, monkeypatch, how):
    fake_site("fakegood", "fakebroken")
    if how == "environment":
        monkeypatch.setenv("CHATKERNEL_STRICT_PLUGINS", "1")
    with pytest.raises(PluginLoadError) as info:
        PluginManager().load(strict=True if how == "argument" else None)
    assert info.value.name == "fakebroken"
    assert "boom at import" in info.value.reason
    assert "plugin 'fakebroken' failed to load" in str(info.value)


def test_strict_mode_raises_for_a_misspelt_hookimpl_and_an_unknown_name(fake_site):
    fake_site("fakemisspelt")
    with pytest.raises(PluginLoadError, match="inbound_acept"):
        PluginManager().load(strict=True)
    with pytest.raises(PluginLoadError, match="nosuchplugin"):
        PluginManager().load(only=["nosuchplugin"], strict=True)


def test_load_is_idempotent(fake_site):
    fake_site("fakegood", "fakebroken")
    pm = PluginManager()
    assert pm.load() is pm
    plugins = pm.list_name_plugin()
    errors = dict(pm.load_errors)
    implementations = len(pm.hook.inbound_accept.get_hookimpls())
    assert pm.load() is pm
    assert pm.list_name_plugin() == plugins
    assert pm.load_errors == errors
    assert len(pm.hook.inbound_accept.get_hookimpls()) == implementations


def test_importing_the_kernel_loads_nothing():
    code = ("import sys, chatkernel, chatkernel.core.plugins, chatkernel.cli; "
            "print(sorted(m for m in sys.modules if m.startswith(('stevedore', "
            "'chatkernel.builtin'))))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=SUBPROCESS_TIMEOUT, check=True)
    assert result.stdout.strip() == "[]"


def test_builtins_are_present_but_hidden_unless_asked(fake_site):
    fake_site("fakegood")
    pm = PluginManager().load()
    assert pm.builtin_names == set(BUILTIN_PLUGINS)
    for name in BUILTIN_PLUGINS:
        assert pm.get_plugin(name) is not None
    assert not any(info.builtin for info in pm.plugin_infos())
    infos = fake_infos(pm, include_builtins=True)
    for name in BUILTIN_PLUGINS:
        assert infos[name]["builtin"] is True
        assert infos[name]["distribution"] == "chatkernel"
        assert infos[name]["hooks"], f"built-in {name} implements no hook"
    assert infos["fakegood"]["builtin"] is False
    names = [info.name for info in pm.plugin_infos(include_builtins=True)]
    assert names == sorted(names)


def test_the_catalog_says_which_built_in_plugin_provides_each_built_in_channel():
    from chatkernel.catalog import BUILTIN_CHANNELS

    provided = {}
    for name in BUILTIN_PLUGINS:
        pm = PluginManager().load(only=[], disabled=[other for other in BUILTIN_PLUGINS
                                                     if other != name])
        provided.update(dict.fromkeys(collect_channels(pm), name))
    assert provided == BUILTIN_CHANNELS


def test_the_catalog_names_the_distribution_of_each_channel_plugin_here():
    import tomllib

    from chatkernel.catalog import CHANNEL_DISTRIBUTIONS

    published = {}
    for pyproject in sorted((Path(__file__).resolve().parents[1] / "plugins").glob(
            "*/pyproject.toml")):
        project = tomllib.loads(pyproject.read_text())["project"]
        for entry_point in project["entry-points"]["chatkernel"]:
            published[entry_point] = project["name"]
    assert published == CHANNEL_DISTRIBUTIONS


def test_builtins_can_be_left_out(fake_site):
    fake_site("fakegood")
    pm = PluginManager().load(builtins=False)
    assert pm.builtin_names == set()
    assert pm.get_plugin("fakegood") is not None
    assert pm.get_plugin("chatkernel.builtin.inbound") is None


def test_trace_writes_hook_calls_to_stderr(fake_site, monkeypatch, capfd):
    fake_site("fakegood")
    monkeypatch.setenv("CHATKERNEL_TRACE_PLUGINS", "1")
    pm = PluginManager().load()
    pm.hook.heartbeat_visibility(channel="recorder", account="main")
    err = capfd.readouterr().err
    assert "heartbeat_visibility [hook]" in err
    assert "channel: recorder" in err
    assert "finish heartbeat_visibility -->" in err


def test_no_trace_by_default(fake_site, capfd):
    fake_site("fakegood")
    pm = PluginManager().load()
    pm.hook.heartbeat_visibility(channel="recorder", account="main")
    assert "heartbeat_visibility" not in capfd.readouterr().err


def test_get_plugin_manager_is_process_wide_and_resettable(fake_site):
    from chatkernel.core.plugins import get_plugin_manager, reset_plugin_manager

    fake_site("fakegood")
    first = get_plugin_manager()
    assert get_plugin_manager() is first
    assert first.get_plugin("fakegood") is not None
    reset_plugin_manager()
    assert get_plugin_manager() is not first


# -- PluginManager.call: the hot path's hook calls ----------------------------------------


class Deny:
    @hookimpl
    def inbound_accept(self, message, account):
        return ("deny", message, account)


class AllowFirst:
    @hookimpl(tryfirst=True)
    def inbound_accept(self, message):  # a subset of the spec's arguments
        return ("allow", message)


class Observer:
    def __init__(self) -> None:
        self.seen: list[tuple] = []

    @hookimpl
    def inbound_delivered(self, message, session):
        self.seen.append((message, session))


class Stamp:
    @hookimpl(wrapper=True)
    def inbound_accept(self, message, account):
        result = yield
        return ("stamped", result)


def bare_manager(*plugins) -> PluginManager:
    pm = PluginManager()
    for plugin in plugins:
        pm.register(plugin)
    return pm


def test_call_gives_what_the_hook_gives_for_one_implementation():
    pm = bare_manager(Deny())
    assert pm.call("inbound_accept", message="m", account="a") == ("deny", "m", "a")
    assert pm.hook.inbound_accept(message="m", account="a") == ("deny", "m", "a")
    # Not firstresult: the list of non-None results, as pluggy gives it.
    observer = Observer()
    pm.register(observer)
    assert pm.call("inbound_delivered", message="m", session="s") == []
    assert observer.seen == [("m", "s")]


def test_call_passes_only_the_arguments_an_implementation_takes():
    pm = bare_manager(AllowFirst())
    assert pm.call("inbound_accept", message="m", account="a") == ("allow", "m")


def test_call_follows_registrations_made_after_earlier_calls():
    deny, allow = Deny(), AllowFirst()
    pm = bare_manager(deny)
    assert pm.call("inbound_accept", message="m", account="a")[0] == "deny"
    pm.register(allow)
    assert pm.call("inbound_accept", message="m", account="a") == ("allow", "m")
    pm.unregister(allow)
    assert pm.call("inbound_accept", message="m", account="a")[0] == "deny"
    pm.unregister(deny)
    assert pm.call("inbound_accept", message="m", account="a") is None
    assert pm.call("inbound_delivered", message="m", session="s") == []


def test_call_goes_through_wrappers():
    pm = bare_manager(Deny(), Stamp())
    assert pm.call("inbound_accept", message="m", account="a") == (
        "stamped", ("deny", "m", "a"))


def test_call_raises_what_the_implementation_raises():
    class Broken:
        @hookimpl
        def inbound_accept(self, message, account):
            raise LookupError("no such account")

    pm = bare_manager(Broken())
    with pytest.raises(LookupError, match="no such account"):
        pm.call("inbound_accept", message="m", account="a")


def test_call_is_traced_when_tracing_is_on():
    pm = bare_manager(Deny())
    pm.call("inbound_accept", message="m", account="a")  # before tracing: direct
    lines: list[str] = []
    pm.trace.root.setwriter(lines.append)
    undo = pm.enable_tracing()
    pm.call("inbound_accept", message="m", account="a")
    assert any("inbound_accept [hook]" in line for line in lines)
    undo()
    assert pm.call("inbound_accept", message="m", account="a")[0] == "deny"


@pytest.mark.anyio
async def test_await_maybe_awaits_what_a_hook_answers_only_when_it_is_awaitable():
    class Later:  # an awaitable that is neither a coroutine nor a future
        def __await__(self):
            yield from asyncio.sleep(0).__await__()
            return "later"

    async def answer():
        return "coroutine"

    future = asyncio.get_running_loop().create_future()
    future.set_result("future")
    assert await await_maybe(answer()) == "coroutine"
    assert await await_maybe(future) == "future"
    assert await await_maybe(Later()) == "later"
    for plain in (None, "value", 0, [answer]):
        assert await await_maybe(plain) == plain



# -- for real: installed packages and the console script -----------------------------------


def kernel_env(target: Path, cache: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CHATKERNEL_")}
    env.update(PYTHONPATH=str(target), XDG_CACHE_HOME=str(cache), PYTHONDONTWRITEBYTECODE="1")
    env.update(extra)
    return env


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """Both fixture plugins installed with pip into a --target directory."""
    root = tmp_path_factory.mktemp("installed")
    target = root / "target"
    sources = []
    for name in ("chatkernel-goodplugin", "chatkernel-brokenplugin"):
        # Build from a copy: pip builds in place and would leave build/ and
        # *.egg-info/ in the source tree.
        copy = root / "src" / name
        shutil.copytree(FIXTURES / name, copy)
        sources.append(str(copy))
    command = [sys.executable, "-m", "pip", "install", "--no-deps", "--no-build-isolation",
               "--no-index", "--no-cache-dir", "--disable-pip-version-check", "--quiet",
               "--target", str(target), *sources]
    result = subprocess.run(command, capture_output=True, text=True, timeout=PIP_TIMEOUT,
                            cwd=root)
    assert result.returncode == 0, result.stdout + result.stderr
    return {"target": target, "cache": root / "xdg-cache"}


def run_chatkernel(installed, *args: str, **env: str) -> subprocess.CompletedProcess:
    assert CHATKERNEL.exists(), f"no console script next to {sys.executable}"
    return subprocess.run([str(CHATKERNEL), *args], capture_output=True, text=True,
                          timeout=SUBPROCESS_TIMEOUT,
                          env=kernel_env(installed["target"], installed["cache"], **env))


def listed(result) -> dict[str, dict]:
    assert result.returncode == 0, result.stderr
    return {item["name"]: item for item in json.loads(result.stdout)}


@pytest.mark.slow
def test_real_plugins_listed_as_json(installed):
    result = run_chatkernel(installed, "plugins", "--json")
    plugins = listed(result)
    assert plugins["goodplugin"] == {
        "name": "goodplugin",
        "version": "1.2.3",
        "distribution": "chatkernel-goodplugin",
        "hooks": ["inbound_accept", "register_commands"],
        "builtin": False,
    }
    broken = plugins["brokenplugin"]
    assert "boom" in broken["error"]
    assert broken["distribution"] == "chatkernel-brokenplugin"
    assert broken["version"] == "0.0.1"
    assert "warning: plugin 'brokenplugin' failed to load: RuntimeError: boom" in result.stderr
    assert "Traceback" not in result.stderr
    assert not any(item["builtin"] for item in plugins.values())


@pytest.mark.slow
def test_real_plugins_all_adds_builtins(installed):
    plugins = listed(run_chatkernel(installed, "plugins", "--json", "--all"))
    for name in BUILTIN_PLUGINS:
        assert plugins[name]["builtin"] is True
    assert {"goodplugin", "brokenplugin"} <= set(plugins)


@pytest.mark.slow
def test_real_plugins_filtered_by_hook(installed):
    plugins = listed(run_chatkernel(installed, "plugins", "--json", "--hook", "inbound_accept"))
    assert "goodplugin" in plugins
    assert "brokenplugin" not in plugins
    assert all("inbound_accept" in item["hooks"] for item in plugins.values())
    with_builtins = listed(run_chatkernel(installed, "plugins", "--json", "--all",
                                          "--hook", "inbound_accept"))
    assert "chatkernel.builtin.inbound" in with_builtins
    assert "chatkernel.builtin.outbound" not in with_builtins


@pytest.mark.slow
def test_real_plugins_unknown_hook_fails_clearly(installed):
    result = run_chatkernel(installed, "plugins", "--hook", "inbound_acept")
    assert result.returncode == 2
    assert "no hook named 'inbound_acept'" in result.stderr
    assert "inbound_accept" in result.stderr  # the known hooks are listed
    assert "Traceback" not in result.stderr


@pytest.mark.slow
def test_real_plugins_load_only_named(installed):
    result = run_chatkernel(installed, "plugins", "--json", CHATKERNEL_LOAD_PLUGINS="goodplugin")
    assert list(listed(result)) == ["goodplugin"]
    assert result.stderr == ""  # brokenplugin was not imported, so no error


@pytest.mark.slow
def test_real_plugins_load_none(installed):
    result = run_chatkernel(installed, "plugins", "--json", CHATKERNEL_LOAD_PLUGINS="")
    assert listed(result) == {}
    assert result.stderr == ""


@pytest.mark.slow
def test_real_plugins_disable_broken(installed):
    result = run_chatkernel(installed, "plugins", "--json",
                            CHATKERNEL_DISABLE_PLUGINS="brokenplugin")
    plugins = listed(result)
    assert "goodplugin" in plugins and "brokenplugin" not in plugins
    assert "brokenplugin" not in result.stderr


@pytest.mark.slow
def test_real_broken_plugin_is_not_imported_when_not_selected(installed):
    code = ("import sys; from chatkernel.core.plugins import PluginManager; "
            "pm = PluginManager().load(); "
            "print('chatkernel_brokenplugin' in sys.modules, sorted(pm.load_errors))")
    env = kernel_env(installed["target"], installed["cache"],
                     CHATKERNEL_LOAD_PLUGINS="goodplugin")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=SUBPROCESS_TIMEOUT, env=env)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "False []"


@pytest.mark.slow
def test_real_help_works_with_a_broken_plugin_installed(installed):
    result = run_chatkernel(installed, "--help")
    assert result.returncode == 0
    assert "plugins" in result.stdout
    assert result.stderr == ""


@pytest.mark.slow
def test_real_plugins_table(installed):
    result = run_chatkernel(installed, "plugins")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["NAME", "VERSION", "DISTRIBUTION", "HOOKS"]
    rows = {line.split()[0]: line for line in lines[1:]}
    assert rows["goodplugin"].split()[:3] == ["goodplugin", "1.2.3", "chatkernel-goodplugin"]
    assert rows["goodplugin"].rstrip().endswith("inbound_accept, register_commands")
    assert "FAILED: RuntimeError: boom" in rows["brokenplugin"]
    # The columns line up under the header.
    assert lines[0].index("HOOKS") == rows["goodplugin"].index("inbound_accept")


@pytest.mark.slow
def test_real_plugins_left_out_by_the_environment_are_named_with_the_variable(installed):
    result = run_chatkernel(installed, "plugins", CHATKERNEL_LOAD_PLUGINS="")
    assert result.returncode == 0, result.stderr
    assert "No plugins installed" not in result.stdout
    assert result.stdout.startswith("No plugins loaded: ")
    assert "left out by the environment" in result.stdout
    line = next(line for line in result.stdout.splitlines() if "goodplugin" in line)
    assert "CHATKERNEL_LOAD_PLUGINS is set but empty" in line
    result = run_chatkernel(installed, "plugins", CHATKERNEL_LOAD_PLUGINS="goodplugin")
    assert result.stdout.splitlines()[1].startswith("goodplugin ")
    assert "Installed but not loaded:\n  brokenplugin" in result.stdout
    assert "CHATKERNEL_LOAD_PLUGINS=goodplugin leaves it out" in result.stdout


@pytest.mark.slow
def test_a_channel_turned_off_by_the_environment_is_named_so_not_misspelt(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    (home / "config.toml").write_text("[channels.webchat]\n[channels.webchat.accounts.default]\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("CHATKERNEL_")}
    env.update(CHATKERNEL_HOME=str(home),
               CHATKERNEL_DISABLE_PLUGINS="chatkernel.builtin.webchat")
    for command in (["config", "validate"], ["run", "--listen", "127.0.0.1:0"]):
        result = subprocess.run([str(CHATKERNEL), *command], capture_output=True, text=True,
                                timeout=SUBPROCESS_TIMEOUT, env=env)
        assert result.returncode != 0
        assert ("channels.webchat: the webchat channel is a built-in one, turned off by the "
                "environment: CHATKERNEL_DISABLE_PLUGINS=chatkernel.builtin.webchat") in \
            result.stderr
        assert "did you mean" not in result.stderr
        assert "Traceback" not in result.stderr
