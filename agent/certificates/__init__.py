"""The agent's certificates: the client certificate from a bootstrap config (:mod:`.bootstrap`), and the
rotation of the client and serving certificates before they expire (:mod:`.rotation`)."""
