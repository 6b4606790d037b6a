"""Audit logging: the policy (which requests are recorded, at which level), the
events built for each stage of a request, and the backends that write them."""
