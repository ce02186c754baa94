"""requirements/lowest.txt pins every direct dependency of the kernel and the channel
plugins at the lowest version its pyproject.toml admits (scripts/test-lowest runs
against those pins, so they must be the real floors)."""

from __future__ import annotations

import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parent.parent
PROJECTS = [ROOT / "pyproject.toml", *sorted(ROOT.glob("plugins/*/pyproject.toml"))]
FIRST_PARTY = {"chatkernel"}


def pins() -> dict[str, str]:
    found = {}
    for line in (ROOT / "requirements" / "lowest.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            requirement = Requirement(line)
            [spec] = requirement.specifier
            assert spec.operator == "==", f"lowest.txt: {line!r} is not an exact pin"
            found[canonicalize_name(requirement.name)] = spec.version
    return found


def floors() -> dict[str, tuple[str, str]]:
    """name -> (declared minimum, the project declaring it), over every direct run-time
    dependency and those of the ``testing`` extras (the others left out); where several projects declare one, the highest floor,
    the lowest version all of them admit."""
    found: dict[str, tuple[str, str]] = {}
    for path in PROJECTS:
        project = tomllib.loads(path.read_text())["project"]
        testing = project.get("optional-dependencies", {}).get("testing", [])
        for line in [*project["dependencies"], *testing]:
            requirement = Requirement(line)
            name = canonicalize_name(requirement.name)
            if name in FIRST_PARTY:
                continue
            minimums = [spec.version for spec in requirement.specifier
                        if spec.operator in (">=", "==")]
            assert minimums, f"{path.relative_to(ROOT)}: {line!r} declares no minimum"
            if name not in found or Version(minimums[0]) > Version(found[name][0]):
                found[name] = (minimums[0], project["name"])
    return found


def test_every_direct_dependency_is_pinned_at_its_declared_minimum():
    pinned = pins()
    for name, (minimum, project) in floors().items():
        assert name in pinned, f"requirements/lowest.txt does not pin {name} ({project})"
        # 3.9 and 3.9.0 are one version.
        assert Requirement(f"{name}=={minimum}").specifier.contains(pinned[name]), (
            f"requirements/lowest.txt pins {name}=={pinned[name]}, but {project} "
            f"declares {name}>={minimum}")
