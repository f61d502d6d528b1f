"""Applying the SimpleBinlog stream to the online cache (Redis) and the real-time warehouse."""
