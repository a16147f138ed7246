"""The `ratings` command line, one module per command group."""
