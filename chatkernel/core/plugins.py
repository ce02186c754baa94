"""Plugin discovery and the plugin manager.

Two mechanisms, each for what it does best: stevedore finds and imports the
modules named by entry points in the ``chatkernel`` group (failure-isolated,
filtered by name before import, with its entry-point cache), and pluggy calls
their hooks. The kernel's own default implementations are registered as
built-in plugins, so any hook can be extended or wrapped.

Loading is :meth:`PluginManager.load`, an idempotent call; importing this
module loads nothing.

Environment:

``CHATKERNEL_LOAD_PLUGINS``
    Comma-separated entry-point names: load only these installed plugins.
    Set but empty: load no installed plugin. Built-ins are not affected.
``CHATKERNEL_DISABLE_PLUGINS``
    Comma-separated names (entry-point names, or built-in names such as
    ``chatkernel.builtin.policy``) never to load.
``CHATKERNEL_TRACE_PLUGINS=1``
    Print every hook call and result to stderr.
``CHATKERNEL_STRICT_PLUGINS=1``
    Raise the first plugin error instead of reporting it and going on.
"""

from __future__ import annotations

import inspect
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from types import CoroutineType
from typing import TYPE_CHECKING, Any

import pluggy

from chatkernel import hookspecs
from chatkernel.catalog import BUILTIN_CHANNELS, BUILTIN_PLUGINS

if TYPE_CHECKING:
    from chatkernel.hookspecs import ConfigView
    from chatkernel.sdk.channel import Channel

GROUP = "chatkernel"


class PluginLoadError(Exception):
    """A plugin could not be loaded (raised in strict mode only)."""

    def __init__(self, name: str, reason: str) -> None:
        super().__init__(f"plugin {name!r} failed to load: {reason}")
        self.name = name
        self.reason = reason


@dataclass(slots=True)
class PluginInfo:
    """What ``chatkernel plugins`` shows about one plugin."""

    name: str
    version: str | None
    distribution: str | None
    hooks: list[str] = field(default_factory=list)
    builtin: bool = False
    error: str | None = None

    def as_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "name": self.name,
            "version": self.version,
            "distribution": self.distribution,
            "hooks": self.hooks,
            "builtin": self.builtin,
        }
        if self.error is not None:
            data["error"] = self.error
        return data


def _names_from_env(var: str) -> list[str] | None:
    value = os.environ.get(var)
    if value is None:
        return None
    return [name.strip() for name in value.split(",") if name.strip()]


