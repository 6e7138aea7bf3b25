"""A diagnosis's fix as a unified diff of the user's own config or launch script (patch), and where each change goes
in which kind of file (target). May import only bot.answer from bot."""
