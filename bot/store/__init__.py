"""Persistence in SQLite (sqlite-utils): the store of diagnoses, findings and feedback (store), its schema migrations
(migrations), and the journal of accepted work that a restart resumes (journal). May import only bot.settings from
bot."""
