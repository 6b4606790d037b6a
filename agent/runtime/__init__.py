"""The runtime side of the agent: CRI configs for pods and containers, volumes, the runtime manager."""