def _describe(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


class PluginManager(pluggy.PluginManager):
    """The ``chatkernel`` plugin manager: pluggy plus discovery and load errors."""

    def __init__(self) -> None:
        # Before super().__init__: pluggy may register through our overrides.
        self._direct: dict[str, Callable[[dict[str, Any]], Any]] = {}
        self._monitored = False
        super().__init__(GROUP)
        self.add_hookspecs(hookspecs)
        #: name -> reason, for every plugin that failed to load or register.
        self.load_errors: dict[str, str] = {}
        self.builtin_names: set[str] = set()
        self._loaded = False
        # What load() was told to leave out (see left_out).
        self._only: list[str] | None = None
        self._disabled: list[str] = []
        #: The Markdown renderers registered through ``register_markups``, by name, as
        #: :func:`collect_channels` last collected them: this manager's alone.
        self.markups: dict[str, Any] = {}

    # -- loading ---------------------------------------------------------------

    def load(
        self,
        *,
        only: list[str] | None = None,
        disabled: list[str] | None = None,
        strict: bool | None = None,
        builtins: bool = True,
    ) -> "PluginManager":
        """Register the built-in plugins and every installed plugin. Idempotent.

        ``only`` and ``disabled`` default to ``CHATKERNEL_LOAD_PLUGINS`` and
        ``CHATKERNEL_DISABLE_PLUGINS``; ``strict`` to
        ``CHATKERNEL_STRICT_PLUGINS``. A plugin that fails to import, to
        register, or that implements an unknown hook is recorded in
        :attr:`load_errors` and left out, unless strict.
        """
        if self._loaded:
            return self
        self._loaded = True
        if only is None:
            only = _names_from_env("CHATKERNEL_LOAD_PLUGINS")
        if disabled is None:
            disabled = _names_from_env("CHATKERNEL_DISABLE_PLUGINS") or []
        if strict is None:
            strict = os.environ.get("CHATKERNEL_STRICT_PLUGINS", "") not in ("", "0")
        self._only, self._disabled = only, list(disabled)
        for name in disabled:
            self.set_blocked(name)
        if os.environ.get("CHATKERNEL_TRACE_PLUGINS", "") not in ("", "0"):
            self.trace.root.setwriter(sys.stderr.write)
            self.enable_tracing()

        if builtins:
            self._load_builtins(strict)
        self._load_entry_points(only, set(disabled), strict)
        self._check_pending(strict)
        return self

    def left_out(self) -> dict[str, str]:
        """The plugins that are installed (or built in) but were not loaded because
        ``CHATKERNEL_LOAD_PLUGINS`` or ``CHATKERNEL_DISABLE_PLUGINS`` leaves them out:
        name -> why, naming the variable and its value."""
        disabled = set(self._disabled)
        why_disabled = f"CHATKERNEL_DISABLE_PLUGINS={','.join(self._disabled)} names it"
        left: dict[str, str] = {name: why_disabled for name in BUILTIN_PLUGINS
                                if name in disabled}
        for name in sorted({ep.name for ep in _entry_points()}):
            if name in disabled:
                left[name] = why_disabled
            elif self._only is not None and name not in self._only:
                value = ",".join(self._only)
                left[name] = (f"CHATKERNEL_LOAD_PLUGINS={value} leaves it out" if value else
                              "CHATKERNEL_LOAD_PLUGINS is set but empty: no installed "
                              "plugin is loaded")
        return left

    def channel_left_out(self, channel: str) -> str | None:
        """Why the plugin providing ``channel`` was not loaded, when that is the reason
        there is no such channel (a built-in's, or an installed plugin's entry point
        named like the channel, left out by the variables); else None."""
        left = self.left_out()
        builtin = BUILTIN_CHANNELS.get(channel)
        if builtin is not None and builtin in left:
            why = left[builtin].replace("names it", f"names {builtin}, its plugin")
            return (f"the {channel} channel is a built-in one, turned off by the environment: "
                    f"{why} (remove it from the variable, or the channel's tables from the "
                    "config)")
        if channel in left:
            return (f"the {channel} plugin is installed but not loaded: {left[channel]} "
                    "(add it to the variable, or unset it)")
        return None

    def _fail(self, name: str, reason: str, strict: bool) -> None:
        if strict:
            raise PluginLoadError(name, reason)
        self.load_errors[name] = reason

    def _load_builtins(self, strict: bool) -> None:
        import importlib

        for name in BUILTIN_PLUGINS:
            if self.is_blocked(name):
                continue
            try:
                module = importlib.import_module(name)
                self.register(module, name=name)
            except Exception as exc:  # a built-in bug must not hide the CLI either
                self._fail(name, _describe(exc), strict)
                continue
            self.builtin_names.add(name)

    def _load_entry_points(self, only: list[str] | None, disabled: set[str], strict: bool) -> None:
        if only is not None and not only:
            return  # CHATKERNEL_LOAD_PLUGINS set but empty: no installed plugin
        from stevedore import NamedExtensionManager

        available = _entry_points()
        installed = {ep.name for ep in available}
        wanted = [ep.name for ep in available] if only is None else list(only)
        for name in wanted:
            if name not in installed:
                self._fail(name, f"no installed plugin has the entry point {name!r} "
                           f"in group {GROUP!r}", strict)
        names = [name for name in dict.fromkeys(wanted) if name in installed
                 and name not in disabled]

        def on_failure(_manager: Any, entry_point: Any, exc: BaseException) -> None:
            self._fail(entry_point.name, _describe(exc), strict)

        for name in names:
            # One manager a plugin: stevedore re-raises an AssertionError from a
            # plugin's import instead of calling on_failure, and one broken plugin must
            # not keep the others from loading.
            try:
                manager = NamedExtensionManager(GROUP, names=[name],
                                                on_load_failure_callback=on_failure)
            except AssertionError as exc:
                self._fail(name, _describe(exc), strict)
                continue
            for extension in manager:
                try:
                    self.register(extension.plugin, name=extension.name)
                except Exception as exc:
                    self._fail(extension.name, _describe(exc), strict)

    def _check_pending(self, strict: bool) -> None:
        """Like pluggy's ``check_pending`` but reports every offending plugin."""
        while True:
            try:
                self.check_pending()
                return
            except pluggy.PluginValidationError as exc:
                name = self.get_name(exc.plugin) or repr(exc.plugin)
                if strict:
                    raise PluginLoadError(name, str(exc)) from exc
                self.load_errors[name] = str(exc)
                self.unregister(exc.plugin)

    # -- calls on the hot path -------------------------------------------------------

    def call(self, name: str, /, **kwargs: Any) -> Any:
        """``self.hook.<name>(**kwargs)``, for the hooks every message goes through.

        A hook with exactly one implementation that is not a wrapper (the usual
        case: ``inbound_accept``, ``outbound_send``) has it called directly, with
        the result pluggy would give (a ``firstresult`` hook's value, else the
        list of non-None results). That skips pluggy's per-call argument checks
        and call loop: ~2 µs a call, two calls a message. Any other hook, any
        change of registrations, and hook-call monitoring (tracing) go through
        pluggy as usual.
        """
        direct = self._direct.get(name)
        if direct is None:
            direct = self._direct[name] = self._direct_call(name)
        return direct(kwargs)

    def _direct_call(self, name: str) -> Callable[[dict[str, Any]], Any]:
        caller = getattr(self.hook, name)
        impls = caller.get_hookimpls()
        spec = caller.spec
        # A spec argument with a default (pluggy >= 1.7 fills it in; ``kwargnames``
        # names them in every version) needs pluggy's call.
        if (self._monitored or spec is None or spec.kwargnames or len(impls) != 1
                or impls[0].wrapper or impls[0].hookwrapper):
            return lambda kwargs: caller(**kwargs)
        function, wanted = impls[0].function, tuple(impls[0].argnames)
        if set(wanted) == set(spec.argnames):
            def call(kwargs: dict[str, Any]) -> Any:
                return function(**kwargs)
        else:  # the implementation takes a subset of the arguments
            def call(kwargs: dict[str, Any]) -> Any:
                return function(**{arg: kwargs[arg] for arg in wanted})
        if spec.opts.get("firstresult"):
            return call

        def results(kwargs: dict[str, Any]) -> list[Any]:
            result = call(kwargs)
            return [] if result is None else [result]
        return results

    def register(self, plugin: Any, name: str | None = None) -> str | None:
        self._direct.clear()
        try:
            return super().register(plugin, name)
        except pluggy.PluginValidationError:
            # pluggy before 1.7 raises this halfway: the plugin stays registered with
            # the hooks before the bad one. A plugin that fails validation is not loaded.
            if self.is_registered(plugin):
                super().unregister(plugin)
            raise

    def unregister(self, plugin: Any = None, name: str | None = None) -> Any:
        self._direct.clear()
        return super().unregister(plugin, name)

    def add_hookspecs(self, module_or_class: Any) -> None:
        self._direct.clear()
        super().add_hookspecs(module_or_class)

    def add_hookcall_monitoring(self, before: Any, after: Any) -> Callable[[], None]:
        # For good: after an undo, calls simply keep going through pluggy.
        self._monitored = True
        self._direct.clear()
        return super().add_hookcall_monitoring(before, after)

    # -- introspection --------------------------------------------------------------

    def hook_names(self, plugin: object) -> list[str]:
        """The hooks a registered plugin implements, sorted."""
        return sorted(caller.name for caller in self.get_hookcallers(plugin) or [])

    def plugin_infos(self, *, include_builtins: bool = False) -> list[PluginInfo]:
        """Every loaded or failed plugin, sorted by name."""
        owners = _entry_point_distributions()
        kernel_version = _kernel_version()
        infos: list[PluginInfo] = []
        for name, plugin in self.list_name_plugin():
            if plugin is None:  # blocked
                continue
            builtin = name in self.builtin_names
            if builtin and not include_builtins:
                continue
            if builtin:
                dist, version = "chatkernel", kernel_version
            else:
                dist, version = owners.get(name, (None, None))
            infos.append(PluginInfo(name, version, dist, self.hook_names(plugin), builtin))
        for name, reason in self.load_errors.items():
            builtin = name in BUILTIN_PLUGINS
            if builtin and not include_builtins:
                continue
            dist, version = ("chatkernel", kernel_version) if builtin else owners.get(
                name, (None, None))
            infos.append(PluginInfo(name, version, dist, [], builtin, error=reason))
        return sorted(infos, key=lambda info: info.name)


async def await_maybe(value: Any) -> Any:
    """What a hook answered, awaited if it is awaitable: hooks may answer with a
    value or an awaitable of one (so may command handlers)."""
    # A coroutine or None first: what hooks answer nearly always, and
    # inspect.isawaitable's fallback is an ABC check. (Every message passes here.)
    if type(value) is CoroutineType or (value is not None and inspect.isawaitable(value)):
        return await value
    return value


def collect_registered(hook: Any, kind: str, base: type | None = None) -> dict[str, Any]:
    """Call a ``register_*`` hook and collect what was registered, by ``name``.

    Each item needs a non-empty string ``name`` (and must subclass ``base``
    when given). pluggy calls the newest plugin first, so the first
    registration of a name wins: an installed plugin replaces a built-in.
    """
    found: dict[str, Any] = {}

    def register(item: Any) -> None:
        name = getattr(item, "name", None)
        if base is not None and not (isinstance(item, type) and issubclass(item, base)):
            label = name if isinstance(name, str) and name else item
            raise TypeError(f"{kind} {label!r} is not a chatkernel.{base.__name__} "
                            f"subclass: {item!r}")
        if not isinstance(name, str) or not name:
            raise TypeError(f"a registered {kind} needs a non-empty string name: {item!r}")
        found.setdefault(name, item)

    hook(register=register)
    return found


def collect_channels(pm: "PluginManager") -> "dict[str, type[Channel]]":
    """Channel types by name, from every plugin's ``register_channels``. Each type's
    :attr:`Channel.secret_patterns` join the log redaction, and the renderers of
    ``register_markups`` become nameable in this manager's kernel (``pm.markups``)."""
    from chatkernel.core.logs import secret_filter
    from chatkernel.sdk.channel import Channel, compiled_secret_patterns
    from chatkernel.sdk.markup import MarkdownRenderer

    pm.markups = collect_registered(pm.hook.register_markups, "markup", MarkdownRenderer)
    channels = collect_registered(pm.hook.register_channels, "channel", Channel)
    for channel in channels.values():
        secret_filter.add_patterns(*compiled_secret_patterns(channel))
    return channels


def config_view(config: Any) -> "ConfigView":
    """What hooks are handed of a :class:`~chatkernel.core.config.KernelConfig`: the
    read-only :class:`chatkernel.hookspecs.ConfigView`."""
    from types import MappingProxyType

    from chatkernel.hookspecs import AccountView, ChannelView, ConfigView, GatewayView

    def channel(section: Any) -> ChannelView:
        accounts = {name: AccountView(enabled=table.get("enabled", True) is not False)
                    for name, table in section.accounts.items()}
        return ChannelView(enabled=section.enabled, accounts=MappingProxyType(accounts))

    channels = {name: channel(section) for name, section in config.channels.items()
                if name != "defaults"}
    return ConfigView(gateway=GatewayView(listen=config.gateway.listen),
                      channels=MappingProxyType(channels))


def implied_accounts(pm: "PluginManager", config: Any) -> dict[str, dict[str, dict[str, Any]]]:
    """The accounts plugins say a gateway runs though the config lists none of them
    (the ``implied_accounts`` hook): ``{channel: {account: its table}}``, in the order
    the plugins were registered. For a channel two plugins imply, the one registered
    last wins (an installed plugin's over a built-in's)."""
    found: dict[str, dict[str, dict[str, Any]]] = {}
    hooked = pm.hook.implied_accounts(config=config_view(config))
    for answer in reversed(hooked):  # pluggy: newest first
        if not isinstance(answer, dict) or not all(
                isinstance(accounts, dict) and all(isinstance(table, dict)
                                                   for table in accounts.values())
                for accounts in answer.values()):
            raise TypeError("an implied_accounts hook must return {channel: {account: "
                            f"table}} or None, not {answer!r}")
        for channel, accounts in answer.items():
            found[channel] = {name: dict(table) for name, table in accounts.items()}
    return found


def _entry_points() -> list[Any]:
    """The group's entry points, from stevedore's entry-point cache, importing nothing
    (a manager asked for no names loads none)."""
    from stevedore import NamedExtensionManager

    return NamedExtensionManager(GROUP, names=[]).list_entry_points()


def _entry_point_distributions() -> dict[str, tuple[str, str]]:
    """entry-point name -> (distribution, version) for the ``chatkernel`` group."""
    from importlib.metadata import distributions

    owners: dict[str, tuple[str, str]] = {}
    for dist in distributions():
        for ep in dist.entry_points:
            if ep.group == GROUP:
                owners.setdefault(ep.name, (dist.metadata["Name"], dist.version))
    return owners


def _kernel_version() -> str:
    from chatkernel import __version__

    return __version__


_manager: PluginManager | None = None


def get_plugin_manager() -> PluginManager:
    """The process-wide plugin manager, loaded on first use."""
    global _manager
    if _manager is None:
        _manager = PluginManager()
        _manager.load()
    return _manager


def reset_plugin_manager() -> None:
    """Forget the process-wide plugin manager (tests, reloads)."""
    global _manager
    _manager = None
