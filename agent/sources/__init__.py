"""Static pod sources of the node agent and their merge.

Two sources read pods the API server does not hand out: a manifest path
(:mod:`agent.sources.file`) and a manifest URL (:mod:`agent.sources.url`). Both
decode manifests the same way and give the pods their static identity
(:mod:`agent.sources.decode`), then send whole snapshots (``Op.SET``) to
:class:`agent.sources.merge.PodConfig`, which turns the snapshots of every source
(the API-server source included) into one stream of incremental pod updates.
"""

from __future__ import annotations

from .decode import ManifestError, decode_manifest, make_static
from .merge import PodConfig

__all__ = ["ManifestError", "decode_manifest", "make_static", "PodConfig", "FileSource", "UrlSource"]


def __getattr__(name: str):
    # The sources pull in aiohttp and ctypes; import them only when asked for.
    if name == "FileSource":
        from .file import FileSource

        return FileSource
    if name == "UrlSource":
        from .url import UrlSource

        return UrlSource
    raise AttributeError(name)
