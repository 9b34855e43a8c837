"""Request and response shapes of the memory API (MIRIX client 0.1.7 shapes), one module per
resource: meta agents, memories, retrieval."""
