"""Development tools outside the production import path: bench, demo, embedded servers, data generation."""
