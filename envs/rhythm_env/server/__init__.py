"""The RhythmEnv OpenEnv server: `app.app`, run by `app.main` (the `server` script)."""
