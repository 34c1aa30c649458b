"""`provision upgrade apply` as steps over the engine (apply, rolling, steps)."""
