"""The device plugin API v1beta1 (``api.proto``) and its generated stubs: the node
agent's Registration service and the DevicePlugin service plugins serve."""
