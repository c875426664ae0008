"""How to install one of evtrain's extras (``pyproject.toml``'s optional dependencies), said the
same way by every message that needs one.

evtrain is not on the package index, so pip finds no "evtrain" there to add an extra to: an
extra is installed from where evtrain itself came from.  :func:`install_command` reads that from
the installed distribution's ``direct_url.json`` (PEP 610, written by pip): a checkout (editable
or not), a wheel or source archive, or a Git URL.  Where it cannot tell, it names the command
for a checkout.  README.md's "Installing extras" section says the same for people.
"""

from __future__ import annotations

import functools
import json
import shlex
from importlib import metadata
from typing import Any
from urllib.parse import unquote, urlparse

EXTRAS_SECTION = "README.md, 'Installing extras'"
"""Where the documentation says how to install an extra."""


def install_hint(extra: str) -> str:
    """``install evtrain's '<extra>' extra: <command> (README.md, 'Installing extras')``."""
    return f"install evtrain's {extra!r} extra: {install_command(extra)} ({EXTRAS_SECTION})"


def install_command(extra: str) -> str:
    """The pip command that adds ``extra`` to this evtrain, as it was installed."""
    return command_for(_direct_url(), extra)


def command_for(direct_url: dict[str, Any] | None, extra: str) -> str:
    """The pip command that installs ``extra`` for an evtrain whose ``direct_url.json`` holds
    ``direct_url`` (``None``: no such file, or evtrain is not installed)."""
    url = str((direct_url or {}).get("url", ""))
    if url.startswith("file://"):
        path = unquote(urlparse(url).path)
        editable = bool(direct_url.get("dir_info", {}).get("editable")) if direct_url else False
        return f"pip install {'-e ' if editable else ''}{shlex.quote(f'{path}[{extra}]')}"
    vcs = (direct_url or {}).get("vcs_info")
    if url and isinstance(vcs, dict):
        revision = f"@{vcs['commit_id']}" if vcs.get("commit_id") else ""
        requirement = f"evtrain[{extra}] @ {vcs.get('vcs', 'git')}+{url}{revision}"
        return f"pip install {shlex.quote(requirement)}"
    return f"pip install -e {shlex.quote(f'.[{extra}]')} in a checkout of evtrain"


@functools.cache
def _direct_url() -> dict[str, Any] | None:
    try:
        text = metadata.distribution("evtrain").read_text("direct_url.json")
    except metadata.PackageNotFoundError:
        return None
    try:
        data = json.loads(text) if text else None
    except ValueError:
        return None
    return data if isinstance(data, dict) else None
