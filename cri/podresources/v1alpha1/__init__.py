"""The pod resources API v1alpha1 (``api.proto``, List only) and its generated stubs."""
