"""The hosts tier: jobs across hosts emulated by network namespaces (root)."""
