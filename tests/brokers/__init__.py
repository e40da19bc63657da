"""Real services the adapter tests talk to, started on 127.0.0.1 by pytest fixtures."""
