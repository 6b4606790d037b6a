"""CRI v1 (`runtime.v1`) for orch.

cri/api.proto      the protocol (upstream field numbers), compiled by `python -m cri.generate`
                   into cri/api_pb2.py, cri/api_pb2_grpc.py, cri/api_pb2.pyi
cri.client         CriClient: async client with deadlines and typed errors
cri.fake           FakeRuntime: an in-process CRI server for unit and scale tests
"""
