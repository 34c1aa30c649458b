"""Rolling upgrades to release bundles: plan (checks, batches, time), plan_bundle (components
per node), schedule (failure domains, quorum), host (roles, reboot, host gate), drift (what
`upgrade apply` recorded). The run itself (apply, rolling, steps) is in workflows/upgrade/."""
