"""The media-path policy over hostile paths: nothing outside the allowed roots passes."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chatkernel.core.outbound.policy import allowed_roots, default_media_policy, resolve_media_path

SEGMENTS = ["..", ".", "a", "b.txt", "inside-link", "outside-link", "etc", "passwd", "\x00",
            "a\x00b", "~", "//", "tmp"]


@pytest.fixture(scope="module")
def workspace(tmp_path_factory):
    """A workspace with links in and out. It lies under the temp dir (an allowed
    root too), so the escapes the tests try aim at /etc."""
    ws = tmp_path_factory.mktemp("policy") / "workspace"
    (ws / "a").mkdir(parents=True)
    (ws / "a" / "b.txt").write_text("ok")
    (ws / "b.txt").write_text("ok")
    (ws / "inside-link").symlink_to(ws / "a")
    (ws / "outside-link").symlink_to("/etc")
    return ws


def decide(raw: str, workspace: Path, level: str):
    try:
        if "\x00" in raw:
            raise ValueError("embedded null byte")
        path = resolve_media_path(raw, workspace)
    except (ValueError, OSError, RuntimeError):
        return None, None  # refused before the policy: not a usable path
    return path, default_media_policy(path, workspace, level)


@pytest.mark.slow
@settings(max_examples=400, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(parts=st.lists(st.sampled_from(SEGMENTS), min_size=1, max_size=8),
       absolute=st.booleans(), level=st.sampled_from(["readonly", "standard"]))
def test_no_path_outside_the_workspace_or_temp_dir_passes(workspace, parts, absolute, level):
    raw = ("/" if absolute else "") + "/".join(parts)
    path, verdict = decide(raw, workspace, level)
    if verdict is None or not verdict:
        return
    roots = allowed_roots(workspace)
    assert any(path == root or root in path.parents for root in roots), (raw, path)
    assert path == path.resolve()  # what was judged is what would be read
    assert path.is_file()


def test_named_escapes_are_refused(workspace):
    for raw in ("/etc/passwd", "outside-link/passwd", "../" * 30 + "etc/passwd",
                "a/../../" + "../" * 30 + "etc/hostname", str(Path("/etc") / "hosts")):
        path, verdict = decide(raw, workspace, "standard")
        assert verdict is not None and not verdict, raw
        assert "outside the workspace" in verdict.reason
    for raw in ("b.txt\x00.png", "\x00"):
        assert decide(raw, workspace, "standard") == (None, None)


def test_links_that_stay_inside_pass_and_full_access_reads_anywhere(workspace):
    path, verdict = decide("inside-link/b.txt", workspace, "standard")
    assert verdict and path == (workspace / "a" / "b.txt").resolve()
    path, verdict = decide("outside-link/passwd", workspace, "full")
    assert verdict and path == Path("/etc/passwd").resolve()
    assert Path(tempfile.gettempdir()).resolve() in allowed_roots(workspace)
    assert os.access(path, os.R_OK)
