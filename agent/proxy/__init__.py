"""The node service proxy: Service cluster IPs, external IPs and node ports to endpoints, in nftables.

* :mod:`agent.proxy.model` reads Services and EndpointSlices into service ports and endpoints;
* :mod:`agent.proxy.ruleset` turns them into the table's chains, maps and sets, and writes the
  ``nft`` script for a full or an incremental sync;
* :mod:`agent.proxy.nft` runs ``nft -f -``;
* :mod:`agent.proxy.localnet` sets and puts back ``route_localnet`` (node ports on 127.0.0.0/8);
* :mod:`agent.proxy.conntrack` deletes stale UDP conntrack entries over netlink;
* :mod:`agent.proxy.proxier` watches the API server and syncs (``--proxy-mode``, ``--proxy-cleanup``).
"""
