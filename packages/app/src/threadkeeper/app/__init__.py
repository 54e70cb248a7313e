"""threadkeeper.app — the composition root: configuration, DI container, agent, HTTP, CLI."""
