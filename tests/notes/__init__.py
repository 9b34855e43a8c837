"""A searchable kind from outside the memory app, installed by the test settings only: it proves
the retrieval engine serves any registered kind with no change to the engine."""
