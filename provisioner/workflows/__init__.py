"""Workflows: multi-step jobs over a whole site, driven by the state store.

up.py      every node from power-off to ready (inspect, boot, wait for the OS, configure,
           verify), resumable; report.py: what `up` would do (plan) and where nodes are
           (status), as documented JSON.
upgrade/   `provision upgrade apply` on the engine: apply (state, lease, CI), rolling (the
           batches), steps (cordon, drain, uncordon, cluster gate).
"""
