"""The match rating worker: the running service, its store, rating policies, operator tools, CLI and development tools."""
