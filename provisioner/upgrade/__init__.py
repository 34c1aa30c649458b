"""Rolling upgrades to release bundles: plan (checks, batches, time), schedule (failure
domains, quorum), rolling (the batches on the step engine), steps (cordon, drain,
uncordon, cluster gate), host (roles, reboot, host gate), apply (state, lease, CI)."""
