"""Validating admission policies: which requests a policy and its bindings match
(``matching``), the policies compiled once per generation and evaluated
(``validator``), and where both come from: the watch cache (``source``). The plugin
that runs them is ``admission/plugins/validatingadmissionpolicy.py``."""
