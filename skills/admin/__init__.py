"""Experiences, the phrasings of their actions and the recommendations made from them, learning
runs, and skills with their versions. Recommendations and versions are an audit record;
experiences change through the API (their index follows every change), so here they are read.
Skills are curated here: an edit is a new version written by the skills service, versions
compare side by side and restore, and skills are deprecated and restored."""

from skills.admin import dashboard, experiences, runs, skills, user_page  # noqa: F401  (they register)
