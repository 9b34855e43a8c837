"""Learning from task sessions, the way memory's extraction learns from conversations: a durable
run (``runs``: claim, fencing, budget, finish) distills each session into lessons
(``distill``), then curates the user's waiting lessons into skill versions (``curate``, pure;
``clusters`` for tool-less tasks; ``apply``, the writes), telling the model what ``prompts``
says; ``execute`` runs the steps in order. ``transcripts`` distills one finished
conversation into one experience (``POST /experiences/conversation``)."""
