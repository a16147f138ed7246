"""Rating policies as configuration: policy files, the ladders file, validation."""
