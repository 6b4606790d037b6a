"""What the agent reports to the API server.

* :mod:`.podstatus` - a pod's status generated from its spec and its runtime state;
* :mod:`.manager` - pod status written to the API (a static pod's to its mirror pod);
* :mod:`.nodestatus` - the Node object: registration, addresses, capacity, conditions;
* :mod:`.lease` - the node's heartbeat Lease.
"""
