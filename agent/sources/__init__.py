"""The node agent's pod sources and their merge.

Three sources feed the agent: a manifest path (:mod:`agent.sources.file`), a
manifest URL (:mod:`agent.sources.url`) and the API server
(:mod:`agent.sources.apiserver`). The static ones decode manifests the same way
and give the pods their static identity (:mod:`agent.sources.decode`). Every
source sends whole snapshots (``Op.SET``) to :class:`agent.sources.merge.PodConfig`
(a :class:`agent.pods.PodSink`), which turns the snapshots of every source into
one stream of incremental pod updates for the pod manager and the workers.

The URL and API server sources are imported by the agent only when configured
(``--manifest-url``, cluster mode): a node without them does not load them.
"""

from __future__ import annotations

from .decode import ManifestError, decode_manifest, make_static
from .file import FileSource
from .merge import PodConfig

__all__ = ["ManifestError", "decode_manifest", "make_static", "PodConfig", "FileSource"]
