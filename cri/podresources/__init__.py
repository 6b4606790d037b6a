"""The pod resources API v1 (``api.proto``) and its generated stubs: the
PodResourcesLister service the node agent serves to monitoring agents."""
