"""The FastAPI web admin: instances, table mirrors, replays, monitoring, users."""
