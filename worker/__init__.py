"""The match rating worker: the running service, its store, policies, operator tools, CLI and development tools."""
